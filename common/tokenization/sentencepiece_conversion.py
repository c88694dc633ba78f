"""A SentencePiece ``.model`` as a ``tokenizers`` JSON, with sentencepiece's ids.

ALBERT ships ``spm_model_file`` (30k-clean.model), T5 and XLNet a
``spiece.model``; the ventilator converts it once and ships the JSON to
workers like any other tokenizer, so workers need neither sentencepiece nor
the model file.

Why our own converter: ``transformers``' ``convert_slow_tokenizer`` is a
large dependency (not one of ours) and builds each model's *Python*
tokenizer's behaviour (ALBERT's lower-casing, XLM-R's fairseq id offset),
not sentencepiece's; sentencepiece's Python package is not needed at run
time either: the ``.model`` file is a small protobuf (ModelProto in
sentencepiece_model.proto) of which we read a dozen fields with the wire
format below.  tests/common/tokenization/test_sentencepiece_conversion.py checks the ids against
the ``sentencepiece`` package on the shared corpus.

What the JSON does, field by field of the proto:

* pieces -> a Unigram model, same order (id = index), same scores; the
  unknown piece is ``unk_id``; ``byte_fallback`` is carried over.
* USER_DEFINED pieces: sentencepiece always prefers them (score
  ``length * max_score - 0.1`` in its lattice); they get that score here.
* CONTROL and UNKNOWN pieces (``<s> </s> <pad> [CLS] [SEP] [MASK]``) become
  special added tokens (roles found by name), and a ``[CLS] $A [SEP]`` (or
  ``<s> $A </s>``) post-processor is declared when those pieces exist.
  sentencepiece never matches them in text; neither does the pipeline
  (common/tokenization/vocabulary.py keeps special tokens out of text).
* normalizer_spec: ``precompiled_charsmap`` -> Precompiled;
  ``remove_extra_whitespaces`` -> strip and collapse runs of spaces (the
  space only, as sentencepiece);
  ``add_dummy_prefix`` -> Metaspace(prepend_scheme "always"), else "never";
  ``split_by_whitespace`` -> Metaspace(split).

Refused with a reason: BPE/WORD/CHAR models (only Unigram is converted),
``treat_whitespace_as_suffix``, a ``normalization_rule_tsv``-only spec
(custom rules without a precompiled map).
"""

from __future__ import annotations

import base64
import json
import struct

from common.protobuf_wire import WireError, fields

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}


class ConversionError(ValueError):
    """The model cannot be converted exactly (reason in the message)."""


def _fields(data: bytes):
    try:
        yield from fields(data)
    except WireError as error:
        raise ConversionError(f"{error} (not a SentencePiece model?)") from None


def parse_model(data: bytes) -> dict:
    """The ModelProto fields the conversion uses, with proto2 defaults."""
    pieces: list[tuple[str, float, int]] = []
    trainer = {"model_type": 1, "byte_fallback": False, "split_by_whitespace": True,
               "treat_whitespace_as_suffix": False, "unk_id": 0}
    normalizer = {"name": "", "precompiled_charsmap": b"", "add_dummy_prefix": True,
                  "remove_extra_whitespaces": True, "escape_whitespaces": True}
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            piece, score, kind = "", 0.0, NORMAL
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    piece = v.decode("utf-8")
                elif n == 2 and w == 5:
                    score = struct.unpack("<f", v)[0]
                elif n == 3 and w == 0:
                    kind = v
            pieces.append((piece, score, kind))
        elif number == 2 and wire == 2:
            for n, w, v in _fields(value):
                if n == 3 and w == 0:
                    trainer["model_type"] = v
                elif n == 35 and w == 0:
                    trainer["byte_fallback"] = bool(v)
                elif n == 8 and w == 0:
                    trainer["split_by_whitespace"] = bool(v)
                elif n == 24 and w == 0:
                    trainer["treat_whitespace_as_suffix"] = bool(v)
                elif n == 40 and w == 0:
                    trainer["unk_id"] = v
        elif number == 3 and wire == 2:
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    normalizer["name"] = v.decode("utf-8")
                elif n == 2 and w == 2:
                    normalizer["precompiled_charsmap"] = v
                elif n == 3 and w == 0:
                    normalizer["add_dummy_prefix"] = bool(v)
                elif n == 4 and w == 0:
                    normalizer["remove_extra_whitespaces"] = bool(v)
                elif n == 5 and w == 0:
                    normalizer["escape_whitespaces"] = bool(v)
    if not pieces:
        raise ConversionError("no pieces (not a SentencePiece model?)")
    return {"pieces": pieces, "trainer": trainer, "normalizer": normalizer}


def _albert_preprocessing(lowercase: bool, keep_accents: bool, replace_quotes: bool = True) -> list[dict]:
    """What ALBERT's (and XLNet's) Python tokenizer does before sentencepiece,
    when a model directory's tokenizer_config.json asks for it (HF's also
    turns `` and '' into "; ALBERT's own script does not)."""
    steps = [{"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
             {"type": "Replace", "pattern": {"String": "''"}, "content": '"'}] if replace_quotes else []
    if not keep_accents:
        steps += [{"type": "NFKD"}, {"type": "StripAccents"}]
    if lowercase:
        steps.append({"type": "Lowercase"})
    return steps


def convert(data: bytes, *, lowercase: bool = False, keep_accents: bool = True, replace_quotes: bool = True) -> str:
    """tokenizers JSON for a SentencePiece Unigram model (see the module doc).

    ``lowercase`` / ``keep_accents``: ALBERT-style preprocessing before
    sentencepiece's own normalization (off by default: pure sentencepiece)."""
    model = parse_model(data)
    trainer, spec = model["trainer"], model["normalizer"]
    kind = MODEL_TYPES.get(trainer["model_type"], str(trainer["model_type"]))
    if kind != "UNIGRAM":
        raise ConversionError(f"a SentencePiece {kind} model: only Unigram models are converted "
                              "(save it as a tokenizer.json with transformers and pass that)")
    if trainer["treat_whitespace_as_suffix"]:
        raise ConversionError("treat_whitespace_as_suffix is not supported")
    if not spec["escape_whitespaces"]:
        raise ConversionError("escape_whitespaces false is not supported")
    if spec["name"] not in ("", "identity") and not spec["precompiled_charsmap"]:
        raise ConversionError(f"normalization rule {spec['name']!r} without a precompiled map is not supported")
    pieces = model["pieces"]
    normal_scores = [score for _, score, kind in pieces if kind == NORMAL]
    max_score = max(normal_scores) if normal_scores else 0.0
    vocab, added = [], []
    for index, (piece, score, kind) in enumerate(pieces):
        if kind == USER_DEFINED:
            score = len(piece) * max_score - 0.1
        vocab.append([piece, score])
        if kind in (CONTROL, UNKNOWN):
            added.append({"id": index, "content": piece, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})

    steps = _albert_preprocessing(lowercase, keep_accents, replace_quotes) if (lowercase or not keep_accents) else []
    if spec["precompiled_charsmap"]:
        steps.append({"type": "Precompiled",
                      "precompiled_charsmap": base64.b64encode(spec["precompiled_charsmap"]).decode()})
    if spec["remove_extra_whitespaces"]:
        # sentencepiece strips and collapses the space only (other whitespace is the charsmap's business);
        # tokenizers' Strip would strip every Unicode whitespace.
        steps += [{"type": "Replace", "pattern": {"Regex": "^ +| +$"}, "content": ""},
                  {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
    names = {piece for piece, _, kind in pieces if kind in (CONTROL, UNKNOWN)}
    post = None
    for cls, sep in (("[CLS]", "[SEP]"), ("<s>", "</s>")):
        if cls in names and sep in names:
            ids = {piece: i for i, (piece, _, _) in enumerate(pieces)}
            post = {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                               {"SpecialToken": {"id": sep, "type_id": 0}}],
                    "pair": [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                             {"SpecialToken": {"id": sep, "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                             {"SpecialToken": {"id": sep, "type_id": 1}}],
                    "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (cls, sep)}}
            break
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": steps} if steps else None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                          "prepend_scheme": "always" if spec["add_dummy_prefix"] else "never",
                          "split": trainer["split_by_whitespace"]},
        "post_processor": post,
        "decoder": {"type": "Metaspace", "replacement": "\u2581",
                    "prepend_scheme": "always" if spec["add_dummy_prefix"] else "never", "split": True},
        "model": {"type": "Unigram", "unk_id": trainer["unk_id"], "vocab": vocab,
                  "byte_fallback": trainer["byte_fallback"]},
    }
    return json.dumps(document, ensure_ascii=False)


def looks_like_sentencepiece(head: bytes) -> bool:
    """A protobuf whose first field is a piece (field 1, length-delimited), not JSON."""
    return bool(head) and head[:1] == b"\x0a"
