"""The compiled kernels (common/_kernels.c): built by ``pip install .`` where a C compiler is present, and
optional, so an install without one still succeeds and runs the numpy code (common/kernels.py,
docs/design.md "Compiled kernels").  Everything else is declared in setup.cfg."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "common/_kernels.c"
#: Compiled into the module: common/kernels.py does not use a build of another version of the source.
DIGEST = hashlib.sha256((Path(__file__).resolve().parent / SOURCE).read_bytes()).hexdigest()

setup(ext_modules=[Extension("common._kernels", [SOURCE], optional=True, extra_compile_args=["-O3", "-std=c11"],
                             define_macros=[("KERNELS_SOURCE_SHA256", f'"{DIGEST}"')])])
