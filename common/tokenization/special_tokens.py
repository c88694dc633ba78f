"""Special tokens by role, not by name.

Objectives write a classifier token, a separator, a mask, padding, and need
to know the unknown token; BERT calls them ``[CLS] [SEP] [MASK] [PAD]
[UNK]``, RoBERTa and XLM-R ``<s> </s> <mask> <pad> <unk>``, ALBERT mixes
both.  The role of each token is found, first source first:

1. explicitly given (``--mask-token`` etc., or a model directory's
   tokenizer_config.json / special_tokens_map.json);
2. the tokenizer's post-processor (TemplateProcessing's single sequence
   ``X $A Y``, or RobertaProcessing / BertProcessing's cls and sep);
3. the model's own unknown token (WordPiece/BPE ``unk_token``, Unigram ``unk_id``);
4. the conventional names, among the tokens the tokenizer marks special
   first, then in the whole vocabulary (a BERT vocab.txt marks nothing).

A role that no source names is None: the objective decides whether it
needs it (``Objective.needs``).
"""

from __future__ import annotations

import json
import os

ROLES = ("cls", "sep", "mask", "pad", "unk")

#: Conventional names per role, most common first.
CONVENTIONAL: dict[str, tuple[str, ...]] = {
    "cls": ("[CLS]", "<s>", "<cls>"),
    "sep": ("[SEP]", "</s>", "<sep>"),
    "mask": ("[MASK]", "<mask>"),
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
}


class SpecialTokenError(ValueError):
    """A role was named with a token the tokenizer does not have."""


def _content(value) -> str | None:
    """A token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def model_directory_roles(directory: str) -> dict[str, str]:
    """Roles a Hugging Face model directory names (``cls_token`` ...), from
    special_tokens_map.json then tokenizer_config.json (the latter wins)."""
    roles: dict[str, str] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict):
            continue
        for role in ROLES:
            token = _content(config.get(f"{role}_token"))
            if token:
                roles[role] = token
    return roles


def post_processor_roles(post_processor) -> dict[str, str]:
    """cls and sep from a post-processor (a Sequence's members included)."""
    if not isinstance(post_processor, dict):
        return {}
    kind = post_processor.get("type")
    if kind == "Sequence":
        roles: dict[str, str] = {}
        for member in post_processor.get("processors") or []:
            for role, token in post_processor_roles(member).items():
                roles.setdefault(role, token)
        return roles
    if kind in ("RobertaProcessing", "BertProcessing"):
        roles = {}
        for role in ("cls", "sep"):
            value = post_processor.get(role)
            if isinstance(value, list) and value and isinstance(value[0], str):
                roles[role] = value[0]
        return roles
    if kind == "TemplateProcessing":
        single = post_processor.get("single") or []
        kinds = [next(iter(piece)) if isinstance(piece, dict) and piece else None for piece in single]
        if "Sequence" not in kinds:
            return {}
        a = kinds.index("Sequence")
        before = [p["SpecialToken"]["id"] for p in single[:a] if isinstance(p, dict) and "SpecialToken" in p]
        after = [p["SpecialToken"]["id"] for p in single[a + 1:] if isinstance(p, dict) and "SpecialToken" in p]
        specials = post_processor.get("special_tokens") or {}

        def token_of(name: str) -> str:
            tokens = (specials.get(name) or {}).get("tokens") or [name]
            return tokens[0]

        roles = {}
        if before:
            roles["cls"] = token_of(before[-1])
        if after:
            roles["sep"] = token_of(after[0])
        return roles
    return {}


def model_unknown_token(model: dict) -> str | None:
    if model.get("type") == "Unigram":
        unk_id = model.get("unk_id")
        vocab = model.get("vocab") or []
        if isinstance(unk_id, int) and 0 <= unk_id < len(vocab):
            return vocab[unk_id][0]
        return None
    token = model.get("unk_token")
    return token if isinstance(token, str) else None


def find_roles(spec: dict, vocab: dict[str, int], given: dict[str, str] | None = None) -> dict[str, int | None]:
    """Id per role (None when no source names one); SpecialTokenError when a
    given token is not in the vocabulary."""
    given = {role: token for role, token in (given or {}).items() if token}
    for role, token in given.items():
        if role not in ROLES:
            raise SpecialTokenError(f"unknown special-token role {role!r} (roles: {', '.join(ROLES)})")
        if token not in vocab:
            raise SpecialTokenError(f"the {role} token {token!r} is not in the tokenizer's vocabulary")
    from_post = post_processor_roles(spec.get("post_processor"))
    unknown = model_unknown_token(spec.get("model") or {})
    marked = {t.get("content") for t in spec.get("added_tokens") or [] if isinstance(t, dict) and t.get("special")}
    roles: dict[str, int | None] = {}
    for role in ROLES:
        candidates = [given.get(role), from_post.get(role), unknown if role == "unk" else None]
        candidates += [name for name in CONVENTIONAL[role] if name in marked]
        candidates += list(CONVENTIONAL[role])
        roles[role] = next((vocab[token] for token in candidates if token is not None and token in vocab), None)
    return roles


def special_contents(spec: dict, vocab: dict[str, int], roles: dict[str, int | None]) -> dict[str, int]:
    """Every token that must never come out of text: the role tokens and the
    tokens the tokenizer marks special, as {content: id}."""
    by_id = {index: token for token, index in vocab.items()}
    out = {by_id[index]: index for index in roles.values() if index is not None and index in by_id}
    for token in spec.get("added_tokens") or []:
        if isinstance(token, dict) and token.get("special") and token.get("content") in vocab:
            out[token["content"]] = vocab[token["content"]]
    return out
