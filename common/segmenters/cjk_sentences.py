"""Where Chinese and Japanese sentences end, on top of Bling Fire's cuts.

Bling Fire cuts CJK text after 。！？ but gets two things wrong (measured on
tests/data/cjk, docs/tokenizers.md "CJK sentences"):

* a closing quote or bracket after the terminator starts the *next*
  sentence (``“……偷么？`` / ``”接连便是…``; ``「おのれ、どこへ行く。`` /
  ``」``): here it stays with the sentence it closes;
* it never cuts after ；or an ellipsis (…, ⋯): here it does.

Only cuts after a CJK terminator (。！？；｡．, or …⋯ right after CJK text)
are added or moved, so English text (whose … stays as Bling Fire treats it)
gets exactly Bling Fire's cuts.  A terminator run
followed by its closers and then a comma-like mark (``“好！”，他说``) does not
end a sentence, and no cut leaves a piece without a letter, digit or
ideograph (``“……他打折了腿了。”`` is one sentence).  Pure functions of the
text; no I/O.
"""

from __future__ import annotations

import re

#: Full-width and CJK sentence terminators (the ellipsis forms included).
TERMINATORS = "。！？；…⋯｡．︒﹒﹗﹖﹔"
ELLIPSES = "…⋯"
#: Closing quotes and brackets that stay with the sentence they close.
CLOSERS = "”’」』）》〉】〕］｝〗〙〛＞»\"')]}"
#: After a terminator and its closers, these keep the sentence going.
CONTINUERS = "，、,：:"

_END = re.compile(f"[{re.escape(TERMINATORS)}]+[{re.escape(CLOSERS)}]*")
#: A letter, digit or ideograph: exactly str.isalnum (\w less the underscore).
_CONTENT = re.compile(r"[^\W_]")


#: The terminators' UTF-8 forms: a text holds a terminator exactly when its UTF-8 form holds one of these.
UTF8_TERMINATORS = tuple(terminator.encode() for terminator in TERMINATORS)
#: The terminators by the first byte of their UTF-8 form (E2: … ⋯, E3: 。, EF: the full-width forms).
_BY_LEAD_BYTE = [(lead, "".join(t for t in TERMINATORS if t.encode()[:1] == lead))
                 for lead in sorted({t.encode()[:1] for t in TERMINATORS})]


def has_cjk_terminator(text: str, utf8: bytes | None = None) -> bool:
    """Whether ``text`` holds a terminator.  One ``in`` per terminator (a C search each, and none at all in
    text without characters past U+00FF) is ~5x cheaper than one search of the character class; given
    ``text``'s UTF-8 form, only the terminators whose first byte it holds are looked for (one memchr each:
    English text holds E2, for its dashes and quotes, but rarely E3 or EF)."""
    if utf8 is None:
        return any(terminator in text for terminator in TERMINATORS)
    return any(lead in utf8 and any(terminator in text for terminator in group) for lead, group in _BY_LEAD_BYTE)


def _has_content(text: str, start: int = 0, end: int | None = None) -> bool:
    """Whether ``text[start:end]`` holds a letter, digit or ideograph (no slice made)."""
    return _CONTENT.search(text, start, len(text) if end is None else end) is not None


def _ends(text: str):
    """``_END.finditer(text)``, found from each terminator's own C search: a regular expression's scan of a
    character class costs ~25 ns a character, ~5x the whole sentence split, on text that holds a few."""
    found = []
    for terminator in TERMINATORS:
        position = text.find(terminator)
        while position != -1:
            found.append(position)
            position = text.find(terminator, position + 1)
    last = 0
    for position in sorted(found):
        if position >= last:  # not inside the run before
            match = _END.match(text, position)
            if match is None:  # a terminator always matches at its own position
                continue
            last = match.end()
            yield match


def _only_ellipsis(run: str) -> bool:
    return all(ch in ELLIPSES or ch in CLOSERS for ch in run)


def is_cjk(ch: str) -> bool:
    """Han, kana, hangul, CJK punctuation or a full-width form."""
    code = ord(ch)
    return (0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF
            or 0xFE30 <= code <= 0xFE4F or 0xFF00 <= code <= 0xFFEF or 0x1100 <= code <= 0x11FF
            or 0x20000 <= code <= 0x3FFFF)


def _cjk_end(text: str, start: int, run: str) -> bool:
    """A terminator run ends a CJK sentence: it holds a full-width terminator,
    or it is an ellipsis right after CJK text (English uses … too)."""
    if not _only_ellipsis(run):
        return True
    return start > 0 and is_cjk(text[start - 1])


def cjk_sentence_ends(text: str) -> list[int]:
    """Positions just after each CJK sentence end in ``text`` (terminator
    run plus its closers), not at the end of the text, not before a
    comma-like mark, and not where the piece before would have no content."""
    ends = []
    last = 0
    for match in _ends(text):
        end = match.end()
        if end >= len(text) or text[end] in CONTINUERS or not _cjk_end(text, match.start(), match.group()):
            continue
        if _only_ellipsis(match.group()) and match.start() > 0 and text[match.start() - 1] in CONTINUERS:
            continue  # "读过书，……我便考你一考": a pause, not an end
        if not _has_content(text, last, match.start()):
            continue
        ends.append(end)
        last = end
    return ends


def adjust_starts(text: str, starts: list[int], utf8: bytes | None = None) -> list[int]:
    """Bling Fire's sentence ``starts`` in ``text``, with a start that sits on
    closers after a CJK terminator moved past them, and a start added after
    every CJK sentence end; sorted and unique.  A start whose piece would hold
only punctuation, in CJK text, is dropped (the piece joins the sentence before).
    ``utf8``, ``text`` encoded if the caller has it, makes the check for terminators cheaper."""
    if not has_cjk_terminator(text, utf8):
        return starts
    moved = set()
    for start in starts:
        position = start
        if 0 < position < len(text) and text[position] in CLOSERS:
            back = position - 1
            while back >= 0 and text[back].isspace():
                back -= 1
            run_start = back
            while run_start > 0 and text[run_start - 1] in TERMINATORS:
                run_start -= 1
            if back >= 0 and text[back] in TERMINATORS and _cjk_end(text, run_start, text[run_start:back + 1]):
                while position < len(text) and text[position] in CLOSERS:
                    position += 1
        if 0 < position < len(text) and text[position] not in CONTINUERS:
            moved.add(position)
        elif position == 0:
            moved.add(0)
    moved.update(cjk_sentence_ends(text))
    kept: list[int] = []
    ordered = sorted(moved)
    for start, following in zip(ordered, [*ordered[1:], len(text)]):
        punctuation_only = not _has_content(text, start, following) and (
            any(is_cjk(ch) for ch in text[start:following]) or (start > 0 and is_cjk(text[start - 1])))
        if not kept or not punctuation_only:
            kept.append(start)
        # else: a piece of nothing but punctuation ("……" after Bling Fire's cut at ！) joins the one before
    return kept
