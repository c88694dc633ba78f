"""--objective tokens --output-format megatron through the real command lines."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from common.writers.megatron import IndexedDataset
from tests.support.factories import finished_by_fleets
from tests.support.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--task-size", "512K", "--objective", "tokens", "--output-format", "megatron"]


def test_megatron_output_is_the_same_whatever_the_fleet(tmp_path):
    outputs = finished_by_fleets(tmp_path, *JOB)
    names = sorted(p.name for p in outputs[0].glob("part-*"))
    assert names == sorted(p.name for p in outputs[1].glob("part-*")) and len(names) == 8
    for name in names:
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(outputs[0])], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr

    blend = (outputs[0] / "megatron_data_path.txt").read_text().split()
    weights, prefixes = [int(w) for w in blend[0::2]], blend[1::2]
    entries = manifest(outputs[0]).values()
    assert sum(weights) == sum(e["tokens"] for e in entries) > 0
    documents = 0
    for weight, prefix in zip(weights, prefixes):
        dataset = IndexedDataset.parse_index(open(prefix + ".idx", "rb").read()).with_data(
            open(prefix + ".bin", "rb").read())
        assert int(dataset.sequence_lengths.sum()) == weight
        documents += len(dataset.document_indices) - 1
    assert documents == sum(e["documents"] for e in entries) == 103


def test_masked_instances_are_refused_before_any_work(tmp_path):
    need_shared()
    result = run_ventilator(WIKI, tmp_path / "out", "--vocab-file", VOCAB, "--output-format", "megatron")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "megatron holds token sequences, not finished instances: use --objective tokens" in last
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def paragraph_corpus(path) -> int:
    """The shared sample as one JSON Lines document per paragraph of two or more sentences: some 3,400
    documents, enough that a 949,50,1 split leaves each split some (Megatron splits by documents)."""
    import json

    from tests.support.web_corpora import wiki_articles

    count = 0
    with open(path, "w") as f:
        for article in wiki_articles():
            for i, paragraph in enumerate(article.text.split("\n")):
                if ". " in paragraph:
                    f.write(json.dumps({"id": f"{article.id}-{i}", "text": paragraph}) + "\n")
                    count += 1
    return count


class BertVocab:
    """The BERT vocabulary as the tokenizer object megatron-core's datasets read (ids and pieces only)."""

    def __init__(self, path):
        pieces = open(path).read().splitlines()
        ids = {piece: i for i, piece in enumerate(pieces)}
        self.unique_identifiers = {"class": "BertVocab", "path": str(path)}
        self.vocab_size, self.inv_vocab = len(pieces), dict(enumerate(pieces))
        self.cls, self.sep, self.pad, self.mask = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"], ids["[MASK]"]


def build_bert_splits(output, cache, sizes=(200, 40, 10)):
    """megatron-core's own BlendedMegatronDatasetBuilder over OUT/megatron_data_path.txt, split 949,50,1,
    in a gloo process group of one (as a CPU-only trainer would call it)."""
    import torch.distributed as dist
    from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDataset, BERTMaskedWordPieceDatasetConfig
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.utils import get_blend_from_list

    config = BERTMaskedWordPieceDatasetConfig(
        random_seed=1234, sequence_length=128, split="949,50,1", path_to_cache=str(cache),
        blend=get_blend_from_list((output / "megatron_data_path.txt").read_text().split()),
        tokenizer=BertVocab(VOCAB), masking_probability=0.15, short_sequence_probability=0.1, masking_max_ngram=3,
        masking_do_full_word=True, masking_do_permutation=False, masking_use_longer_ngrams=False,
        masking_use_geometric_distribution=False, classification_head=True)
    dist.init_process_group("gloo", init_method=f"file://{cache}/rendezvous", rank=0, world_size=1)
    try:
        return BlendedMegatronDatasetBuilder(BERTMaskedWordPieceDataset, list(sizes), lambda: True, config).build()
    finally:
        dist.destroy_process_group()


def test_megatron_core_builds_bert_splits_from_the_merged_output(tmp_path):
    """The merge stage's point: megatron-core's BlendedMegatronDatasetBuilder reads the merged pairs with a
    949,50,1 split, where the per-task pairs (a few hundred documents each) leave the test split empty and
    its masked dataset fails (IndexError in masked_dataset.py). Every sample's two segments are runs of one
    document's tokens, as written."""
    need_shared()
    pytest.importorskip("megatron.core", reason="megatron-core is in the test extras")
    corpus = tmp_path / "paragraphs.jsonl"
    documents = paragraph_corpus(corpus)
    job = [*JOB[:3], "256K", *JOB[4:], "--megatron-level", "sentence", "--workers", "2"]

    unmerged = tmp_path / "unmerged"
    result = run_ventilator(corpus, unmerged, *job, "--megatron-merge-size", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len((unmerged / "megatron_data_path.txt").read_text().split()) // 2 > 2
    (tmp_path / "cache0").mkdir()
    with pytest.raises(IndexError):
        build_bert_splits(unmerged, tmp_path / "cache0")

    merged = tmp_path / "merged"
    result = run_ventilator(corpus, merged, *job, "--megatron-merge-size", "500K")
    assert result.returncode == 0, result.stderr[-3000:]
    blend = (merged / "megatron_data_path.txt").read_text().split()
    prefixes = blend[1::2]
    assert len(prefixes) == 2 and all("/megatron/merged-" in p for p in prefixes)
    by_document = {}
    for prefix in prefixes:
        dataset = IndexedDataset.parse_index(open(prefix + ".idx", "rb").read()).with_data(
            open(prefix + ".bin", "rb").read())
        for document in dataset.documents():
            by_document[len(by_document)] = np.concatenate(document).astype(np.int32)
    assert len(by_document) == documents == sum(e["documents"] for e in manifest(merged).values())
    haystack = b"".join(b"\xff\xff\xff\xff" + d.tobytes() for d in by_document.values())

    (tmp_path / "cache1").mkdir()
    splits = build_bert_splits(merged, tmp_path / "cache1")
    vocab, masked_tokens = BertVocab(VOCAB), 0
    for split, size in zip(splits, (200, 40, 10)):
        assert split is not None and len(split) >= size
        for i in range(0, size, 5):
            sample = split[i]
            masked = sample["labels"] != -1
            assert (sample["loss_mask"] == masked).all() and masked.sum() <= 0.2 * len(masked)
            masked_tokens += masked.sum()
            tokens = np.where(masked, sample["labels"], sample["text"])[sample["padding_mask"] == 1]
            assert tokens[0] == vocab.cls and tokens[-1] == vocab.sep
            ends = np.flatnonzero(tokens == vocab.sep)
            assert len(ends) == 2, "two segments (classification head)"
            for segment in (tokens[1:ends[0]], tokens[ends[0] + 1:ends[1]]):
                found = haystack.find(segment.astype(np.int32).tobytes())
                assert found >= 0 and found % 4 == 0, "a segment that is no run of one document's tokens"
    assert masked_tokens > 0


def test_token_batches_check_the_bin_read_with_its_index(tmp_path):
    """The loader reads a .idx with its .bin (listed with no records of its own): the .bin's sha256 is the
    manifest's too.  One token changed by one bit keeps both files' framing, so nothing else would catch it.
    (Document level: at sentence level the manifest counts sentences and the loader's samples are documents.)"""
    import json

    from loader.samples import SampleCache
    from loader.shards import DatasetError, open_dataset
    from tests.support.web_corpora import wiki_articles

    need_shared()
    corpus = tmp_path / "data" / "docs.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(json.dumps({"id": a.id, "text": a.text}) + "\n" for a in wiki_articles()[:6]))
    output = tmp_path / "out"
    result = run_ventilator(corpus.parent, output, *JOB[:3], "64K", *JOB[4:], "--megatron-level", "document",
                            "--workers", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    storage, shards = open_dataset(str(output))
    entries = manifest(output).values()  # each document's tokens and its EOD:
    assert SampleCache(storage, shards, 1 << 30).lengths().sum() == sum(e["tokens"] + e["documents"] for e in entries)
    blob = output / shards.names[0].replace(".idx", ".bin")
    data = bytearray(blob.read_bytes())
    data[len(data) // 2 & ~1] ^= 1
    blob.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=f"{blob.name}: its sha256 differs from the manifest's"):
        SampleCache(storage, shards, 1 << 30).lengths()


def test_the_loader_refuses_a_sentence_level_output_naming_why(tmp_path):
    """A sentence-level output's records (the manifest's) are sentences, the format reads documents back: the
    loader refuses it in one line that says so, not as a file that changed ("3 records, the manifest says 5");
    fixed-size batches are refused before that, its records varying in length."""
    from tests.support.helpers import free_ports
    from tests.support.web_corpora import wiki_articles

    need_shared()
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"id": a.id, "text": a.text}) + "\n" for a in wiki_articles()[:6]))
    output = tmp_path / "out"
    result = run_ventilator(corpus, output, "--vocab-file", VOCAB, "--task-size", "24K", "--objective", "tokens",
                            "--segmenter", "line", "--holdout-fraction", "0.25", "--output-format", "megatron",
                            "--megatron-level", "sentence", "--workers", "2", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # Fixed-size batches: its records vary in length, which is refused first, naming what to use instead.
    (port,) = free_ports(1)
    fixed = subprocess.run([sys.executable, "-m", "loader", "--data", str(output), "--port", str(port), "--bind-host",
                            "127.0.0.1", "--batch-size", "4"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 2 and "serve them with --batch-tokens N" in fixed.stderr, fixed.stderr[-2000:]
    assert "the manifest says" not in fixed.stderr
    for batching in (["--batch-tokens", "4096"],):
        (port,) = free_ports(1)
        refused = subprocess.run([sys.executable, "-m", "loader", "--data", str(output), "--port", str(port),
                                  "--bind-host", "127.0.0.1", *batching], cwd=REPO, capture_output=True, text=True,
                                 timeout=120)
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert refused.returncode == 1 and len(lines) == 1, refused.stderr[-2000:]
        assert "a sentence-level Megatron output (--megatron-level sentence)" in lines[0], lines[0]
        assert "--megatron-level document" in lines[0] and "the manifest says" not in lines[0]
