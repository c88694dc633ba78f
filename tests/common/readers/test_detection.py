"""Format detection and a file's first bytes: a UTF-8 BOM is not content for any line format, and
``--format auto`` looks at more than the first line, refusing in one line a file whose lines disagree."""

from __future__ import annotations

import json

import pytest

from common.readers import ParseReport, detect, reader_named
from tests.support.helpers import VOCAB, need_shared
from tests.support.run_configs import run_config
from ventilator.job import JobError, validate

BOM = b"\xef\xbb\xbf"
WIKI = b"".join(f'<doc id="{i}" url="u" title="T{i}">\nT{i}\nParagraph {i} is here.\n</doc>\n'.encode()
                for i in range(4))
JSON_LINES = b"".join(json.dumps({"id": i, "text": f"Document {i}. It is fine."}).encode() + b"\n"
                      for i in range(6))


@pytest.mark.parametrize("name", ["wikiextractor", "text"])
def test_a_bom_is_not_the_first_documents_text(name):
    data = WIKI if name == "wikiextractor" else b"First line.\nSecond line.\n\nNext document.\n"
    reader = reader_named(name)()
    plain = list(reader.parse(data, 0, ParseReport()))
    report = ParseReport()
    marked = list(reader.parse(BOM + data, 0, report))
    assert [d.lines for d in marked] == [d.lines for d in plain] and report.skipped == {}
    assert detect(BOM + data, "AA/wiki_00").name == name


def test_detection_reads_several_lines_and_refuses_when_they_disagree():
    assert detect(JSON_LINES, "AA/wiki_00").name == "json"
    malformed_first = b'{"id": 0, "text": "cut off\n' + JSON_LINES
    with pytest.raises(ValueError, match=r"lines disagree.*line 1.*--format"):
        detect(malformed_first, "AA/wiki_00")
    stray_first = b"stray text before the first document\n" + WIKI
    with pytest.raises(ValueError, match=r"lines disagree.*--format"):
        detect(stray_first, "AA/wiki_00")
    prose = b"A line of prose.\nAnother, {not JSON}.\n\nA second document.\n"
    assert detect(prose, "AA/wiki_00").name == "text"


def test_the_ventilator_refuses_a_file_whose_lines_disagree_before_any_work(tmp_path):
    need_shared()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part_00").write_bytes(b"{not json at all\n" + JSON_LINES)
    with pytest.raises(JobError, match=r"part_00: its first 7 lines disagree.*--format"):
        validate(run_config(data=str(tmp_path / "in"), output=str(tmp_path / "out"), vocab_file=str(VOCAB)))
    assert not (tmp_path / "out").exists()
