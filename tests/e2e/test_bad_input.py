"""Bad input: clear errors before work starts, or counted skips; the run completes."""

import json
import os
import random
import subprocess
import sys

import pytest

from tests.support.helpers import REPO, VOCAB, WIKI, check_shards, free_ports, need_shared, run_ventilator

pytestmark = pytest.mark.e2e


def doc(i, body):
    return f'<doc id="{i}" url="https://example.org/?curid={i}" title="T{i}">\nT{i}\n\n{body}\n</doc>\n'


def real_paragraphs():
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if len(line) > 200 and not line.startswith("<")]


@pytest.fixture(scope="module")
def bad_corpus(tmp_path_factory):
    need_shared()
    root = tmp_path_factory.mktemp("bad") / "corpus"
    paragraphs = real_paragraphs()
    good = [doc(i, "\n\n".join(paragraphs[i * 3:i * 3 + 3])) for i in range(4)]
    (root / "a_good").mkdir(parents=True)
    (root / "a_good" / "wiki_00").write_text("".join(good), encoding="utf-8")
    (root / "b_bad").mkdir()
    (root / "b_bad" / "malformed").write_text(
        "stray text before any document\n" + doc(10, paragraphs[20]) +
        '<doc id="11" url="u" title="no closing bracket"\nbody\n</doc>\n' +
        '<doc id="12" url="u" title="unclosed">\nunclosed\n\n' + paragraphs[21] + "\n", encoding="utf-8")
    (root / "b_bad" / "invalid_utf8").write_bytes(
        doc(20, paragraphs[22]).encode() + doc(21, "bad bytes here").encode().replace(b"bad bytes", b"bad \xff\xfe") +
        doc(22, paragraphs[23]).encode())
    (root / "b_bad" / "empty").write_bytes(b"")
    (root / "b_bad" / "binary").write_bytes(bytes(random.Random(1).getrandbits(8) for _ in range(4096)).replace(b"<", b"."))
    (root / "b_bad" / "no_sentence").write_text(doc(30, "\x01\x02\x03\n\n\x07") + doc(31, paragraphs[24]), encoding="utf-8")
    os.symlink(root / "does-not-exist", root / "b_bad" / "dangling")
    # One 20 MB document (real text, repeated), among small ones: ten times a task, a single document.
    big_body = "\n\n".join(paragraphs * (20_000_000 // sum(len(p) + 2 for p in paragraphs) + 1))[:20_000_000]
    (root / "c_big").mkdir()
    (root / "c_big" / "wiki_00").write_text(doc(40, paragraphs[25]) + doc(41, big_body) + doc(42, paragraphs[26]),
                                            encoding="utf-8")
    return root


def test_bad_input_is_skipped_and_counted(bad_corpus, tmp_path):
    output = tmp_path / "out"
    result = run_ventilator(bad_corpus, output, "--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "4M",
                            "--workers", "2", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "b_bad/empty: empty file" in result.stderr
    assert "b_bad/dangling: cannot stat" in result.stderr
    summary = json.loads((output / "summary.json").read_text())
    assert summary["skipped_documents"] == {
        "text_outside_doc": 2,  # the stray line and the binary file
        "malformed_doc_header": 1, "unclosed_doc": 1, "invalid_utf8": 1, "no_usable_sentence": 1}
    # 4 good + 1 (malformed file) + 2 (invalid_utf8 file) + 1 (no_sentence file) + 3 (big file)
    assert summary["documents"] == 11
    assert summary["quarantined"] == {}
    totals = check_shards(output)
    assert totals["records"] > 16000  # the 20 MB document alone gives ~40k instances


@pytest.mark.parametrize("case,expected", [
    ("empty_dir", "no input files found"),
    ("missing_dir", "no such file or directory"),
    ("vocab_without_mask", "needs the tokenizer's mask token"),
    ("other_jobs_output", "belongs to another job"),
    ("bad_parameter", "--max-seq-length must be at least 5"),
    # Every peer would drop a Welcome holding inf, and the workers wait for good (#34: numbers on the wire).
    ("unsendable", "this job cannot be sent to its workers: JobConfig.lease_seconds is not a finite number"),
])
def test_clear_errors_before_work_starts(tmp_path, case, expected):
    need_shared()
    data, vocab, output, extra = WIKI / "AA", VOCAB, tmp_path / "out", []
    if case == "empty_dir":
        data = tmp_path / "empty"
        data.mkdir()
    elif case == "missing_dir":
        data = tmp_path / "nope"
    elif case == "vocab_without_mask":
        vocab = tmp_path / "vocab.txt"
        vocab.write_text("\n".join(line for line in VOCAB.read_text().splitlines() if line != "[MASK]") + "\n")
    elif case == "other_jobs_output":
        output.mkdir()
        (output / "manifest.jsonl").write_text(json.dumps({"task": "t", "job": "someone-else", "shard": ""}) + "\n")
    elif case == "bad_parameter":
        extra = ["--max-seq-length", "4"]
    elif case == "unsendable":
        extra = ["--lease-seconds", "inf"]
    result = run_ventilator(data, output, "--vocab-file", vocab, "--workers", "1", *extra, timeout=120)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ventilator: error:") and expected in last_line, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_readme_quick_start(tmp_path):
    """The README's quick start, as written (install step aside)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if not line.startswith("pip install")]
    script = "\n".join(commands).replace("/tmp/", f"{tmp_path}/")
    vport, sink_port = free_ports(2)
    script = script.replace("python -m ventilator", f"{sys.executable} -m ventilator --vport {vport} --sink-port {sink_port}")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    vocab = (tmp_path / "vocab.txt").read_text().splitlines()
    totals = check_shards(tmp_path / "mlm-out", vocab_size=len(vocab), cls_id=vocab.index("[CLS]"),
                          sep_id=vocab.index("[SEP]"))
    assert totals["records"] > 50
    summary = json.loads((tmp_path / "mlm-out" / "summary.json").read_text())
    assert summary["documents"] == 14 and summary["skipped_documents"] == {}, "the example corpus is clean"


@pytest.mark.parametrize("reader", ["ventilator", "worker"])
def test_corrupt_compressed_file_is_quarantined_at_once(tmp_path, reader):
    """Corrupt data fails the same way on every attempt: the task is
    quarantined on its first (shipped compressed by the ventilator, or read
    by the worker with --shared-fs; the worker decompresses either way), and
    everything else is written."""
    import gzip

    need_shared()
    paragraphs = real_paragraphs()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "plain").write_text("".join(doc(i, paragraphs[i]) for i in range(3)), encoding="utf-8")
    (corpus / "good.gz").write_bytes(gzip.compress("".join(doc(i, paragraphs[i]) for i in range(3, 6)).encode()))
    broken = gzip.compress("".join(doc(i, paragraphs[i]) for i in range(6, 9)).encode())
    (corpus / "truncated.gz").write_bytes(broken[:len(broken) // 2])
    output = tmp_path / "out"
    args = ["--shared-fs"] if reader == "worker" else []
    result = run_ventilator(corpus, output, "--vocab-file", VOCAB, "--dupe-factor", "1", "--workers", "2", *args)
    assert result.returncode == 3, result.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    (failure,) = summary["quarantined"].values()
    assert failure["source"] == "truncated.gz" and failure["attempts"] == 1
    assert "corrupt gzip data" in " ".join(failure["errors"])
    assert summary["documents"] == 6
    assert {entry["source"] for entry in map(json.loads, (output / "manifest.jsonl").read_text().splitlines())} \
        == {"plain", "good.gz"}
