"""The compiled kernels (common/_kernels.c): built by ``pip install .`` where a C compiler is present, and
optional, so an install without one still succeeds and runs the numpy code (common/kernels.py,
docs/design.md "Compiled kernels").  Everything else is declared in setup.cfg."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("common._kernels", ["common/_kernels.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11"])])
