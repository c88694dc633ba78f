"""The peers bench's pure parts (bench/peer_counts.py): token counts read off each tool's own index files,
reconciled against the tokenizer's own count, and the table's rows.  Nothing is installed or run here: the bench
itself (``python -m bench.run --only peers``) installs the peers."""

import json
import struct

import numpy as np
import pytest

from bench.peer_counts import (
    Count,
    Measured,
    compared_ours,
    concatenated,
    concatenation_mismatch,
    failure_reason,
    marginal,
    mds_samples,
    megatron_index,
    reconcile,
    table_rows,
)


def megatron_idx(sizes: list[int], documents: int) -> bytes:
    """An .idx as Megatron-LM's indexed_dataset writes it: header, sizes, pointers, document index."""
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, len(sizes), documents)
    pointers = np.concatenate([[0], np.cumsum(np.asarray(sizes[:-1], dtype=np.int64) * 4)]).astype("<i8")
    return (header + np.asarray(sizes, dtype="<i4").tobytes() + pointers.tobytes()
            + np.arange(documents, dtype="<i8").tobytes())


def test_a_megatron_index_gives_its_sequences_and_tokens():
    index = megatron_index(megatron_idx([5, 7, 100_000], 4))
    assert (index.sequences, index.documents, index.tokens) == (3, 4, 100_012)


def test_a_file_that_is_no_megatron_index_or_is_cut_short_is_refused():
    with pytest.raises(ValueError, match="MMIDIDX header"):
        megatron_index(b"PK\x03\x04" + bytes(40))
    with pytest.raises(ValueError, match="counts ask for"):
        megatron_index(megatron_idx([5, 7, 9], 4)[:40])


def test_mds_samples_add_up_every_shard():
    index = {"version": 2, "shards": [{"samples": 10, "raw_data": {"basename": "shard.00000.mds"}},
                                      {"samples": 3, "raw_data": {"basename": "shard.00001.mds"}}]}
    assert mds_samples(json.dumps(index)) == 13


def test_each_tools_specials_and_dropped_tail_explain_its_count():
    documents, text = 100, 50_000
    counts = [
        Count("ours megatron", text, documents),
        Count("ours mds", text + 2 * 60, 60, specials_per_record=2),
        Count("megatron", text + 2 * documents, documents, specials_per_document=2),
        Count("modernbert", ((text + 2 * documents) // 1024) * 1024, 49, specials_per_document=2, tail_cut=1024),
    ]
    found = {r.tool: r for r in reconcile(counts, documents, text)}
    assert all(r.agrees for r in found.values())
    assert found["ours megatron"].why == "the text's tokens only"
    assert found["ours mds"].text_tokens == text
    assert "2 special(s) per document × 100" in found["megatron"].why
    assert -1024 < found["modernbert"].difference <= 0
    assert "the last" in found["modernbert"].why


def test_a_count_off_by_a_token_is_unexplained():
    found = reconcile([Count("datatrove", 50_000 + 2 * 100 + 1, 100, specials_per_document=2),
                       Count("modernbert", 49 * 1024 + 1, 49, specials_per_document=2, tail_cut=1024)],
                      100, 50_000)
    assert [r.agrees for r in found] == [False, False]
    assert all("+1 tokens unexplained" in r.why for r in found)


def test_a_concatenating_tool_must_drop_exactly_its_streams_tail():
    """[CLS] doc [SEP] streamed into records of exactly 1,024: 50,000 text tokens + 2 × 100 specials = 50,200, so
    49 records (50,176 tokens) and the last 24 dropped.  A record fewer, or a record that is not 1,024 long, is
    unexplained, though each is short of the stream by less than a record."""
    exact, short, uneven = reconcile([
        Count("modernbert", 49 * 1024, 49, specials_per_document=2, tail_cut=1024),
        Count("modernbert", 48 * 1024, 48, specials_per_document=2, tail_cut=1024),
        Count("modernbert", 49 * 1024 - 8, 49, specials_per_document=2, tail_cut=1024)], 100, 50_000)
    assert exact.agrees and exact.difference == -24
    assert "the last 24 of the stream's 50,200 dropped" in exact.why and "unexplained" not in exact.why
    assert not short.agrees and "-1,024 tokens unexplained" in short.why
    assert not uneven.agrees and "49 records hold 50,168 tokens, not 50,176" in uneven.why


def test_a_concatenated_mds_output_is_counted_from_its_records_int64_bytes():
    count = concatenated("modernbert", [1024 * 8, 1024 * 8, 1024 * 8], 8, 2, 1024)
    assert (count.tokens, count.records, count.specials_per_document, count.tail_cut) == (3072, 3, 2, 1024)
    with pytest.raises(ValueError, match="not a whole number of 8-byte ids"):
        concatenated("modernbert", [1024 * 8, 1023 * 8 + 4], 8, 2, 1024)


def test_rows_give_each_peers_advantage_against_its_target_and_a_peer_that_could_not_run_says_why():
    rows = table_rows("wordpiece", Measured("ours mds", 0.1),
                      [Measured("Megatron-LM", 0.85), Measured("datatrove", 0.6),
                       Measured("ModernBERT", reason="no snapshot of its repository")], 8.0)
    assert rows[0] == "| wordpiece | ours mds | 0.100 | – | |"
    assert rows[1] == "| wordpiece | Megatron-LM | 0.850 | 8.5× | yes (≥ 8×) |"
    assert rows[2] == "| wordpiece | datatrove | 0.600 | 6.0× | no (≥ 8×) |"
    assert rows[3] == "| wordpiece | ModernBERT | not run: no snapshot of its repository | n/a | |"


def test_peers_are_divided_by_the_slower_of_ours_chunked_outputs_never_a_noisy_low_figure():
    """The table once divided each peer by the least of ours' three figures, and took WordPiece MDS's 0.013 CPU-s/MB,
    below what the encoder alone costs: the one-document run it subtracts was high by chance."""
    ours = [Measured("ours megatron", 0.113), Measured("ours mds", 0.013), Measured("ours parquet", 0.053)]
    assert compared_ours(ours) == Measured("ours parquet", 0.053)
    noisy = [Measured("ours mds", reason="within noise"), Measured("ours parquet", 0.05)]
    assert compared_ours(noisy) == Measured("ours parquet", 0.05)
    nothing = compared_ours([Measured("ours megatron", 0.1), Measured("ours mds", reason="within noise")])
    assert nothing.cpu_s_per_mb is None and nothing.reason == "no chunked output of ours measured"


def test_a_concatenating_tools_records_must_be_its_streams_slices_copy_after_copy():
    """Two documents [CLS] a b [SEP] and [CLS] c [SEP] (ids 1 10 11 2, 1 12 2), 3 copies: 21 tokens, records of 4."""
    documents, stream = [[1, 10, 11, 2], [1, 12, 2]], [1, 10, 11, 2, 1, 12, 2] * 3
    assert concatenation_mismatch({0: stream[0:4], 4: stream[16:20]}, documents, 3, 4) == ""
    assert concatenation_mismatch({1: [1, 12, 2, 2]}, documents, 3, 4) == (
        "record 1 differs from the tokenizer's stream at its token 3 (of 4)")
    assert concatenation_mismatch({0: stream[0:3]}, documents, 3, 4) == (
        "record 0 differs from the tokenizer's stream at its token 3 (of 3)")
    assert concatenation_mismatch({5: stream[20:21]}, documents, 3, 4) == "record 5 lies past the stream's 21 tokens"


def test_a_full_run_that_cost_no_more_than_the_one_document_run_has_no_figure_and_no_ratio():
    """Under load a small run's marginal can come out at or below zero; it was once clamped to 1e-9 CPU-s and
    printed as a 1,358,200,000× advantage."""
    assert marginal("ours mds", 12.5, 10.5, 2.0) == Measured("ours mds", 1.0)
    noise = marginal("ours mds", 10.4, 10.5, 2.0)
    assert noise.cpu_s_per_mb is None and noise.reason == "within noise: the full run's 10.40 CPU-s ≤ the one-document run's 10.50"
    rows = table_rows("wordpiece", noise, [Measured("datatrove", 0.6)], 8.0)
    assert rows == ["| wordpiece | ours mds | not run: within noise: the full run's 10.40 CPU-s ≤ the one-document run's "
                    "10.50 | – | |", "| wordpiece | datatrove | 0.600 | n/a | |"]


def test_a_failed_peer_run_is_reported_by_its_exception_line_not_the_advice_after_it():
    output = ("python convert_dataset.py ...: exit 1\nTraceback (most recent call last):\n  File \"x.py\", line 3\n"
              "    raise OSError(\nOSError: We couldn't connect to 'https://huggingface.co' to load the files.\n"
              "Check your internet connection or see how to run the library in offline mode.\n")
    assert failure_reason(output, "RuntimeError") == "OSError: We couldn't connect to 'https://huggingface.co' to load the files."
    assert failure_reason("exit 2\nusage: tool [-h]\n", "RuntimeError") == "usage: tool [-h]"
    assert failure_reason("", "RuntimeError") == "RuntimeError"
    assert failure_reason("datasets.exceptions.DatasetNotFoundError: no c4", "x") == (
        "datasets.exceptions.DatasetNotFoundError: no c4")


def test_a_peer_snapshot_that_is_missing_or_no_repository_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    from bench.peers import PEERS, Unavailable, checkout

    modernbert = next(peer for peer in PEERS if peer.name == "modernbert")
    monkeypatch.setenv("MLM_BENCH_PEERS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLM_BENCH_MODERNBERT_DIR", raising=False)
    with pytest.raises(Unavailable, match="no snapshot of its repository: set MLM_BENCH_MODERNBERT_DIR"):
        checkout(modernbert)
    monkeypatch.setenv("MLM_BENCH_MODERNBERT_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(Unavailable, match="MLM_BENCH_MODERNBERT_DIR=.*nowhere is no directory"):
        checkout(modernbert)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("MLM_BENCH_MODERNBERT_DIR", str(tmp_path / "empty"))
    with pytest.raises(Unavailable, match="neither a checkout holding src nor a git directory holding HEAD"):
        checkout(modernbert)


def test_a_peer_without_its_snapshot_is_a_row_per_tokenizer_saying_why_and_installs_nothing(tmp_path, monkeypatch):
    from bench.peers import PEERS, ready

    modernbert = next(peer for peer in PEERS if peer.name == "modernbert")
    monkeypatch.setenv("MLM_BENCH_PEERS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MLM_BENCH_MODERNBERT_DIR", str(tmp_path / "nowhere"))
    available, rows = ready((modernbert,), ("wordpiece", "bpe"))
    assert available == {}
    assert sorted(rows) == [("bpe", modernbert.label), ("wordpiece", modernbert.label)]
    assert all("nowhere is no directory" in row.reason and row.cpu_s_per_mb is None for row in rows.values())
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").glob("modernbert-*"))
