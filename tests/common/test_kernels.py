"""The compiled kernels (common/_kernels.c) give the numpy code's bytes, and the numpy code still runs.

Each kernel is compared with the numpy function it replaces on the same inputs and random streams, edge values
included; the byte matrix's cells that pass through a kernel run again with the numpy path forced (the whole
matrix runs on the compiled one in tests/test_byte_matrix.py); MLM_PIPELINE_NUMPY_KERNELS=1 forces numpy in a
new process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from common import kernels
from common.objectives.bert import InstancePlan, lay_out_pairs
from common.objectives.masking import apply_masks, select_tokens
from common.tokenization.vocabulary import SpecialIds
from common.writers.tfrecord import encode_records, read_records
from tests.support.helpers import REPO

BUILT = kernels.compiled


@pytest.fixture
def numpy_path(monkeypatch):
    """Run the numpy code inside the block: ``with numpy_path(): ...``."""
    def switch(on: bool) -> None:
        monkeypatch.setattr(kernels, "compiled", None if on else BUILT)
    return switch


def test_the_kernels_are_built():
    assert BUILT is not None, (f"kernels: {kernels.status}; `pip install -e .` (or `python setup.py build_ext "
                               "--inplace`) builds them; without a C compiler the numpy code runs")


def both(numpy_path, function):
    """``function()`` on the compiled path, then on the numpy path."""
    assert BUILT is not None
    numpy_path(False)
    compiled = function()
    numpy_path(True)
    return compiled, function()


def random_features(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    edges = np.array([0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**35 - 1])
    return {
        "input_ids": rng.integers(0, 60_000, (rows, 17)).astype(np.int32),
        "input_mask": rng.integers(0, 2, (rows, 17)).astype(np.int32),
        "wide": rng.choice(edges, (rows, 5)).astype(np.int64),
        "small": rng.integers(0, 128, (rows, 3)).astype(np.int8),
        "weights": rng.normal(size=(rows, 4)).astype(np.float32),
        "doubles": rng.normal(size=(rows, 2)),
        "empty": np.zeros((rows, 0), dtype=np.int32),
        "label": rng.integers(0, 2, (rows, 1)).astype(np.int64),
    }


def test_the_encoder_gives_the_numpy_encoders_bytes(numpy_path):
    rng = np.random.default_rng(7)
    for rows in (1, 2, 33, 300):
        features = random_features(rng, rows)
        compiled, fallback = both(numpy_path, lambda features=features: encode_records(features))
        assert compiled == fallback
        assert len(list(read_records(compiled))) == rows  # framing and both CRCs as TensorFlow checks them


@pytest.mark.parametrize("bad", [-1, 2**35])
def test_the_encoder_refuses_what_the_numpy_encoder_refuses(numpy_path, bad):
    features = {"input_ids": np.array([[1, bad]], dtype=np.int64)}
    for on in (False, True):
        numpy_path(on)
        with pytest.raises(ValueError, match=r"varints take integers in \[0, 2\*\*35\)"):
            encode_records(features)


def test_masking_gives_the_numpy_masks(numpy_path):
    special = SpecialIds(cls=101, sep=102, mask=103, pad=0, unk=100, vocab_size=30522, starts_word=np.ones(30522, dtype=bool))
    data = np.random.default_rng(3)
    tokens = data.integers(1000, 30000, 5000).astype(np.int32)
    rows = 700
    a_length = data.integers(0, 60, rows)
    b_length = data.integers(1, 125 - a_length)
    plan = InstancePlan(data.integers(0, 4000, rows), a_length, data.integers(0, 4000, rows), b_length,
                        data.integers(0, 2, rows).astype(bool))

    def run():
        rng = np.random.default_rng(11)
        layout = lay_out_pairs(tokens, plan, 128, special)
        budget = np.minimum(20, np.maximum(1, np.round(layout.sequence_length * 0.15))).astype(np.int64)
        selected = select_tokens(layout.candidates, budget, rng)
        masked = apply_masks(layout.original, selected, 20, special.mask, special.vocab_size, rng)
        return [layout.original, layout.candidates, layout.input_mask, layout.segment_ids, layout.sequence_length,
                selected, masked.input_ids, masked.masked_lm_positions, masked.masked_lm_ids,
                masked.masked_lm_weights, rng.random(3)]  # the streams end in the same place

    compiled, fallback = both(numpy_path, run)
    for got, expected in zip(compiled, fallback):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    assert compiled[5].sum(axis=1).min() >= 1  # something was masked in every row


#: The byte matrix's cells that go through a kernel: every objective's TFRecord (the encoder), BERT and ALBERT
#: with WordPiece (the layout), BERT and static RoBERTa (the selection), every masking objective (the masks).
KERNEL_CELLS = [f"{objective}/tfrecord/{family}" for objective in ("bert", "albert", "roberta-static", "electra")
                for family in ("wordpiece", "bpe")] + ["roberta-none/tfrecord/unigram"]


def test_the_byte_matrix_holds_on_the_numpy_path(numpy_path, tmp_path):
    from tests.support.byte_matrix import MATRIX_FILE, cases, compute
    from tests.support.helpers import need_shared
    need_shared()
    expected = json.loads(MATRIX_FILE.read_text())
    selected = [case for case in cases() if case.name in KERNEL_CELLS]
    assert len(selected) == len(KERNEL_CELLS)
    numpy_path(True)
    got = compute(tmp_path, selected)
    assert got == {name: expected[name] for name in KERNEL_CELLS}


def test_the_environment_variable_forces_numpy():
    code = "from common import kernels; print(kernels.compiled is None)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for value, numpy_only in (("1", "True"), ("0", str(BUILT is None)), ("", str(BUILT is None))):
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**env, kernels.FORCE_NUMPY: value},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == numpy_only, value


def test_the_plan_makes_pythons_draws(numpy_path):
    """BERT's and ALBERT's plan in C: the same instances and the Random left in the same state as the Python
    loop, over documents of every shape (one segment, segments longer than an instance)."""
    import random

    from common.objectives.bert import BertParams, plan_instances
    from common.objectives.documents import TokenizedDocuments
    shapes = random.Random(5)
    documents = TokenizedDocuments.from_lists([
        [[7] * shapes.choice([1, 3, 20, 70, 400]) for _ in range(shapes.choice([1, 1, 2, 5, 30]))]
        for _ in range(120)])
    for params in (BertParams(), BertParams(max_seq_length=512, short_seq_prob=0.5), BertParams(max_seq_length=5)):
        for seed in range(4):
            for sentence_order in (False, True):
                runs = []
                for on in (False, True):
                    numpy_path(on)
                    rng = random.Random(seed)
                    runs.append((vars(plan_instances(documents, params, rng, sentence_order)), rng.getstate()))
                (compiled, compiled_state), (python, python_state) = runs
                assert compiled_state == python_state
                assert compiled.keys() == python.keys()
                for name in python:
                    assert compiled[name].dtype == python[name].dtype, name
                    np.testing.assert_array_equal(compiled[name], python[name], err_msg=name)


def test_a_plan_kernel_that_disagrees_is_not_used(monkeypatch):
    """The once-per-process check: a kernel whose plan differs from Python's (as a later Python's ``random``
    could make it) is not used; the plan is Python's."""
    import random

    from common.objectives import bert
    from common.objectives.documents import TokenizedDocuments

    class Skewed:
        def __getattr__(self, name):
            return getattr(BUILT, name)

        def plan_instances(self, *args):
            made = BUILT.plan_instances(*args)
            args[-1][:made] = ~args[-1][:made]  # every next-sentence label flipped
            return made

    skewed = Skewed()
    assert bert._plan_kernel_agrees(BUILT) and not bert._plan_kernel_agrees(skewed)
    monkeypatch.setattr(kernels, "compiled", skewed)
    documents = TokenizedDocuments.from_lists([[[1] * 30, [2] * 30, [3] * 30]] * 4)
    plan = bert.plan_instances(documents, bert.BertParams(), random.Random(1))
    monkeypatch.setattr(kernels, "compiled", None)
    expected = bert.plan_instances(documents, bert.BertParams(), random.Random(1))
    np.testing.assert_array_equal(plan.is_random_next, expected.is_random_next)


def test_the_plan_kernel_refuses_a_table_it_cannot_walk():
    """A document without segments (the documents' own invariant broken) is a one-line ValueError, not a read
    outside the arrays."""
    import random
    state = np.array(random.Random(1).getstate()[1], dtype=np.int64)
    out = [np.empty(3, dtype=np.int64) for _ in range(4)] + [np.empty(3, dtype=bool)]
    segments = np.array([0, 5, 9, 12], dtype=np.int64)
    with pytest.raises(ValueError, match="a document without segments"):
        BUILT.plan_instances(state, segments, np.array([0, 2, 2, 3], dtype=np.int64), 3, 3, 125, 0.1, False, *out)
    with pytest.raises(ValueError, match="outside the segment table"):
        BUILT.plan_instances(state, segments, np.array([0, 2, 7], dtype=np.int64), 3, 2, 125, 0.1, False, *out)
    assert BUILT.plan_instances(state, segments, np.array([0, 2, 3], dtype=np.int64), 3, 2, 125, 0.1, False,
                                *out) >= 2


def _layout_outputs(rows: int, width: int) -> list[np.ndarray]:
    return [np.zeros((rows, width), np.int32), np.zeros((rows, width), bool), np.zeros((rows, width), np.int32),
            np.zeros((rows, width), np.int32), np.zeros(rows, np.int32)]


def test_the_kernels_refuse_sizes_that_wrap_around():
    """Every count and size the kernels take is checked without overflow: rows * width that wraps to 0 bytes, a
    negative count, a start near 2**63 that wraps past the token table are one-line ValueErrors (they read and
    wrote outside the arrays: a segfault, or 4 bytes before the tokens read silently)."""
    assert BUILT is not None
    empty = {dtype: np.zeros(0, dtype) for dtype in (np.uint8, np.int64, np.float64, np.int32, np.float32)}
    with pytest.raises(ValueError):  # 2**61 * 8 cells: 2**64 bytes, 0 after the wrap
        BUILT.select_tokens(empty[np.uint8], empty[np.int64], empty[np.float64], 2**61, 8, empty[np.uint8])
    with pytest.raises(ValueError):
        BUILT.select_tokens(empty[np.uint8], empty[np.int64], empty[np.float64], -1, 8, empty[np.uint8])
    with pytest.raises(ValueError):
        BUILT.apply_masks(empty[np.uint8], empty[np.float64], empty[np.float64], empty[np.int64], 2**61, 8, 0, 0, 103,
                          empty[np.int32], empty[np.int32], empty[np.int32], empty[np.float32])
    with pytest.raises(MemoryError):  # 2**61 rows of no values: the sizes table's length wrapped to one slot
        BUILT.encode_records([(b"x", "i", empty[np.int32], 0)], 2**61)
    with pytest.raises(ValueError):
        BUILT.encode_records([(b"x", "i", empty[np.int32], 3)], -1)
    with pytest.raises(ValueError):
        BUILT.encode_records([(b"x", "q", empty[np.int64], 2**61)], 2)
    with pytest.raises(ValueError, match="at least one feature"):  # 2**61 rows of no features: a loop, no memory
        BUILT.encode_records([], 2**61)
    tokens = np.arange(10, dtype=np.int32)
    one = np.ones(1, np.int64)
    for a_start, a_length, b_start, b_length in ((2**63 - 1, 1, 0, 1), (0, 1, 2, 2**63 - 2), (-1, 1, 0, 1),
                                                 (0, 2**63 - 1, 0, 1), (0, 1, 0, -1), (9, 2, 0, 1)):
        columns = [one * a_start, one * a_length, one * b_start, one * b_length]
        with pytest.raises(ValueError, match="outside the tokens or the sequence length"):
            BUILT.pair_layout(tokens, *columns, 1, 8, 1, 2, 0, *_layout_outputs(1, 8))
    with pytest.raises(ValueError):
        BUILT.pair_layout(tokens, one, one, one, one, 2**61, 8, 1, 2, 0, *_layout_outputs(1, 8))
    state = np.array(__import__("random").Random(1).getstate()[1], dtype=np.int64)
    out = [empty[np.int64]] * 4 + [empty[np.uint8]]
    with pytest.raises(ValueError):
        BUILT.plan_instances(state, np.zeros(1, np.int64), np.zeros(1, np.int64), 2**61, 0, 125, 0.1, False, *out)
    # What fits is still taken: the edges of the checks.
    columns = [one * 9, one * 1, one * 0, one * 4]
    original, *_ = outputs = _layout_outputs(1, 8)
    BUILT.pair_layout(tokens, *columns, 1, 8, 1, 2, 0, *outputs)
    assert original.tolist() == [[1, 9, 2, 0, 1, 2, 3, 2]]


def test_a_kernels_file_that_does_not_load_is_one_warning_line_and_numpy(tmp_path, monkeypatch, caplog):
    """Not built: numpy, said in the status the worker logs.  Built but broken (another Python's build, a
    truncated file): numpy too, never a traceback, and one warning line saying why, since that install meant to
    have them.  MLM_PIPELINE_NUMPY_KERNELS: numpy, said so."""
    import sysconfig
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    (tmp_path / f"broken_kernels_for_test{suffix}").write_bytes(b"not an ELF file")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(kernels.FORCE_NUMPY, raising=False)
    # found elsewhere than beside common/kernels.py (another checkout's, through its editable install): not ours
    assert kernels._load("broken_kernels_for_test") == (None, "numpy (common/_kernels.c is not built here)")
    with caplog.at_level("WARNING", logger="common.kernels"):
        module, status = kernels._load("broken_kernels_for_test", beside=tmp_path)
    assert module is None and "was built but does not load" in status
    assert [record.getMessage() for record in caplog.records] == [f"kernels: {status}"]
    assert "\n" not in status
    caplog.clear()
    assert kernels._load("no_such_kernels_module_here") == (None, "numpy (common/_kernels.c is not built here)")
    assert not caplog.records  # an install without a compiler chose numpy: said in the status, not warned
    monkeypatch.setenv(kernels.FORCE_NUMPY, "1")
    assert kernels._load() == (None, f"numpy ({kernels.FORCE_NUMPY}=1)")
    monkeypatch.delenv(kernels.FORCE_NUMPY)
    module, status = kernels._load()
    assert module is BUILT and status == "compiled"


def test_a_checkout_without_a_build_uses_the_installed_build_of_the_same_source(tmp_path, monkeypatch, caplog):
    """``pip install .`` builds the kernels into site-packages; ``python -m ventilator`` in the checkout then imports
    the checkout's unbuilt ``common/`` first.  The build of this very source elsewhere on the path is used (its
    compiled-in sha256 is the source's); one of another source, or one that does not load, is passed over."""
    assert BUILT is not None and BUILT.__file__ is not None
    import shutil
    import sysconfig
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    installed, checkout = tmp_path / "site-packages" / "pkg_for_test", tmp_path / "checkout" / "pkg_for_test"
    installed.mkdir(parents=True)
    checkout.mkdir(parents=True)
    (tmp_path / "broken" / "pkg_for_test").mkdir(parents=True)
    (tmp_path / "broken" / "pkg_for_test" / f"_kernels{suffix}").write_bytes(b"not an ELF file")
    shutil.copy(BUILT.__file__, installed / f"_kernels{suffix}")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    monkeypatch.syspath_prepend(str(tmp_path / "broken"))  # first on the path: passed over, not fatal
    with caplog.at_level("WARNING", logger="common.kernels"):
        module = kernels._installed_build("pkg_for_test._kernels", checkout)
    assert module is not None and module.SOURCE_SHA256 == BUILT.SOURCE_SHA256
    assert module.__file__ == str(installed / f"_kernels{suffix}") and not caplog.records
    assert kernels._installed_build("pkg_for_test._kernels", installed) is None  # beside it: _load's own case
    edited = tmp_path / "_kernels.c"
    edited.write_bytes(kernels.SOURCE.read_bytes() + b"/* edited */\n")
    monkeypatch.setattr(kernels, "SOURCE", edited)  # the checkout's source moved on: the install is not its build
    assert kernels._installed_build("pkg_for_test._kernels", checkout) is None


FOREIGN = r"""
#include <Python.h>
#include <stdio.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__kernels(void) {
    FILE *f = fopen(MARKER, "w");  /* what any code of another package's module could do when loaded */
    if (f) fclose(f);
    return PyModule_Create(&def);
}
"""


def test_a_build_of_other_source_elsewhere_on_the_path_is_never_run(tmp_path, monkeypatch):
    """Another package's ``common/_kernels`` (``common`` is a common name), or a build of other source, is passed
    over without running its code: its compiled-in sha256 is read from the file before the module is loaded."""
    import shutil
    import sysconfig
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "a C compiler (the kernels are built with one)"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    foreign, checkout = tmp_path / "site-packages" / "pkg_for_test", tmp_path / "checkout" / "pkg_for_test"
    foreign.mkdir(parents=True)
    checkout.mkdir(parents=True)
    marker = tmp_path / "foreign_code_ran"
    source = tmp_path / "foreign.c"
    source.write_text(FOREIGN)
    subprocess.run([compiler, "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    f'-DMARKER="{marker}"', str(source), "-o", str(foreign / f"_kernels{suffix}")], check=True)
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    assert kernels._installed_build("pkg_for_test._kernels", checkout) is None
    assert not marker.exists(), "the foreign module's code ran before its source was checked"


def unaligned(values: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``values`` one byte off its type's alignment (as np.frombuffer at an offset makes)."""
    raw = bytearray(values.nbytes + 1)
    out = np.frombuffer(raw, dtype=values.dtype, offset=1, count=values.size).reshape(values.shape)
    out[...] = values
    assert not out.flags.aligned and out.flags.c_contiguous
    return out


def test_unaligned_arrays_are_refused_by_the_kernels_and_realigned_by_their_callers():
    """C reads an int32 or a double through a pointer of its type: one off its alignment is undefined behaviour
    (UBSan reports it; SIGBUS where the CPU requires alignment).  The kernels refuse it; the Python callers hand
    over aligned arrays (np.ascontiguousarray keeps an unaligned one as it is), so the bytes are the same."""
    assert BUILT is not None
    values = np.arange(4 * 30, dtype=np.int32).reshape(4, 30) * 1000
    with pytest.raises(ValueError, match="aligned"):
        BUILT.encode_records([(b"x", "i", unaligned(values), 30)], 4)
    assert encode_records({"x": unaligned(values)}) == encode_records({"x": values})
    special = SpecialIds(cls=101, sep=102, mask=103, pad=0, unk=100, vocab_size=30522, starts_word=np.ones(30522, dtype=bool))
    tokens = np.arange(50, dtype=np.int32)
    plan = InstancePlan(np.array([0, 10]), np.array([5, 3]), np.array([20, 30]), np.array([4, 6]), np.zeros(2, bool))
    np.testing.assert_array_equal(lay_out_pairs(unaligned(tokens), plan, 16, special).original,
                                  lay_out_pairs(tokens, plan, 16, special).original)
    candidates = np.ones((2, 16), dtype=bool)
    budget = np.array([3, 4], dtype=np.int64)
    np.testing.assert_array_equal(select_tokens(candidates, unaligned(budget), np.random.default_rng(1)),
                                  select_tokens(candidates, budget, np.random.default_rng(1)))


def test_the_encoder_refuses_a_feature_that_is_not_a_tuple_with_a_type_error():
    """A spec that is not a (key, code, values, width) tuple is the caller's TypeError (it was a SystemError from
    the argument parser); what was acquired before it is released."""
    assert BUILT is not None
    values = np.zeros((2, 3), dtype=np.int32)
    references = sys.getrefcount(values)
    for spec in (5, [b"x", "i", values, 3], (b"x", "i")):
        with pytest.raises(TypeError):
            BUILT.encode_records([(b"k", "i", values, 3), spec], 2)
    assert sys.getrefcount(values) == references
    with pytest.raises(TypeError):
        BUILT.encode_records(iter([(b"k", "i", values, 3)]).__next__, 2)


def test_apply_masks_refuses_a_selection_of_another_shape(numpy_path):
    """The kernel reads ``selected`` as the ids' (rows, width): a wider one was read row-shifted (other positions
    masked, silently) where numpy raised.  Both paths refuse it before any draw."""
    original = np.arange(12, dtype=np.int32).reshape(3, 4)
    selected = np.zeros((3, 5), dtype=bool)
    selected[:, 4] = True
    for on in (False, True):
        numpy_path(on)
        rng = np.random.default_rng(1)
        with pytest.raises(ValueError, match="selected positions of shape"):
            apply_masks(original, selected, 5, 103, 30522, rng)
        assert rng.random() == np.random.default_rng(1).random()


def test_a_plan_the_kernel_refuses_leaves_the_random_where_it_was():
    """The Random is set from C's state only after the whole plan succeeded: a refusal half-way (a document
    without segments after 30 good ones) raises and leaves it untouched, so nothing downstream draws from a
    state no Python loop would have reached."""
    import random

    from common.objectives.bert import BertParams, plan_instances
    from common.objectives.documents import TokenizedDocuments
    good = TokenizedDocuments.from_lists([[[1] * 40, [2] * 40]] * 30)
    broken = TokenizedDocuments(good.tokens, good.segment_offsets, [*good.document_offsets, good.num_segments])
    rng = random.Random(4)
    before = rng.getstate()
    with pytest.raises(ValueError, match="a document without segments"):
        plan_instances(broken, BertParams(), rng)
    assert rng.getstate() == before


def test_a_build_of_another_version_of_the_source_is_not_used(tmp_path, monkeypatch, caplog):
    """An in-place build (`python setup.py build_ext --inplace`, `pip install -e .`) is not redone when
    common/_kernels.c changes: a stale module would run the old C on the new callers' arguments.  The module
    carries the sha256 of the source it was built from; one that differs from the source beside it is not used
    (one warning line: rebuild), and the build here is of this source."""
    assert BUILT is not None
    assert BUILT.SOURCE_SHA256 == __import__("hashlib").sha256(kernels.SOURCE.read_bytes()).hexdigest(), (
        "common/_kernels.c changed since it was built here: `python setup.py build_ext --inplace`")
    edited = tmp_path / "_kernels.c"
    edited.write_bytes(kernels.SOURCE.read_bytes() + b"/* edited */\n")
    monkeypatch.setattr(kernels, "SOURCE", edited)
    monkeypatch.delenv(kernels.FORCE_NUMPY, raising=False)
    with caplog.at_level("WARNING", logger="common.kernels"):
        module, status = kernels._load()
    assert module is None and "changed since it was built" in status and "build_ext --inplace" in status
    assert [record.getMessage() for record in caplog.records] == [f"kernels: {status}"]
    monkeypatch.setattr(kernels, "SOURCE", tmp_path / "absent.c")  # an install without the source: not checked
    assert kernels._load() == (BUILT, "compiled")


def test_apply_masks_refuses_ids_that_do_not_fit_int32():
    """The kernel writes int32 ids: a random id or a mask id past int32 was narrowed to another token silently;
    now it is refused, and what fits is still taken."""
    assert BUILT is not None

    def masks(mask_id: int, word: int) -> np.ndarray:
        selected = np.array([[False, True, True]])
        input_ids = np.array([[5, 6, 7]], np.int32)
        replace = np.array([0.1, 0.9])  # the first masked, the second ...
        keep = np.array([0.9, 0.9])  # ... a random id
        BUILT.apply_masks(selected, replace, keep, np.array([0, word], np.int64), 1, 3, 2, 2, mask_id, input_ids,
                          np.zeros((1, 2), np.int32), np.zeros((1, 2), np.int32), np.zeros((1, 2), np.float32))
        return input_ids

    assert masks(103, 2**31 - 1).tolist() == [[5, 103, 2**31 - 1]]
    for mask_id, word in ((103, 2**31), (103, -2**31 - 1), (103, 2**40), (2**31, 7), (-2**31 - 1, 7)):
        with pytest.raises(ValueError, match="does not fit the int32 ids"):
            masks(mask_id, word)


def _build_kernels(tmp_path, *defines: str):
    """common/_kernels.c compiled here with ``defines`` (the C compiler and flags Python was built with), loaded
    as a module of its own beside the project's."""
    import importlib.util
    import shlex
    import sysconfig

    tmp_path.mkdir(parents=True, exist_ok=True)
    target = tmp_path / f"_kernels{sysconfig.get_config_var('EXT_SUFFIX')}"
    compiler = shlex.split(sysconfig.get_config_var("CC"))
    shared = shlex.split(sysconfig.get_config_var("LDSHARED"))[1:]
    subprocess.run([*compiler, *shared, "-O1", "-std=c11", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    *(f"-D{define}" for define in defines), str(kernels.SOURCE), "-o", str(target)], check=True)
    spec = importlib.util.spec_from_file_location("_kernels", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_encoder_refuses_records_it_wrote_otherwise_than_it_sized(tmp_path):
    """encode_records sizes every record, allocates their total, then writes them: a build whose sizes are off
    (a byte more per integer feature) returns no bytes but a RuntimeError naming what it wrote against what it
    sized; the same source built without the fault writes the shard's bytes."""
    assert BUILT is not None
    features = [(b"input_ids", "i", np.arange(6, dtype=np.int32).reshape(2, 3), 3),
                (b"weights", "f", np.ones((2, 2), "<f4"), 2)]
    assert _build_kernels(tmp_path / "good").encode_records(features, 2) == BUILT.encode_records(features, 2)
    missized = _build_kernels(tmp_path / "missized", "KERNELS_TEST_EXTRA=1")
    with pytest.raises(RuntimeError, match=r"encode_records: wrote 3 bytes of values sized 4"):
        missized.encode_records(features, 2)


def _ngram_call(candidates, word_of, word_count, keys=None, rows=1, width=4, ngram=3, budget=2):
    """BUILT.select_ngrams on one row of ``width`` (keys and draws 0.5 unless given); returns the selection."""
    keys = np.full(rows * width, 0.5) if keys is None else np.asarray(keys, np.float64)
    selected = np.zeros(rows * width, bool)
    BUILT.select_ngrams(np.asarray(candidates, bool), np.asarray(word_of, np.int64), np.asarray(word_count, np.int64),
                        keys, np.full(rows * width, 0.5), np.array([0.5, 0.8]), np.full(rows, budget, np.int64),
                        rows, width, ngram, selected)
    return selected


def test_the_ngram_kernel_refuses_words_outside_the_row_and_nan_keys():
    """select_ngrams indexes its tables by the caller's word numbers: a candidate's word past the row's count, a
    count past the width, a NaN key (no place in a sort), a short buffer or rows * width that wraps are one-line
    ValueErrors, never a read or write outside the arrays; what is in range is taken."""
    assert BUILT is not None
    with pytest.raises(ValueError, match="a candidate of word 2"):
        _ngram_call([1, 1, 1, 0], [0, 1, 2, -1], [2])
    with pytest.raises(ValueError, match="a candidate of word -1"):
        _ngram_call([1, 1, 0, 0], [0, -1, -1, -1], [1])
    with pytest.raises(ValueError, match="5 words"):
        _ngram_call([1, 1, 1, 1], [0, 1, 2, 3], [5])
    with pytest.raises(ValueError, match="NaN"):
        _ngram_call([1, 1, 1, 1], [0, 1, 2, 3], [4], keys=[0.1, np.nan, 0.3, 0.4])
    with pytest.raises(ValueError, match="at least 1"):
        _ngram_call([1, 1, 1, 1], [0, 1, 2, 3], [4], ngram=0)
    with pytest.raises(ValueError):  # the thresholds hold 2 of the 9 a 10-gram needs
        _ngram_call([1, 1, 1, 1], [0, 1, 2, 3], [4], ngram=10)
    with pytest.raises(ValueError):  # 2**61 rows of 8: the cells wrap around
        _ngram_call([1] * 4, [0, 1, 2, 3], [4], rows=2**61, width=8)
    # Word 1 (two pieces) has the least key, so it comes first; its draw 0.5 passes the first threshold only (a
    # 2-gram: words 1 and 2, three pieces), which fills the budget of 3.  The 4th key is past the words: unread.
    selected = _ngram_call([1, 1, 1, 1], [0, 1, 1, 2], [3], keys=[0.5, 0.4, 0.6, np.nan], budget=3)
    assert selected.tolist() == [False, True, True, True]
