"""Byte-range tasks: every document exactly once, whatever the split size."""

import json
import random

import pytest

from common.job.tasks import InputFile, plan_tasks
from common.readers import ParseReport, detect, reader_named
from common.readers.content import task_content
from common.storage import LocalStorage

WIKI_READER, JSON_READER, TEXT_READER = (reader_named(name)() for name in ("wikiextractor", "json", "text"))



def wiki_doc(i, paragraphs):
    body = "\n\n".join(paragraphs)
    return f'<doc id="{i}" url="https://example.org/?curid={i}" title="T{i}">\nT{i}\n\n{body}\n</doc>\n'


def make_corpus(fmt, rng: random.Random, documents: int = 25) -> tuple[bytes, list[list[str]]]:
    expected = []
    parts = []
    for i in range(documents):
        paragraphs = [" ".join(f"w{i}x{j}y{k}" for k in range(rng.randint(1, 30))) for j in range(rng.randint(1, 6))]
        if fmt.name == "wikiextractor":
            parts.append(wiki_doc(i, paragraphs))
            expected.append(paragraphs)
        elif fmt.name == "json":
            parts.append(json.dumps({"id": str(i), "title": f"T{i}", "text": "\n".join(paragraphs)}) + "\n")
            expected.append(paragraphs)
        else:
            blank = "\n" * rng.randint(1, 3) + (" \t" if rng.random() < 0.3 else "")
            parts.append("\n".join(paragraphs) + "\n" + blank + ("\n" if blank.endswith("\t") else ""))
            expected.append(paragraphs)
    return "".join(parts).encode(), expected


def documents_of(fmt, data: bytes, task_size: int) -> list[list[str]]:
    """Parse ``data`` as the union of its byte-range tasks."""
    read_at = lambda offset, length: data[offset:offset + length]  # noqa: E731
    found = []
    start = 0
    while start < len(data):
        end = min(start + task_size, len(data))
        first = fmt.boundary_at_or_after(read_at, start, len(data))
        last = fmt.boundary_at_or_after(read_at, end, len(data))
        if last > first:
            for document in fmt.parse(data[first:last], first, ParseReport()):
                found.append([line for line in document.lines if line.strip()])
        start = end
    return found


@pytest.mark.parametrize("fmt", [WIKI_READER, JSON_READER, TEXT_READER], ids=lambda reader: reader.name)
@pytest.mark.parametrize("task_size", [1, 2, 3, 7, 50, 333, 1000, 4096, 10 ** 9])
def test_every_document_exactly_once(fmt, task_size):
    data, expected = make_corpus(fmt, random.Random(task_size))
    assert documents_of(fmt, data, task_size) == expected


@pytest.mark.parametrize("fmt", [WIKI_READER, JSON_READER, TEXT_READER], ids=lambda reader: reader.name)
def test_random_split_points(fmt):
    """Arbitrary (uneven) cut points, not just a fixed size."""
    rng = random.Random(7)
    data, expected = make_corpus(fmt, rng, documents=40)
    for _ in range(30):
        cuts = sorted({0, len(data), *rng.sample(range(1, len(data)), rng.randint(1, 60))})
        read_at = lambda offset, length: data[offset:offset + length]  # noqa: E731
        found = []
        for start, end in zip(cuts, cuts[1:]):
            first = fmt.boundary_at_or_after(read_at, start, len(data))
            last = fmt.boundary_at_or_after(read_at, end, len(data))
            for document in fmt.parse(data[first:last], first, ParseReport()):
                found.append([line for line in document.lines if line.strip()])
        assert found == expected


def test_reading_tasks_from_files(tmp_path):
    """The storage path (pread + read-ahead window) agrees with the in-memory one."""
    data, expected = make_corpus(WIKI_READER, random.Random(3), documents=60)
    (tmp_path / "wiki_00").write_bytes(data)
    storage = LocalStorage(str(tmp_path))
    for task_size in (100, 1024, 5000):
        found = []
        for task in plan_tasks(storage.list_inputs(), task_size):
            content = task_content(task, WIKI_READER.read(storage, task))
            found.extend([line for line in d.lines if line.strip()] for d in WIKI_READER.parse(content, 0, ParseReport()))
        assert found == expected


def test_wikiextractor_drops_title_and_counts_bad_blocks():
    good = wiki_doc(1, ["Alpha beta.", "Gamma."])
    data = ("stray text before any doc\n" + good +
            '<doc id="2" url="u" title="broken"\nno closing bracket\n</doc>\n' +
            wiki_doc(3, ["Fine."]) +
            '<doc id="4" url="u" title="unclosed">\nunclosed\n\nnever ends\n').encode()
    report = ParseReport()
    documents = list(WIKI_READER.parse(data, 0, report))
    assert [[line for line in d.lines if line] for d in documents] == [["Alpha beta.", "Gamma."], ["Fine."]]
    assert report.skipped == {"text_outside_doc": 1, "malformed_doc_header": 1, "unclosed_doc": 1}


def test_invalid_utf8_and_binary_documents_are_skipped_not_fatal():
    data = (wiki_doc(1, ["ok one."]) + wiki_doc(2, ["bad \udcff"]).replace("\udcff", "@") + wiki_doc(3, ["ok three."])).encode()
    data = data.replace(b"bad @", b"bad \xff\xfe")
    data += wiki_doc(4, ["nul"]).encode().replace(b"nul", b"n\x00l")
    report = ParseReport()
    documents = list(WIKI_READER.parse(data, 0, report))
    assert len(documents) == 2
    assert report.skipped == {"invalid_utf8": 1, "binary": 1}


def test_json_lines_bad_records():
    data = (b'{"text": "a\\nb"}\nnot json\n{"title": "no text"}\n\n[1,2]\n{"text": "c"}\n'
            b'{"text": "lone \\ud800 surrogate"}\n')
    report = ParseReport()
    documents = list(JSON_READER.parse(data, 0, report))
    assert [d.lines for d in documents] == [["a", "b"], ["c"]]
    assert report.skipped == {"malformed_json": 1, "json_without_text": 2, "invalid_unicode": 1}


def test_bert_text_unicode_blank_line_separates_documents():
    data = "one\ntwo\n\u3000\nthree\n".encode()
    documents = list(TEXT_READER.parse(data, 0, ParseReport()))
    assert [d.lines for d in documents] == [["one", "two"], ["three"]]


def test_detect_format():
    assert detect(b'<doc id="1" url="" title="x">\n') is type(WIKI_READER)
    assert detect(b'{"id": "1", "text": "x"}\n') is type(JSON_READER)
    assert detect(b"A sentence.\nAnother.\n") is type(TEXT_READER)


def test_plan_tasks_cover_files_and_keep_compressed_whole():
    files = [InputFile("a", 10, "v"), InputFile("b.gz", 100, "v"), InputFile("empty", 0, "v")]
    tasks = list(plan_tasks(files, 4))
    assert [(t.path, t.start, t.end) for t in tasks] == [("a", 0, 4), ("a", 4, 8), ("a", 8, 10), ("b.gz", 0, 100)]
    assert tasks[-1].compression == "gzip"
    assert len({t.task_id for t in tasks}) == len(tasks)


def test_roles_do_not_load_pyarrow_until_a_parquet_file_is_touched():
    """Every reader and writer is imported for the command line; pyarrow
    (~40 MB of RSS) is loaded only when Parquet is read or written."""
    import subprocess
    import sys

    from tests.support.helpers import REPO

    code = ("import sys, ventilator.cli, sink.cli, worker.cli\n"
            "from common.readers import readers\nfrom common.writers import writers\nreaders(); writers()\n"
            "assert not [m for m in sys.modules if m.startswith('pyarrow')], 'pyarrow loaded'\n"
            "from common.writers.parquet import arrow_schema\nfrom common.objectives.base import Feature\n"
            "arrow_schema([Feature('input_ids', 'int32', 8)])\nassert 'pyarrow' in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
