"""A format's end-of-job files (Megatron's blend list, MDS's and LitData's index.json) from the sink's journal as
a stream of typed records, not the published manifest as a list of dicts (~1 KB a line: gigabytes at a million
tasks, in a sink that otherwise keeps only its done set).  The files are the same either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.output.manifest import read_entries
from common.storage import LocalStorage
from common.writers import writer_named
from common.writers.megatron import pairs_listed
from common.writers.sample_shards import listed_by_directory
from sink.manifest import Manifest
from tests.support.helpers import VOCAB, need_shared
from tests.support.journals import journal_line, peak_traced_bytes
from tests.support.run_configs import steps_of

LINES = 20_000


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    need_shared()
    from common.tokenization import Vocabulary, load_tokenizer

    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB))).tokenizer.to_str()


def _journal(root: Path, job: str, suffixes: tuple[str, ...]) -> None:
    """Lines in no task order, a held-out file every tenth, a task listed twice (its last line wins an index)."""
    with open(root / "manifest.jsonl", "w") as out:
        for i in [*range(LINES - 1, -1, -1), 7]:
            side = "holdout/" if i % 10 == 0 else ""
            shards = [{"name": f"{side}part-{i:020d}{suffix}", "records": 7 + i % 3, "sha256": f"{i:064x}",
                       "bytes": 1000 + i, **({"split": "holdout"} if side else {})} for suffix in suffixes]
            out.write(journal_line(i, job, shards))


def _written(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.jsonl"}


@pytest.mark.parametrize("fmt", ["megatron", "mds", "litdata"])
def test_finish_job_reads_the_journal_once_as_a_stream_and_writes_the_same_files(tmp_path, tokenizer_json, fmt):
    writer = writer_named(fmt)
    config = JobConfig(data_uri="d", output_uri=str(tmp_path), reader=Component("wikiextractor"),
                       tokenizer_json=tokenizer_json, objective=Component("tokens", {"max_seq_length": 64}),
                       writer=Component(fmt), steps=steps_of("line", holdout_fraction=0.1, holdout_seed=1))
    _journal(tmp_path, config.job_id, writer.suffixes)
    storage = LocalStorage(str(tmp_path))
    manifest = Manifest(storage, config.job_id, str(tmp_path / "state"), writer.suffixes)

    writer.finish_job(storage, config, {})  # the published manifest read whole
    from_list = _written(tmp_path)
    for name in from_list:
        (tmp_path / name).unlink()
    writer.finish_job(storage, config, {}, manifest.entries)

    assert _written(tmp_path) == from_list
    assert len(from_list) == 2 and all(len(data) > LINES for data in from_list.values())  # each side's list
    assert manifest.passes == 1


@pytest.mark.parametrize("suffixes, listing", [((".bin", ".idx"), lambda storage, lines: pairs_listed(lines)),
                                               ((".mds",), lambda storage, lines: listed_by_directory(
                                                   storage, (".mds",), lines))],
                         ids=["megatron", "sample-shards"])
def test_what_finish_job_keeps_of_the_manifest_is_a_fraction_of_its_lines_as_dicts(tmp_path, suffixes, listing):
    _journal(tmp_path, "j", suffixes)
    storage = LocalStorage(str(tmp_path))
    manifest = Manifest(storage, "j", str(tmp_path / "state"))

    whole = peak_traced_bytes(lambda: read_entries(storage))  # every line's dict: what a million lines multiply
    kept = peak_traced_bytes(lambda: listing(storage, manifest.entries()))

    assert whole > 20 * 1024 * 1024, whole
    assert kept < whole / 3, (kept, whole)


def test_a_plugin_formats_finish_job_written_before_lines_were_offered_is_called_as_before():
    """The sink offers ``finish_job`` the journal's lines; a plugin format whose ``finish_job(output, config,
    totals)`` predates them is called with its three arguments (it reads the published manifest itself), not
    failed at the end of every job with a TypeError."""
    from common.writers.base import Writer, finish_job

    calls: list[tuple] = []

    def lines():
        return iter([{"task": "t"}])

    class Old(Writer):
        @classmethod
        def finish_job(cls, output, config, totals):
            calls.append(("old", output, config, totals))

    class Offered(Writer):
        @classmethod
        def finish_job(cls, output, config, totals, lines=None):
            calls.append(("offered", list(lines())))

    class Keywords(Writer):
        @classmethod
        def finish_job(cls, output, config, totals, **rest):
            calls.append(("keywords", sorted(rest)))

    for writer_class in (Old, Offered, Keywords):
        finish_job(writer_class, "out", "config", {"tasks": 1}, lines)
    assert calls == [("old", "out", "config", {"tasks": 1}), ("offered", [{"task": "t"}]), ("keywords", ["lines"])]
