"""segment -> tokenize -> objective -> write over one part, each step by itself."""

from common.steps.objective import Objective
from common.steps.segment import Segment
from common.steps.tokenize import Tokenize
from common.steps.write import Write
from tests.common.steps.conftest import a_run, documents


def test_each_step_gives_the_part_what_the_next_takes(job, tmp_path):
    context = job(segmenter="blingfire")
    run = a_run(documents(3))
    Segment(Segment.make_params({"segmenter": "blingfire"}), context).run(run)
    part = run.parts[0]
    assert [len(s) for s in part.segments] == [5, 5, 5]  # three sentences in the first line, two in the second
    Tokenize(Tokenize.Params(), context).run(run)
    assert part.tokenized.num_documents == 3 and run.stats.documents == 3 and run.stats.tokens == part.tokens > 30
    Objective(Objective.Params(), context).run(run)
    assert part.batches is not None and not list((tmp_path).iterdir())  # lazy: nothing made or written yet
    Write(Write.Params(), context).run(run)
    assert len(part.files) == 1 and part.files[0].records == run.stats.instances > 0
    assert (tmp_path / part.files[0].name).exists()
    assert {"split", "tokenize", "build", "write"} <= set(run.stats.seconds)


def test_a_part_without_documents_writes_nothing(job, tmp_path):
    context = job()
    run = a_run([])
    for step_class in (Segment, Tokenize, Objective, Write):
        step_class(step_class.make_params({"segmenter": "line"} if step_class is Segment else {}), context).run(run)
    assert run.parts[0].files == [] and run.stats.instances == 0 and not list(tmp_path.iterdir())
