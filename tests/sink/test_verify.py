"""sink/verify.py directly: what it reads through each file's format, and each problem as one line."""

import hashlib
import json
import shutil

import pytest
from click.testing import CliRunner

from common.storage import LocalStorage
from sink.verify import main, verify_output
from tests.common.writers.jobs import listed_files, run_job, small_corpus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def megatron_output(tmp_path_factory):
    """A job whose format has a finish stage: each task's pairs, then one merged pair."""
    corpus = small_corpus(tmp_path_factory.mktemp("corpus") / "wiki")
    return run_job(corpus, tmp_path_factory.mktemp("megatron") / "out", "--objective", "tokens",
                   "--output-format", "megatron")


@pytest.fixture
def copy(megatron_output, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(megatron_output, out)
    return out


def rewrite_manifest(out, change) -> None:
    """Apply ``change`` to every manifest line's dict (a damaged file with the manifest agreeing)."""
    path = out / "manifest.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(change(line)) + "\n" for line in lines))


def test_a_clean_output_passes_and_counts_what_it_read(megatron_output):
    result = verify_output(LocalStorage(str(megatron_output)))
    assert result.ok, result.problems
    files = listed_files(megatron_output)
    assert result.shards == len(files) and result.records == sum(f["records"] for f in files) > 0
    assert result.bytes == sum(f["bytes"] for f in files)
    runner = CliRunner().invoke(main, [str(megatron_output)])
    assert runner.exit_code == 0 and "all match the manifest" in runner.output


def test_a_merged_pair_is_read_through_its_format_not_only_hashed(copy):
    """A merged index cut short, the manifest's sha256 made to agree: only reading it as Megatron finds it."""
    name = "megatron/merged-00000.idx"
    data = (copy / name).read_bytes()[:-8]
    (copy / name).write_bytes(data)

    def agree(line):
        for f in line.get("files") or []:
            if f["name"] == name:
                f.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        return line
    rewrite_manifest(copy, agree)
    result = verify_output(LocalStorage(str(copy)))
    assert result.problems == [f"{name}: corrupt: index holds {len(data)} bytes, its counts ask for {len(data) + 8}"]


def test_a_merged_pair_with_other_counts_than_the_manifest_is_named(copy):
    def miscount(line):
        for f in line.get("files") or []:
            if f["name"].endswith(".idx"):
                f["records"] += 1
        return line
    rewrite_manifest(copy, miscount)
    (problem,) = verify_output(LocalStorage(str(copy))).problems
    assert problem.startswith("megatron/merged-00000.idx: ") and "records, the manifest says" in problem


def test_a_file_no_format_reads_is_one_line_not_a_traceback(copy):
    data = b"input_ids\n1 2 3\n"
    (copy / "part-extra.csv").write_bytes(data)

    def add(line):
        if line["task"] == min(listed_line["task"] for listed_line in lines):
            line["shards"].append({"name": "part-extra.csv", "records": 1, "bytes": len(data),
                                   "sha256": hashlib.sha256(data).hexdigest()})
        return line
    lines = [json.loads(line) for line in (copy / "manifest.jsonl").read_text().splitlines() if '"shards"' in line]
    rewrite_manifest(copy, add)
    problems = verify_output(LocalStorage(str(copy))).problems
    (problem,) = [p for p in problems if p.startswith("part-extra.csv")]
    assert problem.startswith("part-extra.csv: no output format writes such files (known endings: .bin, .idx, ")
    assert problem.endswith("(is the package of its format installed?)")
    assert all("\n" not in p for p in problems)
    runner = CliRunner().invoke(main, [str(copy)])
    assert runner.exit_code == 1 and "Traceback" not in runner.output


def test_a_stray_part_file_and_a_missing_one_are_named(copy):
    first = listed_files(copy)[0]["name"]
    (copy / first).rename(copy / "part-stray.bin")
    problems = verify_output(LocalStorage(str(copy))).problems
    assert "part-stray.bin: not in the manifest" in problems
    assert any(p.startswith(f"{first}: missing (task ") for p in problems)


def test_a_planted_merged_pair_is_named(copy):
    """A format's finish files (Megatron's merged pairs) are the job's files too: one the manifest does not
    list is reported, as a stray part-* is (issue 34, item 12)."""
    (copy / "megatron" / "merged-00009.bin").write_bytes(b"\0" * 16)
    (copy / "holdout" / "megatron").mkdir(parents=True)
    (copy / "holdout" / "megatron" / "merged-00003.idx").write_bytes(b"")
    problems = verify_output(LocalStorage(str(copy))).problems
    assert "megatron/merged-00009.bin: not in the manifest" in problems
    assert "holdout/megatron/merged-00003.idx: not in the manifest" in problems
    runner = CliRunner().invoke(main, [str(copy)])
    assert runner.exit_code == 1


@pytest.mark.parametrize("summary", [None, {"complete": False, "reason": "stopped by signal", "quarantined": {}}])
def test_an_unfinished_job_is_not_passed(copy, summary):
    """Killed before its end: whatever its files, a job whose sink did not write a complete summary is not
    a finished output (a merged pair, the data path list may be missing), and verify says so."""
    if summary is None:
        (copy / "summary.json").unlink()
    else:
        (copy / "summary.json").write_text(json.dumps(summary))
    problems = verify_output(LocalStorage(str(copy))).problems
    assert len(problems) == 1 and problems[0].startswith("the job has not finished: "), problems
    assert ("no summary.json" if summary is None else "stopped by signal") in problems[0]
    runner = CliRunner().invoke(main, [str(copy)])
    assert runner.exit_code == 1 and "all match the manifest" not in runner.output
