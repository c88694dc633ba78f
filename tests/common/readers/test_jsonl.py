"""JSON Lines input: any text field, plain files by byte range, compressed
ones whole, bad lines counted, chosen by name or --format only."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from common.readers import ParseReport, detect, reader_named
from common.storage import LocalStorage
from tests.support.helpers import need_shared
from tests.support.web_corpora import wiki_articles, wiki_jsonl

JSONL = reader_named("jsonl")


@pytest.fixture(scope="module")
def articles():
    need_shared()
    return wiki_articles()


def read_all(reader, root, task_size):
    storage = LocalStorage(str(root))
    files = storage.list_inputs()
    reader.check_inputs(storage, files)
    tasks = list(reader.plan(files, task_size, storage))
    report = ParseReport()
    documents = [d for task in tasks for d in reader.documents(task, reader.read(storage, task), report)]
    return tasks, documents, report.skipped


@pytest.mark.parametrize("task_size", [5_000, 60_000, 10 ** 9])
def test_every_line_once_plain_by_range_compressed_whole(tmp_path, articles, task_size):
    params = JSONL.make_params({"text_field": "content", "id_field": "doc_id"})
    plain = wiki_jsonl(tmp_path / "a" / "shard.jsonl", "content", "doc_id", articles[:60])
    data = wiki_jsonl(tmp_path / "tmp.jsonl", "content", "doc_id", articles[60:]).read_bytes()
    (tmp_path / "tmp.jsonl").unlink()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "shard.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "shard.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    tasks, documents, skipped = read_all(JSONL(params), tmp_path, task_size)
    assert skipped == {}
    expected = [(a.id, a.text) for a in articles[:60]] + [(a.id, a.text) for a in articles[60:]] * 2
    assert [(d.id, "\n".join(d.lines)) for d in documents] == expected
    compressed = [t for t in tasks if t.compression]
    assert len(compressed) == 2 and all(t.start == 0 and t.end == t.size for t in compressed)
    if task_size < plain.stat().st_size:
        assert len(tasks) > 3


def test_bad_lines_are_skipped_and_counted_by_reason():
    lines = [b'{"text": "Good one. Yes.", "id": 5}', b'{"text": null}', b'{"id": "x"}', b'{"text": 42}',
             b'{"text": "  \\n "}', b'{"text": "a", "id": true}', b'not json', b'[1, 2]', b'{"text": "\xff"}',
             b'{"text": "\\ud800"}', b'', b'   ']
    report = ParseReport()
    documents = list(JSONL().parse(b"\n".join(lines) + b"\n", 0, report))
    assert [(d.id, d.lines) for d in documents] == [("5", ["Good one. Yes."]), ("", ["a"])]
    assert report.skipped == {"missing_text": 2, "non_string_text": 1, "empty_text": 1, "malformed_json": 1,
                              "not_an_object": 1, "invalid_utf8": 1, "invalid_unicode": 1}


def test_jsonl_only_by_name_or_format_wikiextractor_json_unchanged():
    line = json.dumps({"id": "1", "url": "u", "title": "t", "text": "Body."}).encode() + b"\n"
    assert detect(line).name == "json"  # WikiExtractor --json output (no extension)
    assert detect(line, "AA/wiki_00").name == "json"
    for name in ("data/part.jsonl", "part.jsonl.gz", "part.jsonl.zst", "part.ndjson.bz2"):
        assert detect(line, name) is JSONL, name
    assert not JSONL.sniff(line)


@pytest.mark.parametrize("format_name", ["jsonl", "json"])
def test_a_bom_and_a_deeply_nested_line_lose_no_good_document(format_name):
    """A UTF-8 BOM before the first line lost the first document as malformed_json;
    a line of 100,000 brackets raised RecursionError and lost the whole task."""
    reader_class = reader_named(format_name)
    reader = reader_class(reader_class.make_params({}))
    good = [json.dumps({"text": f"Document {i}. It is fine.", "id": i}).encode() for i in range(5)]
    data = b"\xef\xbb\xbf" + b"\n".join(good[:2] + [b"[" * 100_000] + good[2:]) + b"\n"
    report = ParseReport()
    documents = list(reader.parse(data, 0, report))
    assert [d.id for d in documents] == ["0", "1", "2", "3", "4"]
    assert report.skipped == {"json_nested_too_deeply": 1}


def test_detection_survives_a_bom_and_a_deeply_nested_first_line():
    line = json.dumps({"id": "1", "text": "Body."}).encode() + b"\n"
    assert detect(b"\xef\xbb\xbf" + line).name == "json"
    with pytest.raises(ValueError, match="lines disagree"):  # one line, no RecursionError out of the detection
        detect(b"{" * 100_000 + b"\n" + line)
