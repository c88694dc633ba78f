"""Reads outputs with the trainers' own libraries, in a process of its own:
``python -m tests.e2e.streaming_readers mds|litdata DIR ...`` prints one JSON
line per directory, its samples in the library's order (lists of ints, ints).
``mds`` takes ``DIR`` or ``DIR:SPLIT`` (``StreamingDataset(local=DIR, split=SPLIT)``);
``litdata-tokens BLOCK DIR ...`` reads with ``TokensLoader(block_size=BLOCK)``.

``modernbert-streaming|modernbert-packed MAX_SEQ_LEN PAD_ID DIR:SPLIT ...``
reads as ModernBERT's own data code does (AnswerDotAI/ModernBERT
``src/text_data.py`` and ``src/sequence_packer.py`` at 8c57a0f; not on PyPI, so
its contract is implemented here from those lines, never copied):

- ``StreamingTextDataset`` (``streaming: true``, every yaml's default): the
  ``split`` must be a directory of ``local`` (text_data.py 175-178), the
  dataset is MosaicML's ``StreamingDataset`` with the yaml defaults
  ``build_streaming_dataset`` passes (319-340), and a sample's ids are
  ``np.frombuffer(sample["input_ids"], np.int64)``, its length
  ``len(sample["input_ids"])``, padded or cut to ``max_seq_len`` with an
  attention mask of ones then zeros (212-242);
- ``NoStreamingDataset`` (``streaming: false``) with the sequence packer:
  ``local/split/index.json``, each shard by streaming's ``reader_from_json``,
  its raw file checked and ``validate``d, samples found by streaming's
  ``Spanner``, every ndarray cut to ``max_seq_len``, the rest dropped
  (447-516); the packer takes each ``item["input_ids"]`` (sequence_packer.py
  227-228) into int64 rows of pads (429-431) at the end of a row's tokens,
  recording cumulative lengths (452-457).

MosaicML's ``streaming`` package imports ``streaming.vision`` (CIFAR-10,
ImageNet) from its ``__init__``, and that needs torchvision, whose PyPI build
is a CUDA one that cannot load beside the CPU torch the suite's environment
pins (``operator torchvision::nms does not exist``; that environment holds
streaming installed ``--no-deps``, its pins conflicting with transformers 5).
Only where torchvision cannot be imported, the image datasets' module is
replaced by an empty one before the import; the reader (``streaming.base``) is
MosaicML's own, untouched.  Each JSON line says which (``"vision"``:
``"streaming"`` or ``"stub"``): the readers' own venv (the ``readers`` extra,
scripts/readers-venv.sh) must read with streaming's own.  Run apart so that
stand-in never reaches the test process, and so that each run's shared memory
(streaming's) is released with it.
"""

from __future__ import annotations

import json
import os
import sys
import types

import numpy as np


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _streaming():
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError):  # none, or PyPI's CUDA build beside a CPU torch
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    import streaming

    return streaming


def _vision() -> str:
    """Whether ``streaming.vision`` is streaming's own module or the empty stand-in."""
    module = sys.modules.get("streaming.vision")
    return "none" if module is None else "streaming" if getattr(module, "__file__", None) else "stub"


def read_mds(where: str) -> list[dict]:
    directory, _, split = where.partition(":")
    dataset = _streaming().StreamingDataset(local=directory, split=split or None, shuffle=False, batch_size=1)
    return [{key: _plain(value) for key, value in sample.items()} for sample in dataset]


def read_modernbert_streaming(where: str, max_seq_len: int, pad_id: int) -> list[dict]:
    """StreamingTextDataset's reading of a pre-tokenized sample, with its yaml defaults."""
    local, _, split = where.partition(":")
    if os.path.isdir(local) and split not in set(os.listdir(local)):
        raise ValueError(f"local directory {local} does not contain split {split}")
    dataset = _streaming().StreamingDataset(
        local=local, split=split, download_retry=2, download_timeout=60, validate_hash=None, keep_zip=False,
        epoch_size=None, predownload=100_000, partition_algo="orig", num_canonical_nodes=128, batch_size=8,
        shuffle=split == "train", shuffle_algo="py1s", shuffle_seed=9176, cache_limit=None)
    out = []
    for index in range(len(dataset)):
        sample = dataset[index]
        seq_len = sample["len"] if "len" in sample else len(sample["input_ids"])
        try:
            input_ids = np.frombuffer(sample["input_ids"], dtype=np.int64).copy()
        except ValueError as error:  # the reader's own failure (bytes not whole int64s): reported, not hidden
            out.append({"error": str(error)})
            continue
        attention_mask = (np.frombuffer(sample["attention_mask"], dtype=np.int64).copy()
                          if "attention_mask" in sample else np.ones_like(input_ids))
        pad = max_seq_len - seq_len
        if pad > 0:
            input_ids = np.pad(input_ids, (0, pad), constant_values=pad_id)
            attention_mask = np.pad(attention_mask, (0, pad), constant_values=0)
        else:
            input_ids, attention_mask = input_ids[:max_seq_len], attention_mask[:max_seq_len]
        out.append({"input_ids": input_ids.tolist(), "attention_mask": attention_mask.tolist(), "len": int(seq_len)})
    return out


def read_modernbert_packed(where: str, max_seq_len: int, pad_id: int, rows: int = 4) -> list[dict]:
    """NoStreamingDataset's samples through the packer's contract: each packed row, and where its sequences end."""
    streaming = _streaming()
    from streaming.base.format import reader_from_json
    from streaming.base.spanner import Spanner

    local, _, split = where.partition(":")
    index = json.load(open(os.path.join(local, split, "index.json")))
    shards = []
    for info in index["shards"]:
        shard = reader_from_json(local, split, info)
        raw = os.path.join(shard.dirname, shard.split, shard.raw_data.basename)
        assert os.path.isfile(raw), f"Raw file {raw} does not exist"
        shard.validate(True)
        shards.append(shard)
    spanner = Spanner(np.array([shard.samples for shard in shards], np.int64))
    samples = []
    for position in range(int(sum(shard.samples for shard in shards))):
        shard_id, sample_id = spanner[position]
        sample = shards[shard_id][sample_id]
        sample = {key: value[:max_seq_len] for key, value in sample.items() if isinstance(value, np.ndarray)}
        samples.append(sample)
    del streaming
    # The packer's side of the contract: item["input_ids"] into int64 rows of pads, end to end.
    width = rows * max_seq_len
    packed: list[dict] = []
    batch = np.full((rows, width), pad_id, dtype=np.int64)
    ends = [[0] for _ in range(rows)]
    for sample in samples:
        seq = sample["input_ids"]
        if not len(seq):
            continue
        room = [width - e[-1] for e in ends]
        fits = [r for r in range(rows) if room[r] >= len(seq)]
        if not fits:
            packed += [{"row": row.tolist(), "cu_seq_lens": e} for row, e in zip(batch, ends)]
            batch = np.full((rows, width), pad_id, dtype=np.int64)
            ends = [[0] for _ in range(rows)]
            fits = list(range(rows))
        best = min(fits, key=lambda r: width - ends[r][-1])
        batch[best, ends[best][-1]:ends[best][-1] + len(seq)] = seq
        ends[best].append(ends[best][-1] + len(seq))
    packed += [{"row": row.tolist(), "cu_seq_lens": e} for row, e in zip(batch, ends) if len(e) > 1]
    return packed


def read_litdata(directory: str) -> list[dict]:
    import litdata

    dataset = litdata.StreamingDataset(directory)
    return [{key: _plain(value) for key, value in sample.items()} for sample in dataset]


def read_litdata_tokens(directory: str, block_size: int) -> list[list[int]]:
    """LitData's pretraining reader: the token stream in blocks of ``block_size``, in order."""
    from litdata import StreamingDataset, TokensLoader

    dataset = StreamingDataset(directory, item_loader=TokensLoader(block_size=block_size), shuffle=False)
    return [np.asarray(dataset[i]).tolist() for i in range(len(dataset))]


def main(argv: list[str]) -> None:
    """One reader's arguments, or several readers' separated by ``--`` (one process: streaming imported once)."""
    if "--" in argv:
        cut = argv.index("--")
        main(argv[:cut])
        main(argv[cut + 1:])
        return
    if argv[0] == "litdata-tokens":
        for directory in argv[2:]:
            print(json.dumps({"directory": directory, "samples": read_litdata_tokens(directory, int(argv[1]))}),
                  flush=True)
        return
    if argv[0].startswith("modernbert-"):
        read = {"modernbert-streaming": read_modernbert_streaming, "modernbert-packed": read_modernbert_packed}[argv[0]]
        max_seq_len, pad_id = int(argv[1]), int(argv[2])
        for where in argv[3:]:
            samples = read(where, max_seq_len, pad_id)
            print(json.dumps({"directory": where, "samples": samples, "vision": _vision()}), flush=True)
        return
    read = {"mds": read_mds, "litdata": read_litdata}[argv[0]]
    for directory in argv[1:]:
        samples = read(directory)
        print(json.dumps({"directory": directory, "samples": samples, "vision": _vision()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
