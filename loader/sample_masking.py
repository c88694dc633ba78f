"""Dynamic masking of samples laid end to end (token-budget batches).

The same rule as the fixed-length dynamic masking (loader/masking.py), on
a flat token stream cut by sample lengths, so no draw, word or budget ever
spans two samples:

* a sample's budget is ``max(1, round(prob x length))`` (BERT's
  ``num_to_predict``, no cap); its maskable tokens are those that are not
  special (``special_tokens_mask`` when stored, else the tokenizer's
  [CLS]/[SEP]/[PAD]/[MASK] ids);
* single tokens: the ``budget`` maskable tokens with the smallest draws;
  whole words: the sample's words in drawn order, each taken if it still
  fits (BERT's rule: a word that does not fit is skipped, a shorter one
  after it may be taken), so a masked set is a union of whole words;
* 80% the mask id, 10% kept, 10% a random id.

Every draw is a hash of (seed, epoch, record, position in the sample,
purpose), the keys the fixed-length masking uses: a sample's masks do not
depend on its batch, its place in it, the layout or the server.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.hashing import mix64
from common.objectives.base import derive_seed
from common.objectives.masking import num_to_predict

_SALTS: dict[int, np.ndarray] = {}


def _draws(keys: np.ndarray, position: np.ndarray, stream: int) -> np.ndarray:
    """loader.masking's ``_uniform(keys, position, stream)``, with the per-position salts tabled once per stream
    (one hash per token instead of two)."""
    salts = _SALTS.get(stream)
    top = int(position.max()) + 1 if len(position) else 0
    if salts is None or len(salts) < top:
        size = max(top, 8192)
        with np.errstate(over="ignore"):
            salts = mix64(np.uint64(stream) * np.uint64(0x9E3779B97F4A7C15) + np.arange(size, dtype=np.uint64))
        _SALTS[stream] = salts
    bits = mix64(keys ^ salts[position])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class SampleMasking:
    """What masking samples needs of the tokenizer and the flags."""

    mask_id: int
    vocab_size: int
    masked_lm_prob: float = 0.15
    whole_word: bool = False
    special_ids: tuple[int, ...] = ()  # never masked (when the samples carry no special_tokens_mask)
    #: Bool per id: the piece begins a word (None: the tokenizer gives no per-piece words).
    starts_word: np.ndarray | None = None


@dataclass
class Masked:
    input_ids: np.ndarray  # int32, the flat stream with masks applied
    labels: np.ndarray  # int32, the original id where masked, -100 elsewhere


def sample_keys(record_ids: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """One 64-bit key per sample: the fixed-length masking's (loader/masking.py remask)."""
    base = np.uint64(derive_seed(seed, f"loader-epoch-{epoch}", 0, "mask"))
    with np.errstate(over="ignore"):
        return mix64(base ^ mix64(np.asarray(record_ids, dtype=np.uint64)))


def mask_samples(ids: np.ndarray, lengths: np.ndarray, record_ids: np.ndarray, seed: int, epoch: int,
                 params: SampleMasking, special: np.ndarray | None = None,
                 word_starts: np.ndarray | None = None) -> Masked:
    """Masks for the samples ``ids`` holds end to end (``lengths`` each).  ``special``: bool per token, never
    masked (else the tokenizer's special ids); ``word_starts``: bool per token (else the tokenizer's
    per-piece table, with each sample's first token a start)."""
    ids = np.asarray(ids, dtype=np.int32)
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    sample = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(ids), dtype=np.int64) - starts[sample]
    keys = sample_keys(record_ids, seed, epoch)
    if special is None:
        special = np.isin(ids, np.asarray(params.special_ids, dtype=np.int32)) if params.special_ids else \
            np.zeros(len(ids), dtype=bool)
    maskable = ~np.asarray(special, dtype=bool)
    budget = num_to_predict(lengths, params.masked_lm_prob, np.iinfo(np.int64).max)
    if params.whole_word:
        if word_starts is None:
            if params.starts_word is None:
                raise ValueError("whole-word masking needs word starts (the samples' word_starts, or a tokenizer "
                                 "whose pieces say where words begin)")
            word_starts = params.starts_word[np.clip(ids, 0, len(params.starts_word) - 1)]
            word_starts[starts[lengths > 0]] = True
        selected = _whole_words(maskable, np.asarray(word_starts, dtype=bool), sample, position, keys, budget,
                                len(lengths))
    else:
        selected = _tokens(maskable, sample, position, keys, budget, starts, lengths)
    return _replace(ids, selected, sample[selected], position[selected], keys, params)


def _tokens(maskable: np.ndarray, sample: np.ndarray, position: np.ndarray, keys: np.ndarray, budget: np.ndarray,
            starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per sample, the ``budget`` maskable tokens with the smallest draws (a partition per sample: cheaper than
    sorting the batch, ~20 samples in 8,192 tokens of web text)."""
    draws = np.where(maskable, _draws(keys[sample], position, 0), 2.0)
    counts = np.add.reduceat(maskable, starts) if len(starts) else np.zeros(0, dtype=np.int64)
    take = np.minimum(budget, counts)
    selected = np.zeros(len(sample), dtype=bool)
    for start, length, k in zip(starts.tolist(), lengths.tolist(), take.tolist()):
        if k == 0:
            continue
        here = draws[start:start + length]
        threshold = np.partition(here, k - 1)[k - 1] if k < length else 1.0
        selected[start:start + length] = here <= threshold
    return selected


def _whole_words(maskable: np.ndarray, word_starts: np.ndarray, sample: np.ndarray, position: np.ndarray,
                 keys: np.ndarray, budget: np.ndarray, samples: int) -> np.ndarray:
    """Per sample, whole words by BERT's rule (see the module's docstring)."""
    previous = np.concatenate(([False], maskable[:-1])) & (position > 0)
    opens = maskable & (word_starts | ~previous)
    word_of = np.cumsum(opens) - 1  # the word each token belongs to (maskable tokens only)
    first_token = np.flatnonzero(opens)
    if not len(first_token):
        return np.zeros(len(sample), dtype=bool)
    members = maskable & (word_of >= 0)
    word_length = np.bincount(word_of[members], minlength=len(first_token))
    word_sample = sample[first_token]
    draws = _draws(keys[word_sample], position[first_token], 0)
    order = np.argsort(word_sample * 2.0 + draws, kind="stable")  # per sample, words in drawn order
    length, owner = word_length[order], word_sample[order]
    run_start = np.searchsorted(owner, np.arange(samples))
    cumulative = np.cumsum(length)
    before = np.concatenate(([0], cumulative))[run_start]  # tokens of earlier samples' words
    taken = (cumulative - before[owner]) <= budget[owner]  # the prefix that fits
    count = np.bincount(owner, weights=np.where(taken, length, 0), minlength=samples).astype(np.int64)
    room = budget - count
    # After the first word that does not fit: the next word (in order) that fits what is left, until none does.
    blocked = np.flatnonzero(~taken)
    if len(blocked):
        first_blocked = np.full(samples, len(order), dtype=np.int64)
        np.minimum.at(first_blocked, owner[blocked], blocked)
        pointer = first_blocked
        index = np.arange(len(order))
        while True:
            open_ = (index > pointer[owner]) & ~taken & (length <= room[owner]) & (room[owner] > 0)
            if not open_.any():
                break
            pick = np.full(samples, len(order), dtype=np.int64)
            np.minimum.at(pick, owner[open_], index[open_])
            chosen = pick[pick < len(order)]
            taken[chosen] = True
            room[owner[chosen]] -= length[chosen]
            pointer[owner[chosen]] = chosen
    word_taken = np.zeros(len(first_token), dtype=bool)
    word_taken[order] = taken
    selected = np.zeros(len(sample), dtype=bool)
    selected[members] = word_taken[word_of[members]]
    return selected


def _replace(ids: np.ndarray, selected: np.ndarray, sample: np.ndarray, position: np.ndarray, keys: np.ndarray,
             params: SampleMasking) -> Masked:
    """80% mask id, 10% kept, 10% a random id at the selected tokens (draws keyed by sample and position, made
    for the selected tokens only)."""
    where = np.flatnonzero(selected)
    key = keys[sample]  # sample and position are already the selected tokens'
    replace, keep = _draws(key, position, 2), _draws(key, position, 3)
    random_ids = np.floor(_draws(key, position, 4) * params.vocab_size).astype(np.int64)
    original = ids[where]
    masked = ids.copy()
    masked[where] = np.where(replace < 0.8, params.mask_id, np.where(keep < 0.5, original, random_ids))
    labels = np.full(len(ids), -100, dtype=np.int32)
    labels[where] = original
    return Masked(masked, labels)
