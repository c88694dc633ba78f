"""segment -> tokenize -> objective -> write over one part, each step by itself."""

from common.steps import Records, Segmented, Tokenized, Written
from common.steps.objective import Objective
from common.steps.segment import Segment
from common.steps.tokenize import Tokenize
from common.steps.write import Write
from tests.common.steps.conftest import a_run, documents


def test_each_step_gives_the_part_what_the_next_takes(job, tmp_path):
    """Each step takes the sides the one before returned and returns its own typed value for each."""
    context = job(segmenter="blingfire")
    run = a_run(documents(3))
    (segmented,) = Segment(Segment.make_params({"segmenter": "blingfire"}), context).apply(run.parts, run)
    assert isinstance(segmented, Segmented) and segmented.documents == run.parts[0].documents
    assert [len(s) for s in segmented.segments] == [5, 5, 5]  # three sentences in the first line, two in the second
    (tokenized,) = Tokenize(Tokenize.Params(), context).apply([segmented], run)
    assert isinstance(tokenized, Tokenized) and (tokenized.split, tokenized.key) == ("", run.task.key)
    assert tokenized.tokenized.num_documents == 3 and run.stats.documents == 3
    assert run.stats.tokens == tokenized.tokens > 30
    (records,) = Objective(Objective.Params(), context).apply([tokenized], run)
    assert isinstance(records, Records) and records.batches is not None
    assert not list((tmp_path).iterdir())  # lazy: nothing made or written yet
    (part,) = Write(Write.Params(), context).apply([records], run)
    assert isinstance(part, Written) and part.stem == run.task.shard_stem
    assert len(part.files) == 1 and part.files[0].records == run.stats.instances > 0
    assert (tmp_path / part.files[0].name).exists()
    assert {"split", "tokenize", "build", "write"} <= set(run.stats.seconds)
    # Documents by tokens: three documents of the part's tokens, each in the bin of its length.
    bins = run.stats.counters["tokens_per_document"]
    assert sum(bins.values()) == 3
    for name, count in bins.items():
        assert name.startswith("up_to_") and count > 0
    # The tokens without padding, as the file holds them (read back through the format).
    written = type(context.writer).read_columns(part.files[0].name, (tmp_path / part.files[0].name).read_bytes(),
                                                lambda name: None)
    assert run.stats.output_tokens == int(written["input_mask"].sum()) == run.stats.to_wire().output_tokens
    assert 0 < run.stats.output_tokens < run.stats.instances * 128


def test_a_part_without_documents_writes_nothing(job, tmp_path):
    context = job()
    run = a_run([])
    for step_class in (Segment, Tokenize, Objective, Write):
        step_class(step_class.make_params({"segmenter": "line"} if step_class is Segment else {}), context).run(run)
    assert run.parts[0].files == [] and run.stats.instances == 0 and not list(tmp_path.iterdir())


def test_tokens_without_padding_of_fixed_and_variable_records():
    import numpy as np

    from common.objectives.base import Batch, Ragged

    fixed = Batch({"input_ids": np.array([[5, 6, 0, 0], [7, 8, 9, 0]]), "input_mask": np.array([[1, 1, 0, 0],
                                                                                                [1, 1, 1, 0]])})
    assert fixed.tokens_without_padding() == 5
    ragged = Batch({"input_ids": Ragged(np.arange(7), np.array([3, 4]))})
    assert ragged.tokens_without_padding() == 7
    assert Batch({"input_ids": np.zeros((2, 3))}).tokens_without_padding() == 6  # no mask: every position
    assert Batch({"labels": np.zeros(3)}).tokens_without_padding() == 0


def test_documents_are_binned_by_powers_of_two():
    import numpy as np

    from common.steps.tokenize import document_token_bins

    assert document_token_bins(np.array([1, 2, 3, 4, 5, 128, 129, 1000])) == {
        "up_to_1": 1, "up_to_2": 1, "up_to_4": 2, "up_to_8": 1, "up_to_128": 1, "up_to_256": 1, "up_to_1024": 1}
    assert document_token_bins(np.zeros(0, dtype=np.int64)) == {}


def test_a_segmenters_own_parameters_ride_in_the_segment_step(job, monkeypatch):
    """A segmenter with Params (a plugin's, say): its flags' values reach it through the segment step's
    parameters, are checked by it, and are part of the job's identity; a built-in's identity is as before."""
    import dataclasses

    import pytest

    from common.job.params import param
    from common.segmenters import segmenter_named
    from common.segmenters.base import Segmenter

    @dataclasses.dataclass(frozen=True)
    class LinesParams:
        lines_per_segment: int = param(1, "Lines per segment.")

    class Lines(Segmenter):
        name = "lines"
        Params = LinesParams

        def segments(self, lines):
            n = self.params.lines_per_segment
            return [lines[i:i + n] for i in range(0, len(lines), n)]

    monkeypatch.setattr("common.steps.segment.segmenter_named",
                        lambda name: Lines if name == "lines" else segmenter_named(name))
    params = Segment.make_params({"segmenter": "lines", "lines_per_segment": 2})
    assert params.options == LinesParams(2)
    assert Segment.identity(params) == {"segmenter": "lines", "segmenter_params": {"lines_per_segment": 2}}
    run = a_run(documents(2))
    Segment(params, job()).run(run)
    assert [len(segments) for segments in run.parts[0].segments] == [1, 1]  # two lines, one segment
    with pytest.raises(ValueError, match=r"--colour does not apply to lines \(its options: --lines-per-segment\)"):
        Segment.make_params({"segmenter": "lines", "colour": 1})
    assert Segment.identity(Segment.make_params({"segmenter": "line"})) == {"segmenter": "line"}


def test_a_documents_text_is_cut_only_where_a_segment_starts():
    """The tokenize step's cuts of a document's text (``document_cuts``): before each segment after the first
    (taking the whitespace before it), never between the pieces of one segment; one part per segment.  A document
    whose pieces are not its text's (a plugin segmenter's) has each piece a text, one part per piece."""
    from common.readers.base import Document
    from common.steps.tokenize import document_cuts

    first = Document(0, ["", "One. Two.", "Three", "four.", ""])
    segments = [[["One."], [" Two.", "Three"], ["four."]], [["Elsewhere."], ["Not here."]], []]
    texts, cuts, parts, unplaced = document_cuts([first, Document(9, ["Else where."]), Document(20, [])], segments)
    assert texts == ["One. Two.\nThree\nfour.", "Elsewhere.", "Not here."]
    assert cuts == [[4, 15], [], []]  # " Two." from the space; "four." from the line break: not "Three"
    assert parts == [1, 1, 1, 1, 1] and unplaced == 2
    whole = [[["One. Two.", "Three", "four."]]]  # the document segmenter's: one segment, no cut
    assert document_cuts([first], whole) == (["One. Two.\nThree\nfour."], [[]], [1], 0)
