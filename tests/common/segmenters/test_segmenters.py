import pytest

from common.segmenters import resolve, segmenter_named, segmenters


def test_segmenters_are_found_by_name_and_auto_resolves():
    assert {"line", "blingfire"} <= set(segmenters())
    lines = ["First one. Second one.", "", "Third."]
    assert segmenter_named("line")().segments(lines) == [["First one. Second one."], ["Third."]]
    assert segmenter_named("blingfire")().segments(lines) == [["First one."], [" Second one."], ["Third."]]
    assert resolve("auto", "line") == "line" and resolve("blingfire", "line") == "blingfire"
    with pytest.raises(ValueError, match="unknown segmenter 'nltk'"):
        resolve("nltk", "line")


def test_the_document_segmenter_keeps_each_document_one_segment_of_its_paragraphs():
    """``document``: no sentence split; the pieces are the stripped paragraphs, so the tokenize step finds them in
    the document's text and encodes it whole.  A document past MAX_SEGMENT_CHARS is several segments of whole
    paragraphs (a longer paragraph in pieces cut before a space), each within the bound."""
    from common.segmenters.sentences import MAX_SEGMENT_CHARS, _bounded

    document = segmenter_named("document")()
    assert "document" in segmenters()
    assert document.segments(["", "  First one. Second one. ", "", "Third.", "  "]) == [
        ["First one. Second one.", "Third."]]
    assert document.segments(["", "   "]) == []
    paragraph = " ".join(["word"] * (MAX_SEGMENT_CHARS // 25))  # 19,999 characters: five fit in one segment
    assert [len(segment) for segment in document.segments([paragraph] * 12)] == [5, 5, 2]
    giant = " ".join(["word"] * MAX_SEGMENT_CHARS)  # ~5x the bound: in pieces, each starting at a space
    pieces = document.segments(["Short.", giant])
    assert len(pieces) > 4 and all(sum(map(len, segment)) <= MAX_SEGMENT_CHARS for segment in pieces)
    assert [piece for segment in pieces for piece in segment] == ["Short.", *_bounded(giant)]
    assert "".join(piece for segment in pieces for piece in segment) == "Short." + giant


def test_auto_is_the_objectives_unit_for_its_parameters():
    """--objective tokens keeps no sentence in its chunks (--max-seq-length N): auto is the document there; whole
    documents keep their sentences' lengths: the reader's default.  ELECTRA's unit does not depend on its flags."""
    from common.objectives import objective_named

    tokens = objective_named("tokens")
    assert tokens.unit(tokens.make_params({"max_seq_length": 1024})) == "document"
    assert tokens.unit(tokens.make_params({})) is None
    electra = objective_named("electra")
    assert electra.unit(electra.make_params({})) == "line"
    assert objective_named("bert").unit(objective_named("bert").make_params({})) is None
