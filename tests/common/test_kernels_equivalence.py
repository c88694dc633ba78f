"""Each compiled kernel against the code it replaces on generated inputs (hypothesis): shapes from empty to
wide, edge values, seeds, dupe passes on one Random, and the random streams left where the numpy/Python code
leaves them.  Derandomized, so CI sees the same examples each run; tests/common/test_kernels.py holds the
fixed cases and the refusals."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import kernels
from common.objectives.albert import AlbertParams, select_ngrams
from common.objectives.bert import BertParams, InstancePlan, lay_out_pairs, plan_instances
from common.objectives.documents import TokenizedDocuments
from common.objectives.masking import apply_masks, select_tokens
from common.tokenization.vocabulary import SpecialIds
from common.writers.tfrecord import encode_records

BUILT = kernels.compiled
pytestmark = pytest.mark.skipif(BUILT is None, reason="common/_kernels.c is not built (test_kernels.py says so)")
CHECKS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def both(monkeypatch, function):
    """``function()`` with the kernels, then with the numpy/Python code."""
    monkeypatch.setattr(kernels, "compiled", BUILT)
    compiled = function()
    monkeypatch.setattr(kernels, "compiled", None)
    fallback = function()
    monkeypatch.setattr(kernels, "compiled", BUILT)
    return compiled, fallback


def assert_arrays_equal(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for index, (a, b) in enumerate(zip(got, expected)):
        assert a.dtype == b.dtype and a.shape == b.shape, index
        np.testing.assert_array_equal(a, b, err_msg=str(index))


documents_strategy = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=12), min_size=1, max_size=25)


@CHECKS
@given(documents=documents_strategy, max_seq_length=st.sampled_from([5, 6, 9, 40, 128, 512]),
       short_seq_prob=st.sampled_from([0.0, 0.1, 0.5, 1.0]), seed=st.integers(0, 2**64),
       advance=st.integers(0, 700), gauss=st.booleans(), dupe_factor=st.integers(1, 3),
       sentence_order=st.booleans())
def test_the_plan_is_pythons(monkeypatch, documents, max_seq_length, short_seq_prob, seed, advance, gauss,
                             dupe_factor, sentence_order):
    """Same instances and the Random in the same state, from a Random at any point of its 624-word block (and
    with a pending gauss), over several dupe passes on one Random."""
    table = TokenizedDocuments.from_lists([[[7] * length for length in document] for document in documents])
    params = BertParams(max_seq_length=max_seq_length, short_seq_prob=short_seq_prob)

    def run():
        rng = random.Random(seed)
        for _ in range(advance):
            rng.getrandbits(32)
        if gauss:
            rng.gauss(0, 1)
        passes = [plan_instances(table, params, rng, sentence_order) for _ in range(dupe_factor)]
        return [column for plan in passes for column in vars(plan).values()], rng.getstate()

    (compiled, compiled_state), (python, python_state) = both(monkeypatch, run)
    assert compiled_state == python_state
    assert_arrays_equal(compiled, python)


SPECIAL = SpecialIds(cls=101, sep=102, mask=103, pad=0, unk=100, vocab_size=30522,
                     starts_word=np.ones(30522, dtype=bool))


@CHECKS
@given(data=st.data(), rows=st.integers(0, 20), max_seq_length=st.sampled_from([3, 4, 8, 33, 128]))
def test_the_pair_layout_is_numpys(monkeypatch, data, rows, max_seq_length):
    tokens = np.asarray(data.draw(st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=300)), np.int32)
    room = min(max_seq_length - 3, len(tokens))
    a_length = np.asarray([data.draw(st.integers(0, room)) for _ in range(rows)], np.int64)
    b_length = np.asarray([data.draw(st.integers(0, room - int(a))) for a in a_length], np.int64)
    a_start = np.asarray([data.draw(st.integers(0, len(tokens) - int(a))) for a in a_length], np.int64)
    b_start = np.asarray([data.draw(st.integers(0, len(tokens) - int(b))) for b in b_length], np.int64)
    plan = InstancePlan(a_start, a_length, b_start, b_length, np.zeros(rows, dtype=bool))

    def run():
        layout = lay_out_pairs(tokens, plan, max_seq_length, SPECIAL)
        return [layout.original, layout.candidates, layout.input_mask, layout.segment_ids,
                layout.sequence_length.astype(np.int32)]

    compiled, fallback = both(monkeypatch, run)
    assert_arrays_equal(compiled, fallback)


@CHECKS
@given(data=st.data(), rows=st.integers(0, 30), width=st.integers(0, 70), seed=st.integers(0, 2**32))
def test_selection_and_masks_are_numpys(monkeypatch, data, rows, width, seed):
    """select_tokens with any budget (none, fewer or more than the candidates), then apply_masks with ids of
    every int32 value and a vocabulary past int32, and the Generator left in the same place."""
    shape = (rows, width)
    generator = np.random.default_rng(seed + 1)
    candidates = generator.random(shape) < data.draw(st.sampled_from([0.0, 0.3, 0.9, 1.0]))
    budget = generator.integers(0, width + 2, rows, endpoint=True)
    original = generator.integers(-2**31, 2**31, shape, dtype=np.int32)
    mask_id = data.draw(st.integers(0, 2**31 - 1))
    vocab_size = data.draw(st.sampled_from([1, 2, 30522, 2**31 - 1]))
    spare_slots = data.draw(st.integers(0, 3))

    def run():
        rng = np.random.default_rng(seed)
        selected = select_tokens(candidates, budget, rng)
        predictions = int(selected.sum(axis=1).max(initial=0)) + spare_slots
        masked = apply_masks(original, selected, predictions, mask_id, vocab_size, rng)
        return [selected, masked.input_ids, masked.masked_lm_positions, masked.masked_lm_ids,
                masked.masked_lm_weights, rng.random(2)]

    compiled, fallback = both(monkeypatch, run)
    assert_arrays_equal(compiled, fallback)


@CHECKS
@given(data=st.data(), rows=st.integers(0, 30), width=st.integers(1, 70), seed=st.integers(0, 2**32),
       ngram=st.integers(1, 5), favor_shorter_ngram=st.booleans())
def test_the_ngram_selection_is_numpys(monkeypatch, data, rows, width, seed, ngram, favor_shorter_ngram):
    """ALBERT's n-grams with any budget (none, a few, past the candidates), words of one piece to many, rows
    with no candidate, n-grams longer than a row, and the Generator left in the same place (a width of 0 is
    refused by word_index on both paths).  More than
    _LOCKSTEP_MIN_ROWS rows takes the numpy lockstep walk, fewer its Python loop: both are compared."""
    shape = (rows, width)
    generator = np.random.default_rng(seed + 1)
    candidates = generator.random(shape) < data.draw(st.sampled_from([0.0, 0.3, 0.9, 1.0]))
    starts_word = generator.random(shape) < data.draw(st.sampled_from([0.0, 0.2, 0.6, 1.0]))
    budget = generator.integers(0, data.draw(st.sampled_from([1, 3, width + 2])), rows, endpoint=True)
    params = AlbertParams(ngram=ngram, favor_shorter_ngram=favor_shorter_ngram)

    def run():
        rng = np.random.default_rng(seed)
        return [select_ngrams(candidates, starts_word, budget, params, rng), rng.random(2)]

    compiled, fallback = both(monkeypatch, run)
    assert_arrays_equal(compiled, fallback)


feature_dtypes = st.sampled_from([np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64, np.uint32,
                                  np.float32, np.float64, np.bool_])


@CHECKS
@given(data=st.data(), rows=st.integers(1, 12), dtypes=st.lists(feature_dtypes, min_size=1, max_size=5))
def test_the_encoder_is_numpys(monkeypatch, data, rows, dtypes):
    """Every varint width (int64 up to 2**35 - 1), floats including NaN and infinities, widths from 0 to past a
    one-byte length, keys up to 127 bytes."""
    edges = np.array([0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**31 - 1, 2**35 - 1])
    generator = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    features = {}
    for index, dtype in enumerate(dtypes):
        shape = (rows, data.draw(st.sampled_from([0, 1, 3, 17, 130])))
        if np.dtype(dtype).kind == "f":
            values = generator.normal(size=shape) * 10.0 ** generator.integers(-40, 40, shape)
            values[generator.random(shape) < 0.1] = generator.choice([np.nan, np.inf, -np.inf, -0.0])
        elif dtype is np.bool_:
            values = generator.random(shape) < 0.5
        else:
            top = min(int(np.iinfo(dtype).max), 2**35 - 1)
            values = np.where(generator.random(shape) < 0.5, generator.choice(edges[edges <= top], shape),
                              generator.integers(0, top, shape, endpoint=True))
        key = f"{index}:" + "k" * data.draw(st.sampled_from([0, 5, 120]))
        features[key] = values.astype(dtype)
    compiled, fallback = both(monkeypatch, lambda: encode_records(features))
    assert compiled == fallback


#: Paragraph text: ASCII, Unicode whitespace that str.rstrip strips (no-break space, ideographic space, the
#: separators), characters of every width of CPython's str (Latin-1, BMP CJK, astral emoji).
paragraph_text = st.text(alphabet=st.sampled_from(list("ab. ?\t") + ["\xa0", "\u3000", "\u2028", "\x1c", "é", "句",
                                                                      "。", "😀"]), min_size=1, max_size=30)


@CHECKS
@given(data=st.data(), paragraphs=st.lists(paragraph_text.filter(lambda p: "\n" not in p), min_size=1, max_size=6))
def test_the_sentence_cut_is_pythons(data, paragraphs):
    """Same segments and pieces for any starts: ascending as the splitter gives them, with repeats, starts on
    a newline or a paragraph's first character, at or past the end, and negative ones."""
    from common.segmenters.sentences import _cut_in_python

    text = "\n".join(paragraphs)
    starts = sorted(data.draw(st.lists(st.integers(-3, len(text) + 3), max_size=12)))
    got = BUILT.cut_segments(text, paragraphs, starts)
    assert got == _cut_in_python(text, paragraphs, starts)
    assert type(got) is list and all(type(segment) is list for segment in got)
    assert [type(piece) for segment in got for piece in segment] == [str] * sum(map(len, got))
    unordered = data.draw(st.permutations(starts))  # never the splitter's, but read inside the text all the same
    assert BUILT.cut_segments(text, paragraphs, unordered) == _cut_in_python(text, paragraphs, unordered)


def test_the_sentence_cut_refuses_paragraphs_that_are_not_its_text():
    """A wrong call is an exception, never a read outside the text."""
    with pytest.raises(ValueError, match="not its paragraphs"):
        BUILT.cut_segments("ab", ["abc"], [1])
    with pytest.raises(ValueError, match="not its paragraphs"):
        BUILT.cut_segments("abcdef", ["a", "b"], [4])
    with pytest.raises(ValueError, match="no paragraph"):
        BUILT.cut_segments("", [], [])
    with pytest.raises(TypeError):
        BUILT.cut_segments("a\nb", ["a", 1], [])
    with pytest.raises(TypeError):
        BUILT.cut_segments("ab", ["ab"], [1.0])
    with pytest.raises(OverflowError):
        BUILT.cut_segments("ab", ["ab"], [2**70])


#: Text for Bling Fire and the byte -> str mapping: sentence ends, CJK terminators and closers (which send a
#: text to the Python path), Unicode whitespace str.strip strips and Bling Fire's own it does not (zero-width
#: space, NUL), combining marks, astral characters and every width of CPython's str.
sentence_atoms = st.sampled_from(["Hello", "world", "Dr.", ".", "!", "?", " ", "  ", "\t", "\xa0", "\u3000",
                                  "\u2028", "\x85", "\x1c", "\u200b", "\x00", "e\u0301", "Z\u0351\u0361", "é", "Ω",
                                  "句", "😀", "𝔘", "。", "！", "；", "…", "⋯", "”", "」", "）", "，", "x" * 40])
line_text = st.lists(sentence_atoms, max_size=25).map("".join)


def cut_at_bytes_in_python(text: str, paragraphs: list[str], utf8: bytes, offsets: np.ndarray):
    """What ``cut_at_bytes`` answers, from the Python path's parts: None for a text with a CJK terminator or an
    offset outside the text, on a continuation byte or before the one before it; else the text cut at the
    offsets mapped to str offsets (sentence_offsets.character_starts, sorted as segment_pieces sorts them)."""
    from common.segmenters.cjk_sentences import has_cjk_terminator
    from common.segmenters.sentence_offsets import character_starts
    from common.segmenters.sentences import _cut_in_python

    if has_cjk_terminator(text, utf8):
        return None
    if len(offsets) and (np.any(np.diff(offsets) < 0) or offsets[0] < 0 or offsets[-1] >= len(utf8)):
        return None
    if len(offsets) and np.any(np.frombuffer(utf8, np.int8)[offsets] < -64):
        return None
    return _cut_in_python(text, paragraphs, sorted(character_starts(text, utf8, offsets)))


def character_byte_starts(utf8: bytes, characters: list[int]) -> np.ndarray:
    """The byte offsets of the given characters of ``utf8``'s text, ascending and unique, as a splitter gives
    its sentence starts: what Bling Fire hands the cut, drawn without Bling Fire, whose library does not load on
    every platform the wheels are built for (aarch64: scripts/wheels.sh)."""
    starts = np.flatnonzero(np.frombuffer(utf8, np.int8) >= -64).astype(np.int32)  # not a continuation byte
    return starts[sorted(set(characters))] if len(starts) else np.zeros(0, np.int32)


@CHECKS
@given(data=st.data(), paragraphs=st.lists(line_text.map(str.strip).filter(bool), min_size=1, max_size=6))
def test_the_cut_at_bytes_is_pythons(data, paragraphs):
    """Same segments and pieces, or None exactly where the Python path must answer, for a splitter's byte offsets
    (ascending character starts: never declined in a text without a terminator), Bling Fire's own where its
    library loads, and any others: on continuation bytes, out of order, negative, past the end."""
    from common.segmenters.blingfire import BlingfireSegmenter
    from common.segmenters.cjk_sentences import UTF8_TERMINATORS
    from common.segmenters.sentence_offsets import byte_starts

    text = "\n".join(paragraphs)
    utf8 = text.encode()
    characters = data.draw(st.lists(st.integers(0, len(text) - 1), max_size=12))
    splitters = [character_byte_starts(utf8, characters)]
    if BlingfireSegmenter.unavailable() is None:
        found = byte_starts(utf8)
        assert found is not None
        splitters.append(found.copy())
    for starts in splitters:
        got = BUILT.cut_at_bytes(text, paragraphs, utf8, starts, UTF8_TERMINATORS)
        assert got == cut_at_bytes_in_python(text, paragraphs, utf8, starts)
        if not any(terminator in text for terminator in "。！；…⋯"):
            assert got is not None
            assert [type(piece) for segment in got for piece in segment] == [str] * sum(map(len, got))
    others = np.array(data.draw(st.lists(st.integers(-3, len(utf8) + 3), max_size=10)), np.int32)
    if data.draw(st.booleans()):
        others.sort()
    assert BUILT.cut_at_bytes(text, paragraphs, utf8, others, UTF8_TERMINATORS) == \
        cut_at_bytes_in_python(text, paragraphs, utf8, others)


def blingfire_unavailable() -> str | None:
    from common.segmenters.blingfire import BlingfireSegmenter

    return BlingfireSegmenter.unavailable()


#: The Bling Fire segmenter's whole path, where its library loads; where it does not (aarch64), that segmenter
#: refuses a job before any work (scripts/wheels.sh checks it) and its path has nothing to run.
needs_blingfire = pytest.mark.skipif(blingfire_unavailable() is not None, reason=str(blingfire_unavailable()))


@needs_blingfire
@CHECKS
@given(lines=st.lists(st.one_of(line_text, st.sampled_from(["", " ", "\t \u3000", "\n"])), max_size=8))
def test_segment_pieces_are_pythons(monkeypatch, lines):
    """A document's segments with the kernels are the Python path's, whitespace-only and empty lines included."""
    from common.segmenters.sentences import Segmenter, segment_pieces

    compiled, fallback = both(monkeypatch, lambda: segment_pieces(lines, Segmenter.BLINGFIRE))
    assert compiled == fallback


@needs_blingfire
@pytest.mark.parametrize("lines", [["word " * 30_000 + "end.", "Next one. Two."], ["é" * 150_000, "b. c."],
                                   ["😀 Hi there. " * 12_000, "", "Ωμέγα. Then." * 9_000]], ids=range(3))
def test_segment_pieces_of_very_long_lines_are_pythons(monkeypatch, lines):
    """Past the reused buffers' size and the 100,000-character bound on a segment."""
    from common.segmenters.sentences import Segmenter, segment_pieces

    compiled, fallback = both(monkeypatch, lambda: segment_pieces(lines, Segmenter.BLINGFIRE))
    assert compiled == fallback and len(compiled) > 2


def test_the_cut_at_bytes_refuses_what_it_cannot_read():
    """A wrong call is an exception, never a read outside its buffers."""
    with pytest.raises(ValueError, match="int32"):
        BUILT.cut_at_bytes("ab. c", ["ab. c"], b"ab. c", b"\x00\x00\x00", (b"\xe3\x80\x82",))
    with pytest.raises(ValueError, match="aligned"):
        BUILT.cut_at_bytes("ab. c", ["ab. c"], b"ab. c", memoryview(bytes(9))[1:], (b"\xe3\x80\x82",))
    with pytest.raises(TypeError, match="terminator"):
        BUILT.cut_at_bytes("ab. c", ["ab. c"], b"ab. c", np.zeros(1, np.int32), ("。",))
    with pytest.raises(TypeError, match="terminator"):
        BUILT.cut_at_bytes("ab. c", ["ab. c"], b"ab. c", np.zeros(1, np.int32), (b"",))
    with pytest.raises(ValueError, match="not its paragraphs"):
        BUILT.cut_at_bytes("ab. c", ["ab."], b"ab. c", np.zeros(1, np.int32), ())
    assert BUILT.cut_at_bytes("ab. c", ["ab. c"], b"ab. c", np.array([0, 4], np.int32), ()) == [["ab."], [" c"]]
    assert BUILT.cut_at_bytes("ab. c", ["ab. c"], b"ab. c", np.array([0, 4], np.int32), (b". ",)) is None
