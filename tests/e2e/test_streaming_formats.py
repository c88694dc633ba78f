"""--output-format mds and litdata through the real command lines, read by
the trainers' own libraries (MosaicML's ``streaming.StreamingDataset``,
Lightning's ``litdata.StreamingDataset``, in a process of their own:
tests/e2e/streaming_readers.py).

One tiny corpus (24 articles of the shared sample in three JSON Lines files,
one article copied under another id), ``--objective tokens --max-seq-length
128`` with a held-out side and exact dedup.  The oracle is the tokenizers
library's encoding of each whole document, cut into [CLS] 126 tokens [SEP]
chunks.  A second run of each format has its last file vanish after planning
and its worker killed with -9: it ends rc 3 with no index; with the file back
the same command completes it, byte for byte the clean run's output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.common.writers.jobs import read_through_axis
from tests.support.cluster import Cluster
from tests.support.helpers import REPO, VOCAB, need_shared, run_ventilator
from tests.support.web_corpora import wiki_articles

pytestmark = pytest.mark.e2e

MAX = 128
JOB = ["--vocab-file", VOCAB, "--task-size", "24K", "--objective", "tokens", "--max-seq-length", str(MAX),
       "--segmenter", "line", "--holdout-fraction", "0.25", "--dedup", "exact", "--max-attempts", "2"]
FORMATS = ("mds", "litdata")
CLS, SEP, PAD = 101, 102, 0
#: Each format's sides: (training, held out) directories, relative to the output, and how its library is told them.
SIDES = {"mds": ("train", "val"), "litdata": ("", "holdout")}


def side_dir(output, fmt: str, held: bool = False):
    return output / SIDES[fmt][held] if SIDES[fmt][held] else output


def library_path(output, fmt: str, held: bool = False) -> str:
    """What the library is given: MDS's ``local:split`` (streaming_readers.py), LitData's directory."""
    return f"{output}:{SIDES[fmt][held]}" if fmt == "mds" else str(side_dir(output, fmt, held))


def all_digests(output) -> dict[str, str]:
    """Every shard's sha256 by its path under the output (each side's directory)."""
    import hashlib
    return {str(p.relative_to(output)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(output.rglob("part-*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    need_shared()
    articles = wiki_articles()[:24]
    root = tmp_path_factory.mktemp("corpus")
    rows = [{"id": a.id, "text": a.text} for a in articles] + [{"id": "copy", "text": articles[3].text}]
    for i in range(3):
        (root / f"part-{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[i * 9:(i + 1) * 9]))
    return root, [a.text for a in articles]


def oracle_chunks(texts: list[str]) -> Counter:
    """Each document's chunks as the tokenizers library makes them: [CLS] 126 tokens [SEP], none lost."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
    chunks = Counter()
    for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
        ids = encoding.ids
        for start in range(0, len(ids), MAX - 2):
            chunks[(CLS, *ids[start:start + MAX - 2], SEP)] += 1
    return chunks


def read_with_library(fmt: str, *directories) -> dict[str, list[dict]]:
    result = subprocess.run([sys.executable, "-m", "tests.e2e.streaming_readers", fmt, *map(str, directories)],
                            cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return {line["directory"]: line["samples"] for line in lines}


def verify(output) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def clean(corpus, tmp_path_factory):
    """Each format's clean run and what its library reads: {format: (output, train samples, held-out samples)}."""
    data, _ = corpus
    runs = {}
    for fmt in FORMATS:
        output = tmp_path_factory.mktemp(fmt) / "out"
        result = run_ventilator(data, output, *JOB, "--output-format", fmt, "--workers", "2", timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        train, held = library_path(output, fmt), library_path(output, fmt, held=True)
        read = read_with_library(fmt, train, held)
        runs[fmt] = (output, read[train], read[held])
    return runs


def chunk_counter(samples: list[dict]) -> Counter:
    return Counter(tuple(s["input_ids"]) for s in samples)


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_library_reads_every_chunk_of_every_kept_document(clean, corpus, fmt):
    output, train, held = clean[fmt]
    _, texts = corpus
    assert train and held, "both sides hold documents"
    assert chunk_counter(train) + chunk_counter(held) == oracle_chunks(texts), "the copy is dropped, nothing else"
    for sample in train + held:
        ids = sample["input_ids"]
        assert len(ids) <= MAX and ids[0] == CLS and ids[-1] == SEP and len(ids) > 2
    # Documents rebuilt from document_id and chunk_index: whole, in order, each on one side only.
    documents = {}
    for side, samples in (("train", train), ("held", held)):
        for s in samples:
            documents.setdefault(s["document_id"], []).append((side, s["chunk_index"], s["input_ids"][1:-1]))
    from tokenizers import BertWordPieceTokenizer

    whole = Counter(tuple(e.ids) for e in BertWordPieceTokenizer(str(VOCAB), lowercase=True).encode_batch(
        texts, add_special_tokens=False))
    rebuilt = Counter()
    for chunks in documents.values():
        assert len({side for side, _, _ in chunks}) == 1
        assert sorted(index for _, index, _ in chunks) == list(range(len(chunks)))
        rebuilt[tuple(token for _, _, ids in sorted(chunks, key=lambda c: c[1]) for token in ids)] += 1
    assert rebuilt == whole
    index = json.loads((side_dir(output, fmt) / "index.json").read_text())
    prefix = f"{SIDES[fmt][0]}/" if SIDES[fmt][0] else ""
    listed = {f["name"].removeprefix(prefix) for e in map(json.loads, (output / "manifest.jsonl").read_text().splitlines())
              for f in e["shards"] if not f.get("split")}
    assert not [name for name in listed if "/" in name], "the training side's files are in its own directory"
    names = [s["raw_data"]["basename"] for s in index["shards"]] if fmt == "mds" else \
        [c["filename"] for c in index["chunks"]]
    assert set(names) == listed and len(names) == len(listed)


def read_as_modernbert(how: str | tuple[str, ...], output, *splits: str):
    """ModernBERT's own reading (streaming_readers.py: its contract from AnswerDotAI/ModernBERT src/text_data.py)
    of each split: a list of each split's samples; for several ways (``("packed", "streaming")``), a list of those
    per way.  In one process (importing MosaicML's streaming costs seconds)."""
    hows = (how,) if isinstance(how, str) else how
    wheres = [f"{output}:{split}" for split in splits]
    argv = [arg for i, way in enumerate(hows) for arg in ([] if i == 0 else ["--"]) + [f"modernbert-{way}", str(MAX),
                                                                                        str(PAD), *wheres]]
    result = subprocess.run([sys.executable, "-m", "tests.e2e.streaming_readers", *argv], cwd=REPO,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["directory"] for line in lines] == wheres * len(hows)
    per_way = [[line["samples"] for line in lines[i * len(wheres):(i + 1) * len(wheres)]] for i in range(len(hows))]
    return per_way[0] if isinstance(how, str) else per_way


def modernbert_streamed(samples: list[dict]) -> Counter:
    """StreamingTextDataset's samples (yaml defaults, ``data_local: OUT``, ``split``), each cut at its length:
    every one padded to max_seq_len with an attention mask of its length."""
    got = Counter()
    for sample in samples:
        if "error" in sample:
            got[("error", sample["error"])] += 1
            continue
        n, ids = sample["len"], sample["input_ids"]
        assert len(ids) == MAX and ids[n:] == [PAD] * (MAX - n) and sample["attention_mask"] == [1] * n + [0] * (MAX - n)
        got[tuple(ids[:n])] += 1
    return got


def modernbert_packed(samples: list[dict]) -> Counter:
    """NoStreamingDataset's samples as the sequence packer places them: each sequence cut from its row."""
    return Counter(tuple(packed["row"][start:end]) for packed in samples
                   for start, end in zip(packed["cu_seq_lens"], packed["cu_seq_lens"][1:]))


def test_modernbert_reads_every_sample_as_written_with_its_yamls_splits(clean, corpus):
    """A ModernBERT yaml's ``data_local: OUT`` with ``split: train`` (``val`` for evaluation): StreamingTextDataset
    (``streaming: true``, its default) reads every sample's ``input_ids`` with ``np.frombuffer(..., np.int64)``,
    and NoStreamingDataset with the packer reads them as MDS decodes them; both give every written chunk."""
    output, train, held = clean["mds"]
    _, texts = corpus
    splits = ("train", "val")
    streamed = dict(zip(splits, map(modernbert_streamed, read_as_modernbert("streaming", output, *splits))))
    assert streamed["train"] == chunk_counter(train) and streamed["val"] == chunk_counter(held)
    assert streamed["train"] + streamed["val"] == oracle_chunks(texts), "every chunk, the copy dropped"
    for samples, packed in zip((train, held), read_as_modernbert("packed", output, *splits), strict=True):
        assert modernbert_packed(packed) == chunk_counter(samples)
    info = json.loads((output / "dataset_info.json").read_text())
    assert info["features"]["input_ids"] == {"dtype": "int64", "shape": [None], "mds_encoding": "ndarray:int64"}
    assert info["holdout"]["directory"] == "val"


def test_int32_ids_halve_the_bytes_and_streamingtextdataset_cannot_read_them(clean, corpus, tmp_path):
    """``--mds-ids-dtype int32``: what this format wrote before int64.  MosaicML's decode and NoStreamingDataset
    read it; StreamingTextDataset's frombuffer(int64) gets other ids (the failure int64 removes)."""
    data, _ = corpus
    output = tmp_path / "out"
    result = run_ventilator(data, output, *JOB, "--output-format", "mds", "--mds-ids-dtype", "int32",
                            "--workers", "2", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reference, train, _ = clean["mds"]
    (packed,), (misread,) = read_as_modernbert(("packed", "streaming"), output, "train")
    assert modernbert_packed(packed) == chunk_counter(train)
    written = chunk_counter(train)
    assert len(misread) == sum(written.values())
    assert not [s for s in misread if "error" not in s and tuple(s["input_ids"][:s["len"]]) in written]
    wide, narrow = (sum(p.stat().st_size for p in (root / "train").glob("*.mds")) for root in (reference, output))
    tokens = sum(len(ids) * n for ids, n in chunk_counter(train).items())
    assert wide - narrow == 4 * tokens


def test_mds_columns_are_the_ones_mdswriter_writes(tmp_path):
    """The same samples through MosaicML's own MDSWriter, with the encodings our shard declares: the same bytes."""
    script = f"""
import sys, types, json, numpy as np
sys.modules['streaming.vision'] = types.ModuleType('streaming.vision')
from streaming import MDSWriter
from common.objectives.base import Batch, Feature, Ragged
from common.storage import LocalStorage
from common.writers.mds import MdsWriter, shard_config, stored_columns
features = [Feature('input_ids', 'int32', None), Feature('document_id', 'int64', 1),
            Feature('chunk_index', 'int32', 1), Feature('weights', 'float32', 3)]
lengths = np.array([3, 300, 70000, 1])
batch = Batch({{'input_ids': Ragged(np.arange(lengths.sum(), dtype=np.int32), lengths),
               'document_id': np.array([[5], [2**62], [7], [0]]), 'chunk_index': np.array([[0], [1], [2], [3]]),
               'weights': np.arange(12, dtype=np.float32).reshape(4, 3)}})
params = MdsWriter.make_params({{}})
with MdsWriter(params, features).writing(LocalStorage('{tmp_path}/ours'), 'part-x') as out:
    out.write(batch)
    out.commit()
config = shard_config(stored_columns(params, features))
columns = dict(zip(config['column_names'], config['column_encodings']))
with MDSWriter(out='{tmp_path}/theirs', columns=columns, hashes=['sha256']) as writer:
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for i in range(4):
        writer.write({{'input_ids': np.arange(offsets[i], offsets[i + 1], dtype=np.int64),
                      'document_id': int(batch.columns['document_id'][i, 0]),
                      'chunk_index': np.int32(i), 'weights': batch.columns['weights'][i]}})
print(json.dumps(columns))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == {"chunk_index": "int32", "document_id": "int", "input_ids": "ndarray:int64",
                                         "weights": "ndarray:float32:3"}
    assert (tmp_path / "ours" / "part-x.mds").read_bytes() == (tmp_path / "theirs" / "shard.00000.mds").read_bytes()


def test_mds_and_parquet_give_the_same_samples(clean, corpus, tmp_path):
    data, _ = corpus
    output = tmp_path / "parquet"
    result = run_ventilator(data, output, *JOB, "--output-format", "parquet", "--workers", "2", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    _, train, held = clean["mds"]
    for directory, samples in ((output / "train", train), (output / "validation", held)):
        rows = [row for path in sorted(directory.glob("part-*.parquet")) for row in pq.read_table(path).to_pylist()]
        assert rows
        assert Counter(json.dumps(r, sort_keys=True) for r in rows) == \
            Counter(json.dumps(s, sort_keys=True) for s in samples)


@pytest.mark.parametrize("fmt", FORMATS)
def test_mlm_verify_passes_and_catches_a_corrupt_shard(clean, fmt, tmp_path):
    output = clean[fmt][0]
    result = verify(output)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    shard = sorted(side_dir(copy, fmt).glob(f"part-*.{fmt}"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    truncated = sorted(side_dir(copy, fmt, held=True).glob(f"part-*.{fmt}"))[0]
    truncated.write_bytes(truncated.read_bytes()[:-3])
    index_file = side_dir(copy, fmt) / "index.json"
    index = json.loads(index_file.read_text())
    index["shards" if fmt == "mds" else "chunks"].pop()  # a stale index: one file short
    index_file.write_text(json.dumps(index))
    result = verify(copy)
    assert result.returncode != 0
    report = result.stdout + result.stderr
    assert f"{shard.relative_to(copy)}: sha256 differs from the manifest's" in report
    assert f"{truncated.relative_to(copy)}: corrupt" in report
    held_index = f"{SIDES[fmt][1]}/index.json"
    assert f"{index_file.relative_to(copy)}: does not list the manifest's" in report and held_index not in report


@pytest.mark.parametrize("fmt", FORMATS)
def test_kill_9_and_a_quarantine_then_the_same_command_completes_the_output(clean, corpus, fmt, tmp_path):
    data, _ = corpus
    inputs = tmp_path / "inputs"
    shutil.copytree(data, inputs)
    victim, away = inputs / "part-2.jsonl", tmp_path / "away"
    output = tmp_path / "out"
    c = Cluster(inputs, output, [*JOB, "--output-format", fmt], tmp_path).start(1)
    try:
        c.wait_for_progress(1)
        victim.rename(away)
        c.kill(c.live_workers()[0])
        c.start_worker()
        assert c.wait() == 3, c.tail()
    finally:
        c.close()
    away.rename(victim)
    assert not (side_dir(output, fmt) / "index.json").exists(), "no index of a partial output: no trainer reads it"
    result = run_ventilator(inputs, output, *JOB, "--output-format", fmt, "--workers", "2", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reference = clean[fmt][0]
    assert all_digests(output) == all_digests(reference) and len(all_digests(output)) > 4
    for index in (str(side_dir(Path(), fmt) / "index.json"), str(side_dir(Path(), fmt, held=True) / "index.json")):
        ours, theirs = json.loads((output / index).read_text()), json.loads((reference / index).read_text())
        if fmt == "litdata":  # named after the job, which knows its input's mtimes
            ours.pop("updated_at"), theirs.pop("updated_at")
        assert ours == theirs, index
    assert not [p for p in output.rglob("*.tmp")], "a killed worker's temporary file was removed"
    read = read_with_library(fmt, library_path(output, fmt))
    assert chunk_counter(read[library_path(output, fmt)]) == chunk_counter(clean[fmt][1])
    assert verify(output).returncode == 0


def test_the_loader_serves_fixed_length_records_from_mds(corpus, tmp_path):
    """The loader reads MDS through the format's read_columns like any other output (RoBERTa's unmasked
    blocks: one length for every record, as its fixed-size batches need)."""
    from loader.client import LoaderClient
    from tests.support.loader_helpers import LoaderProcess

    data, _ = corpus
    output = tmp_path / "out"
    result = run_ventilator(data, output, "--vocab-file", VOCAB, "--task-size", "24K", "--objective", "roberta",
                            "--masking", "none", "--max-seq-length", "128", "--output-format", "mds",
                            "--workers", "2", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    written = Counter(tuple(row) for path in sorted((output / "train").glob("part-*.mds"))
                      for row in read_through_axis(output, f"train/{path.name}")[1]["input_ids"].tolist())
    served = Counter()
    with LoaderProcess(output, "--batch-size", 16) as server:
        with LoaderClient(server.address, rank=0, world_size=1) as client:
            while True:
                batch = client.next_batch()
                served.update(tuple(row) for row in batch.features["input_ids"].tolist())
                if batch.last_in_epoch:
                    break
    assert served == written and sum(written.values()) > 100


@pytest.mark.parametrize("fmt", FORMATS)
def test_mlm_report_finds_no_problem_in_a_clean_output(clean, fmt, tmp_path):
    """index.json (each side's) is the format's own file, written at the job's end: not a "foreign file";
    nor is the lock of a run on the output (common/output/lock.py, and its takeover marker)."""
    from common.output.lock import LOCK_NAME
    from common.storage import open_storage
    from report.build import build_report

    report = build_report(open_storage(str(clean[fmt][0])), input_budget_bytes=0)
    assert report["problems"] == [] and report["ok"]
    copy = tmp_path / "copy"
    shutil.copytree(clean[fmt][0], copy)
    (copy / LOCK_NAME).write_text("{}")
    (copy / f"{LOCK_NAME}.takeover-0123").write_text("{}")
    assert not [p for p in build_report(open_storage(str(copy)), input_budget_bytes=0)["problems"]
                if "foreign" in p]


@pytest.mark.parametrize("fmt", FORMATS)
def test_token_batches_refuse_a_shard_changed_since_it_was_written(clean, fmt, tmp_path):
    """The loader's --batch-tokens reads a shard through its own cache: it checks the manifest's sha256 as the
    fixed-size batches do.  One token changed by one bit keeps the file's framing (nothing else catches it)."""
    from loader.samples import SampleCache
    from loader.shards import DatasetError, open_dataset

    copy = tmp_path / "copy"
    shutil.copytree(clean[fmt][0], copy)
    storage, shards = open_dataset(str(copy))
    assert SampleCache(storage, shards, 1 << 30).lengths().sum() > 0  # as written: served
    shard = copy / shards.names[-1]
    data = bytearray(shard.read_bytes())
    data[-8] ^= 1  # a value of the last sample's last column (MDS: input_ids; LitData: chunk_index)
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="sha256 differs from the manifest's"):
        SampleCache(storage, shards, 1 << 30).lengths()


def test_token_batches_never_mask_a_chunks_cls_and_sep_without_a_tokenizer_flag(clean):
    """``--dynamic-masking --mask-id --vocab-size`` (no --vocab-file): the chunks carry no special_tokens_mask,
    so which ids are special comes from the output's own description; [CLS] and [SEP] are never masked."""
    from loader.client import LoaderClient
    from tests.support.loader_helpers import LoaderProcess

    output = clean["mds"][0]
    masked = special = 0
    with LoaderProcess(output, "--batch-tokens", 1024, "--dynamic-masking", "--mask-id", 103, "--vocab-size", 30522,
                       "--masked-lm-prob", 0.5) as server:
        with LoaderClient(server.address, rank=0, world_size=1, timeout_seconds=60) as client:
            while True:
                batch = client.next_batch()
                labels = batch.features["labels"].reshape(-1)
                masked += int((labels != -100).sum())
                special += int(np.isin(labels, [CLS, SEP]).sum())
                if batch.last_in_epoch:
                    break
    assert masked > 1000 and special == 0


def test_the_cost_counts_no_padded_positions_for_chunks_of_their_own_length(clean):
    """Chunks of at most --max-seq-length tokens are stored at their own length: the positions training reads
    are their tokens, not records x --max-seq-length (which made the cost per billion output tokens look
    cheaper by the chunks' missing padding)."""
    cost = json.loads((clean["mds"][0] / "summary.json").read_text())["cost"]
    assert cost["output_tokens_without_padding"] > 0
    assert cost["output_tokens"] is None and cost["cost_per_billion_output_tokens"] is None


def test_litdata_tokensloader_reads_a_token_stream_in_blocks(corpus, tmp_path):
    """``--litdata-items tokens``: each record's input_ids alone, as ``litdata.optimize(...,
    item_loader=TokensLoader())`` writes a pretraining stream; LitData's own ``StreamingDataset(OUT,
    item_loader=TokensLoader(block_size=N))`` gives each chunk's tokens, in order, in blocks of N (a chunk's last
    partial block dropped, as LitData does).  The default layout (a dict per record) is what
    ``StreamingDataset(OUT)`` reads, and TokensLoader is refused on it by LitData itself."""
    data, _ = corpus
    output = tmp_path / "out"
    result = run_ventilator(data, output, *JOB, "--output-format", "litdata", "--litdata-items", "tokens",
                            "--workers", "2", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    block = 50
    for side in (output, output / "holdout"):
        index = json.loads((side / "index.json").read_text())
        assert index["config"]["item_loader"] == "TokensLoader"
        expected = []
        for chunk in index["chunks"]:
            name = str((side / chunk["filename"]).relative_to(output))
            ids = read_through_axis(output, name)[1]["input_ids"].values.tolist()
            assert chunk["dim"] == len(ids)
            expected += [ids[i:i + block] for i in range(0, len(ids) - block + 1, block)]
        result = subprocess.run([sys.executable, "-m", "tests.e2e.streaming_readers", "litdata-tokens", str(block),
                                 str(side)], cwd=REPO, capture_output=True, text=True, timeout=300,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert result.returncode == 0, result.stderr[-3000:]
        (line,) = [json.loads(line) for line in result.stdout.splitlines()]
        assert line["samples"] == expected and len(expected) > 20
    assert verify(output).returncode == 0
    refused = run_ventilator(data, tmp_path / "bert", "--vocab-file", VOCAB, "--output-format", "litdata",
                             "--litdata-items", "tokens", "--workers", "1", timeout=120)
    assert refused.returncode != 0 and "--litdata-items tokens writes token sequences" in refused.stderr
    assert not (tmp_path / "bert" / "manifest.jsonl").exists()
