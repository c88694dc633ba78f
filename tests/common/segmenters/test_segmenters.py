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
