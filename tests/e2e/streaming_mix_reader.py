"""``python -m tests.e2e.streaming_mix_reader EPOCH DIR=PROPORTION ...``: one epoch of MosaicML streaming's
mixture of our MDS outputs' training sides (``Stream(local=DIR, split="train", proportion=P)``, ``epoch_size=EPOCH``), printed as one JSON list of
each sample's input_ids.  In a process of its own for the reason tests/e2e/streaming_readers.py gives (its image
datasets' module is replaced by an empty one where torchvision cannot load; the reader is streaming's own)."""

from __future__ import annotations

import json
import sys
import types


def main(argv: list[str]) -> None:
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError):  # none, or PyPI's CUDA build beside a CPU torch
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    from streaming import Stream, StreamingDataset

    epoch, pairs = int(argv[0]), [arg.rsplit("=", 1) for arg in argv[1:]]
    streams = [Stream(local=directory, split="train", proportion=float(proportion)) for directory, proportion in pairs]
    dataset = StreamingDataset(streams=streams, epoch_size=epoch, shuffle=True, shuffle_seed=7, batch_size=1)
    print(json.dumps([[int(i) for i in sample["input_ids"]] for sample in dataset]))


if __name__ == "__main__":
    main(sys.argv[1:])
