"""Dynamic masking: new BERT masks for every (seed, epoch, record).

The stored records are masked once, when the pipeline wrote them.  Here the
original tokens are put back first (``masked_lm_ids`` at
``masked_lm_positions``), then BERT's rule is drawn again: ``num_to_predict``
of the non-special positions (not [CLS], not the [SEP]s, not padding) chosen
uniformly, each 80% [MASK], 10% itself, 10% a random id — the project's own
masking functions (common.objectives.masking), imported here only.

Unmasked outputs (``--objective roberta --masking none``) are what RoBERTa
recipes store: tokens, ``special_tokens_mask`` and no masks.  For them the
server adds the three mask features to every batch (:func:`served_layout`)
and draws them the same way; ``special_tokens_mask`` says which positions
are never masked (separators inside a block included).

With ``--whole-word-mask`` (records that carry ``word_starts``: RoBERTa's
unmasked blocks, ELECTRA's ``--word-starts``; with ``--word-segmenter``,
Chinese words) whole words are drawn instead of single positions, as BERT's
``do_whole_word_mask`` does: words in random order, each taken if all its
tokens still fit in the record's budget, so a masked set is always a union
of whole words.

Every draw is a hash of (seed, epoch, record, position, purpose), not a
generator's running state, so a record's masks do not depend on which
batch, rank or server it lands in, and a whole batch is drawn at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from common.hashing import mix64
from common.objectives.base import derive_seed
from common.objectives.masking import apply_masks, num_to_predict  # the project's masking: imported here only
from loader.layout import Field, RecordLayout

#: The features dynamic masking rewrites (and needs) in a masked output.
MASKED_FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                   "masked_lm_weights")
#: What an unmasked output needs instead; the mask features are then added to every batch.
UNMASKED_FEATURES = ("input_ids", "input_mask", "special_tokens_mask")
MASK_FIELDS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")


@dataclass(frozen=True)
class MaskingParams:
    mask_id: int
    vocab_size: int
    masked_lm_prob: float = 0.15
    #: Mask slots per record for unmasked outputs (a masked output keeps its own); None: ceil(length * prob).
    max_predictions: int | None = None
    #: Draw whole words (the records' ``word_starts``) rather than single positions.
    whole_word: bool = False


def served_layout(stored: RecordLayout, params: MaskingParams) -> RecordLayout:
    """The records as batches carry them with dynamic masking: as stored for a
    masked output; with the mask features added for an unmasked one.  A
    ValueError names what is missing."""
    names = {f.name for f in stored.fields}
    if params.whole_word and "word_starts" not in names:
        raise ValueError("--whole-word-mask needs records with word_starts (--objective roberta --masking none, or "
                         f"--objective electra --word-starts); these records have {', '.join(sorted(names))}")
    if all(name in names for name in MASKED_FEATURES):
        return stored
    if all(name in names for name in UNMASKED_FEATURES) and not names & set(MASK_FIELDS):
        width = next(f.width for f in stored.fields if f.name == "input_ids")
        slots = params.max_predictions or max(1, math.ceil(width * params.masked_lm_prob))
        return RecordLayout((*stored.fields, Field("masked_lm_positions", "int32", slots),
                             Field("masked_lm_ids", "int32", slots), Field("masked_lm_weights", "float32", slots)))
    raise ValueError(f"--dynamic-masking needs a masked output ({', '.join(MASKED_FEATURES)}) or an unmasked one "
                     f"({', '.join(UNMASKED_FEATURES)}: --objective roberta --masking none); these records have "
                     f"{', '.join(sorted(names))}")


def _uniform(keys: np.ndarray, columns: np.ndarray, stream: int) -> np.ndarray:
    """Uniform [0, 1) draws, one per (record key, column) pair, for ``stream``."""
    with np.errstate(over="ignore"):
        salt = mix64(np.uint64(stream) * np.uint64(0x9E3779B97F4A7C15) + columns.astype(np.uint64))
        bits = mix64(keys ^ salt)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class _PositionDraws:
    """Stands in for the generator apply_masks draws from: each call gives
    one draw per selected position (in np.nonzero order, as apply_masks
    lists them), from its own stream, keyed by record and position."""

    def __init__(self, keys: np.ndarray, selected: np.ndarray):
        rows, columns = np.nonzero(selected)
        self._keys, self._columns = keys[rows], columns
        self._stream = 1  # stream 0 chose the positions

    def random(self, size: int) -> np.ndarray:
        if size != len(self._columns):
            raise AssertionError("apply_masks draws one value per selected position")
        self._stream += 1
        return _uniform(self._keys, self._columns, self._stream)

    def integers(self, low: int, high: int, size: int) -> np.ndarray:
        return low + np.floor(self.random(size) * (high - low)).astype(np.int64)


def restore(features: dict[str, np.ndarray]) -> np.ndarray:
    """The unmasked input ids: each masked position's original id put back."""
    original = features["input_ids"].copy()
    positions, ids = features["masked_lm_positions"], features["masked_lm_ids"]
    rows, slots = np.nonzero(features["masked_lm_weights"] > 0)
    original[rows, positions[rows, slots]] = ids[rows, slots]
    return original


def candidates(features: dict[str, np.ndarray], original: np.ndarray | None = None) -> np.ndarray:
    """Maskable positions: those ``special_tokens_mask`` does not mark, when
    the records carry it.  Else the positions inside the sequence whose
    original token is neither the first one's ([CLS], ``<s>``) nor the
    closing one's ([SEP], ``</s>``): that also leaves out the [SEP] between
    BERT's segments and the separators inside a packed RoBERTa block (special
    tokens are never made from a document's text, so these ids appear only
    where the pipeline put them).  ``original``: the unmasked ids (restored
    from the stored masks when not given)."""
    input_mask = features["input_mask"]
    if "special_tokens_mask" in features:
        return (input_mask == 1) & (features["special_tokens_mask"] == 0)
    ids = restore(features) if original is None else original
    rows = np.arange(len(ids))
    last = np.maximum(input_mask.sum(axis=1) - 1, 0)
    first_id, closing_id = ids[:, :1], ids[rows, last][:, None]
    return (input_mask == 1) & (ids != first_id) & (ids != closing_id)


def remask(features: dict[str, np.ndarray], record_ids: np.ndarray, seed: int, epoch: int,
           params: MaskingParams) -> dict[str, np.ndarray]:
    """The batch with masks drawn anew for (seed, epoch, record); other features untouched."""
    missing = [name for name in MASK_FIELDS if name not in features]
    if missing:
        raise ValueError(f"dynamic masking needs the features {', '.join(missing)} (see served_layout)")
    original = restore(features)
    maskable = candidates(features, original)
    max_predictions = features["masked_lm_positions"].shape[1]
    base = np.uint64(derive_seed(seed, f"loader-epoch-{epoch}", 0, "mask"))
    with np.errstate(over="ignore"):
        keys = mix64(base ^ mix64(np.asarray(record_ids, dtype=np.uint64)))
    n, length = original.shape
    budget = num_to_predict(features["input_mask"].sum(axis=1), params.masked_lm_prob, max_predictions)
    if params.whole_word:
        selected = whole_words(maskable, features["word_starts"] != 0, keys, budget)
        return _masked(features, original, selected, max_predictions, params, keys)
    # A uniform subset of `budget` candidates: those with the smallest keys.
    draws = np.where(maskable, _uniform(keys[:, None], np.arange(length)[None, :], 0), 2.0)
    take = min(max_predictions, length)
    smallest = np.argpartition(draws, take - 1, axis=1)[:, :take]  # the `take` smallest keys, unordered
    order = np.take_along_axis(smallest, np.argsort(np.take_along_axis(draws, smallest, axis=1), axis=1), axis=1)
    selected = np.zeros((n, length), dtype=bool)
    np.put_along_axis(selected, order, np.arange(order.shape[1])[None, :] < budget[:, None], axis=1)
    selected &= maskable
    return _masked(features, original, selected, max_predictions, params, keys)


def whole_words(maskable: np.ndarray, word_starts: np.ndarray, keys: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Which positions to mask, word by word: per record, its words (a maskable position that starts a word,
    or follows one that is not maskable, opens one; the maskable positions after it continue it) in an order
    drawn from the record's key, each taken if its tokens still fit in ``budget`` (BERT's rule: a word that
    does not fit is skipped, a shorter one after it may be taken)."""
    n, length = maskable.shape
    before = np.zeros((n, 1), dtype=bool)
    opens = maskable & (word_starts | ~np.concatenate([before, maskable[:, :-1]], axis=1))
    word_rows, word_columns = np.nonzero(opens)  # row-major: words in order, row by row
    if not len(word_rows):
        return np.zeros((n, length), dtype=bool)
    word_of_position = np.cumsum(opens.ravel()) - 1  # the word each maskable position belongs to
    members = maskable.ravel() & (word_of_position >= 0)
    word_length = np.bincount(word_of_position[members], minlength=len(word_rows))
    order = np.lexsort((_uniform(keys[word_rows], word_columns, 0), word_rows))  # per row, in drawn order
    per_row = np.bincount(word_rows, minlength=n)
    rank = np.arange(len(order)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    lengths = np.zeros((n, int(per_row.max())), dtype=np.int64)
    lengths[word_rows[order], rank] = word_length[order]  # 0 past a row's last word: never taken
    taken = np.zeros_like(lengths, dtype=bool)
    count = np.zeros(n, dtype=np.int64)
    for k in range(lengths.shape[1]):
        fits = (lengths[:, k] > 0) & (count + lengths[:, k] <= budget)
        taken[:, k] = fits
        count += np.where(fits, lengths[:, k], 0)
    word_taken = np.zeros(len(word_rows), dtype=bool)
    word_taken[order] = taken[word_rows[order], rank]
    selected = np.zeros(n * length, dtype=bool)
    selected[members] = word_taken[word_of_position[members]]
    return selected.reshape(n, length)


def _masked(features: dict[str, np.ndarray], original: np.ndarray, selected: np.ndarray, max_predictions: int,
            params: MaskingParams, keys: np.ndarray) -> dict[str, np.ndarray]:
    """The batch with ``selected`` positions masked by BERT's 80/10/10."""
    masked = apply_masks(original, selected, max_predictions, params.mask_id, params.vocab_size,
                         _PositionDraws(keys, selected))
    out = dict(features)
    out["input_ids"] = masked.input_ids.astype(features["input_ids"].dtype, copy=False)
    out["masked_lm_positions"] = masked.masked_lm_positions.astype(features["masked_lm_positions"].dtype, copy=False)
    out["masked_lm_ids"] = masked.masked_lm_ids.astype(features["masked_lm_ids"].dtype, copy=False)
    out["masked_lm_weights"] = masked.masked_lm_weights.astype(features["masked_lm_weights"].dtype, copy=False)
    return out

