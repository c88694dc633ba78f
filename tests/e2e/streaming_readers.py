"""Reads outputs with the trainers' own libraries, in a process of its own:
``python -m tests.e2e.streaming_readers mds|litdata DIR ...`` prints one JSON
line per directory, its samples in the library's order (lists of ints, ints).

MosaicML's ``streaming`` package imports ``streaming.vision`` (CIFAR-10,
ImageNet) from its ``__init__``, and that needs torchvision, whose PyPI build
is a CUDA one that cannot load beside the CPU torch this suite pins
(``operator torchvision::nms does not exist``).  The image datasets are not
what is tested: their module is replaced by an empty one before the import,
and the reader (``streaming.base``) is MosaicML's own, untouched.  Run apart
so that stand-in never reaches the test process, and so that each run's
shared memory (streaming's) is released with it.
"""

from __future__ import annotations

import json
import sys
import types

import numpy as np


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def read_mds(directory: str) -> list[dict]:
    sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    from streaming import StreamingDataset

    dataset = StreamingDataset(local=directory, shuffle=False, batch_size=1)
    return [{key: _plain(value) for key, value in sample.items()} for sample in dataset]


def read_litdata(directory: str) -> list[dict]:
    import litdata

    dataset = litdata.StreamingDataset(directory)
    return [{key: _plain(value) for key, value in sample.items()} for sample in dataset]


def main(argv: list[str]) -> None:
    read = {"mds": read_mds, "litdata": read_litdata}[argv[0]]
    for directory in argv[1:]:
        print(json.dumps({"directory": directory, "samples": read(directory)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
