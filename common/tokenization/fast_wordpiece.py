"""A faster WordPiece encoder with exactly HF ``tokenizers``' output.

HF ``tokenizers`` runs BERT's WordPiece at ~2 MB/s per core on Wikipedia
text, which makes tokenizing most of a worker's time at ``dupe_factor`` 1.
:func:`make_fast_encoder` builds an encoder with the contract of
:meth:`common.tokenization.Vocabulary.encode_many` (flat int32 ids, int64
lengths, no special tokens added) on ``nanotoken``, a Rust WordPiece that
reads the same ``tokenizer.json`` and reimplements BertNormalizer,
BertPreTokenizer and WordPiece (``max_input_chars_per_word`` included) to
match HF id for id; it runs at 35-250 MB/s per core here (docs/benchmarks.md).

Candidates looked at (tests/common/tokenization/test_fast_wordpiece.py holds the evidence):

* ``nanotoken`` 0.1: identical ids to HF on the whole shared Wikipedia
  sample (uncased and cased), on every BertNormalizer flag combination over
  the adversarial strings, and on 30,000 random Unicode strings.  Used.
* ``kitoken`` 0.11: reads tokenizer.json (once ``[UNK]`` is declared as a
  special token) and respects ``max_input_chars_per_word``, but is not
  exact: it lower-cases a word-final ``Σ`` to ``ς`` where HF gives ``σ``
  (``ΟΔΟΣ``: HF ``ο ##δ ##ο ##σ``, kitoken ``ο ##δ ##ος``), and it deletes
  unassigned code points (U+0378, U+2B81F, U+2CEAF) that HF keeps as
  ``[UNK]``.  At ~9 MB/s it is also 4-20x
  slower than nanotoken.  Not used.

Anything this module has not been shown to reproduce gets ``None`` (the
caller keeps HF): a normalizer other than BertNormalizer, a pre-tokenizer
other than BertPreTokenizer, a continuation prefix other than ``##``,
truncation or padding in the JSON (HF applies them in encode_batch,
nanotoken ignores them), added tokens with flags other than BERT's.  As a
last guard the encoder is compared with HF on :data:`PROBES` when it is
made, so an upgraded package that drifts falls back to HF instead of
changing the output.  HF's side of that comparison depends only on the
tokenizer's JSON, the ``tokenizers`` release and the probe texts, so it is
kept on disk under that key (:func:`hf_probe_ids`): a fleet's workers on one
machine ask HF once; each still runs its own fast encoder on the probes.

Encoding is single-threaded (``parallel=False``): a worker process is one
core, and nanotoken's thread pool would oversubscribe a host running one
worker per core.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

Encoder = Callable[[list[str]], tuple[np.ndarray, np.ndarray]]

#: nanotoken memoizes words in a process-wide cache (2**20 entries by
#: default, ~200 MB when full).  2**16 entries keep most of the speed on
#: Wikipedia text (its words are Zipf-distributed) for ~15 MB.
CACHE_ENTRIES = 1 << 16

_WORD = "abcdefghij" * 30
#: Texts the encoder must tokenize exactly as HF before it is used.
PROBES: tuple[str, ...] = (
    "", " ", "\t\n\r \u00a0\u3000\u2009\u202f\u2028\u0085",
    "The Café, cafe\u0301 naïve Ångström Zoë \u0301x ﬁ ½",
    "İstanbul ΟΔΟΣ ß ẞ \u212a ǅ", "東京は日本の首都です 한국어 𠀀 豈 \U0002B820 \U0002B81F",
    "😀 👍🏽 👨\u200d👩\u200d👧 🇫🇷 ❤️", "a\x00b\x01c\x7fd\x85e\x0bf\ufffdg \u200e\u202a",
    "a\u200bb c\u200dd e\ufeffg \u200b", "!!!!!!!!!!...---«»…‘’“”—¡¿$€+^`~|<>=",
    "Hello мир مرحبا שלום नमस्ते こんにちは abcαβγ ☃abc", "hello [MASK] [UNK] [CLS] [SEP] [PAD]",
    "\u0378 \U000E01EF \uE000 \U00031350",
    _WORD[:99], _WORD[:100], _WORD[:101], _WORD[:199], _WORD[:200], _WORD[:201],
    "é" * 150, "e\u0301" * 101, "İ" * 101, "я" * 150 + " " + "ü" * 201,
)

_BERT_ADDED_TOKEN_FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}


def tokenizer_spec(tokenizer_json: str) -> dict | str:
    """The tokenizer's JSON as a dict, or why no fast encoder can take it (each checks its own shape after
    this): not JSON, not an object, or truncation or padding set (HF applies them when encoding)."""
    try:
        spec = json.loads(tokenizer_json)
    except ValueError as error:
        return f"not JSON: {error}"
    if not isinstance(spec, dict):
        return "not a tokenizers JSON object"
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        return "truncation or padding is set (HF applies it when encoding)"
    return spec


def unsupported_reason(tokenizer_json: str) -> str | None:
    """Why this tokenizer is outside what the fast encoder reproduces, or None."""
    spec = tokenizer_spec(tokenizer_json)
    if isinstance(spec, str):
        return spec
    normalizer = spec.get("normalizer")
    if not isinstance(normalizer, dict) or normalizer.get("type") != "BertNormalizer":
        return "the normalizer is not BertNormalizer"
    for flag in ("clean_text", "handle_chinese_chars", "lowercase"):
        if not isinstance(normalizer.get(flag), bool):
            return f"BertNormalizer.{flag} is not a boolean"
    if normalizer.get("strip_accents") not in (None, True, False):
        return "BertNormalizer.strip_accents is not a boolean or null"
    if spec.get("pre_tokenizer") != {"type": "BertPreTokenizer"}:
        return "the pre-tokenizer is not BertPreTokenizer"
    model = spec.get("model")
    if not isinstance(model, dict) or model.get("type") != "WordPiece":
        return "the model is not WordPiece"
    if model.get("continuing_subword_prefix") != "##":
        return "the continuation prefix is not '##'"
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or model.get("unk_token") not in vocab:
        return "the unknown token is not in the vocabulary"
    if not isinstance(model.get("max_input_chars_per_word"), int):
        return "max_input_chars_per_word is not an integer"
    for token in spec.get("added_tokens") or []:
        if not isinstance(token, dict) or any(token.get(k) != v for k, v in _BERT_ADDED_TOKEN_FLAGS.items()):
            return f"added token {token!r} has flags other than BERT's special tokens"
        if vocab.get(token.get("content")) != token.get("id"):
            return f"added token {token.get('content')!r} is not the vocabulary's entry"
    return None


class NanotokenEncoder:
    """``encode_many`` on nanotoken: (flat int32 ids, int64 lengths)."""

    name = "nanotoken"

    def __init__(self, backend):
        self._backend = backend

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if not texts:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        ids, offsets = self._backend.encode_batch(texts, add_special_tokens=False, parallel=False)
        return ids.astype(np.int32), np.diff(offsets).astype(np.int64)

    def clear_cache(self) -> None:
        """Forget memoized words (for benchmarks of a cold process)."""
        self._backend.clear_cache()


def _hf_encode_many(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    lengths = np.array([len(e.ids) for e in encodings], dtype=np.int64)
    flat = [i for e in encodings for i in e.ids]
    return np.asarray(flat, dtype=np.int32), lengths


def probe_cache_dir() -> Path:
    """Where HF's ids of the probe texts are kept: the user's cache directory (``$XDG_CACHE_HOME``, else
    ~/.cache), one small file per (tokenizer, tokenizers release, probe texts)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlm-pipeline" / "hf-probe-ids"


def _probe_key(tokenizer_json: str, texts: list[str]) -> str:
    import tokenizers

    digest = hashlib.sha256(json.dumps([tokenizers.__version__, texts]).encode("utf-8", "surrogatepass"))
    digest.update(b"\0" + tokenizer_json.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _read_probe_ids(path: Path, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The ids kept at ``path`` if it is a whole file written for ``key``; else None (asked of HF again)."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(kept, dict) or kept.get("key") != key:
            return None
        ids, lengths = kept["ids"], kept["lengths"]
        if not all(isinstance(v, list) and all(type(i) is int for i in v) for v in (ids, lengths)):
            return None
        if sum(lengths) != len(ids) or any(n < 0 for n in lengths):
            return None
        return np.asarray(ids, dtype=np.int32), np.asarray(lengths, dtype=np.int64)
    except (OSError, ValueError, KeyError, OverflowError):
        return None


def keep_in_cache(path: Path, data: bytes, what: str) -> None:
    """``data`` at ``path`` in the user's cache, atomically (a whole file or none, whatever other workers write at
    once); a cache that cannot be written (read-only home, full disk) only means the work is done again next
    time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as error:
        log.debug("%s not kept in %s: %s", what, path.parent, error)


def _write_probe_ids(path: Path, key: str, ids: np.ndarray, lengths: np.ndarray) -> None:
    text = json.dumps({"key": key, "ids": ids.tolist(), "lengths": lengths.tolist()})
    keep_in_cache(path, text.encode("utf-8"), "HF's probe ids")


def hf_probe_ids(tokenizer_json: str, texts: list[str], hf=None, *, refresh: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """HF's ids of ``texts`` (flat int32, int64 lengths) for this tokenizer, from the disk cache when a worker
    of this machine asked before (same tokenizer JSON, same tokenizers release, same texts), else from HF
    (``refresh``: from HF, and the cache rewritten)."""
    from tokenizers import Tokenizer

    key = _probe_key(tokenizer_json, texts)
    path = probe_cache_dir() / f"{key}.json"
    kept = None if refresh else _read_probe_ids(path, key)
    if kept is not None:
        return kept
    ids, lengths = _hf_encode_many(hf if hf is not None else Tokenizer.from_str(tokenizer_json), texts)
    _write_probe_ids(path, key, ids, lengths)
    return ids, lengths


def agrees_with_hf(encoder: Encoder, tokenizer_json: str, texts=PROBES, hf=None) -> bool:
    """Whether ``encoder`` gives HF's ids for every text in ``texts``; ``hf``: the HF tokenizer of
    ``tokenizer_json`` when the caller has it (a worker's Vocabulary does: not read again, ~30 ms).
    HF's ids come from the disk cache when they are there (:func:`hf_probe_ids`); the encoder is run here,
    every time.  A cached answer that disagrees is not trusted to refuse: HF is asked again (and kept)."""
    texts = list(texts)
    ids, lengths = encoder(texts)
    for refresh in (False, True):
        expected_ids, expected_lengths = hf_probe_ids(tokenizer_json, texts, hf, refresh=refresh)
        if np.array_equal(lengths, expected_lengths) and np.array_equal(ids, expected_ids):
            return True
    return False


def make_fast_encoder(tokenizer_json: str, *, check: bool = True, hf=None) -> Encoder | None:
    """An encoder with exactly ``Vocabulary.encode_many``'s output for this
    tokenizer, or None when no fast candidate reproduces it (use HF).  ``hf``: the HF tokenizer of
    ``tokenizer_json``, when the caller has it, for the check."""
    reason = unsupported_reason(tokenizer_json)
    if reason is not None:
        log.info("fast WordPiece not used: %s", reason)
        return None
    try:
        import nanotoken
    except ImportError:
        log.info("fast WordPiece not used: nanotoken is not installed")
        return None
    try:
        backend = nanotoken.WordPieceTokenizer.from_json(tokenizer_json)
    except Exception as error:  # UnsupportedTokenizerError, or a bare Rust error
        log.info("fast WordPiece not used: nanotoken refuses this tokenizer (%s)", error)
        return None
    if nanotoken.get_cache_entries() > CACHE_ENTRIES:
        nanotoken.set_cache_entries(CACHE_ENTRIES)
    encoder = NanotokenEncoder(backend)
    if check and not agrees_with_hf(encoder, tokenizer_json, hf=hf):
        log.warning("fast WordPiece not used: nanotoken %s differs from HF tokenizers on the probe texts",
                    getattr(nanotoken, "__version__", "?"))
        return None
    return encoder
