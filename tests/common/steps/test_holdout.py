import pytest

from common.steps.holdout import Holdout
from tests.common.steps.conftest import a_run, documents


def test_the_held_out_side_becomes_a_part_of_its_own(job):
    context = job(holdout_fraction=0.4, holdout_seed=7)
    step = Holdout(Holdout.make_params(context.config.step("holdout").params), context)
    run = a_run(documents(40))
    step.run(run)
    training, held = run.parts
    assert held.split == "holdout" and held.key == "holdout:" + training.key and held.stem == "holdout/" + training.stem
    assert 5 < len(held.documents) < 30 and len(training.documents) + len(held.documents) == 40
    assert not {d.id for d in training.documents} & {d.id for d in held.documents}
    assert Holdout.identity(step.params) == {"holdout": [0.4, 7]}
    with pytest.raises(ValueError, match="--holdout-fraction"):
        Holdout.make_params({"fraction": 1.5})
