"""Which text becomes ``[UNK]``: the shards hold ids only, so a sample of the job's input is read again
(through the job's own reader) and tokenized with the output's tokenizer, keeping each token's text.

The [UNK] rate per Unicode script (a token's script: its first letter's, by the Unicode character name:
LATIN, CYRILLIC, CJK, ...; digits, punctuation and symbols have their own rows) and the most frequent texts
that became [UNK] say whether the vocabulary fits the corpus: a flood of CJK [UNK]s under an English
vocabulary, a lower-cased vocabulary fed cased text.  Bounded by bytes of input, like the shard sample.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from functools import lru_cache


@lru_cache(maxsize=65536)
def script_of(text: str) -> str:
    """The script of a token's text: its first letter's (by name), else number, punctuation or symbol."""
    kinds = []
    for ch in text:
        category = unicodedata.category(ch)
        if category.startswith("L"):
            name = unicodedata.name(ch, "")
            word = name.split(" ", 1)[0] if name else "OTHER"
            return {"CJK": "Han"}.get(word, word.title())
        kinds.append(category[0])
    for kind, script in (("N", "Number"), ("P", "Punctuation"), ("S", "Symbol")):
        if kind in kinds:
            return script
    return "Other"


def code_points(text: str, most: int = 12) -> str:
    """``U+1F99C U+0020 ...``: what a text is when its glyphs cannot be told apart (or are invisible: a zero-width
    space, a control character, a character no font draws)."""
    points = " ".join(f"U+{ord(ch):04X}" for ch in text[:most])
    return points + (" …" if len(text) > most else "")


def unknown_by_script(input_storage, reader, task_size: int, tokenizer, unk_id: int | None,
                      budget_bytes: int, top: int = 25) -> dict:
    """Tokens and [UNK]s per script over at most ``budget_bytes`` of input, and the commonest [UNK] texts."""
    from common.readers.base import ParseReport

    files = input_storage.list_inputs()
    tokens: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    texts: Counter[str] = Counter()
    read = tasks = 0
    for task in reader.plan(files[:16], max(task_size, 1), input_storage):
        if read >= budget_bytes:
            break
        payload = reader.read(input_storage, task)
        read += len(payload)
        lines = [line for document in reader.documents(task, payload, ParseReport())
                 for line in document.lines if line.strip()]
        tasks += 1
        for start in range(0, len(lines), 1024):
            batch = lines[start:start + 1024]
            for line, encoding in zip(batch, tokenizer.encode_batch(batch, add_special_tokens=False)):
                for token_id, (begin, end) in zip(encoding.ids, encoding.offsets):
                    text = line[begin:end]
                    script = script_of(text)
                    tokens[script] += 1
                    if token_id == unk_id:
                        unknown[script] += 1
                        texts[text] += 1
    total = sum(tokens.values())
    return {
        "input_bytes_read": read,
        "tasks_read": tasks,
        "tokens": total,
        "unk": sum(unknown.values()),
        "rate": sum(unknown.values()) / total if total else None,
        "by_script": [{"script": script, "tokens": n, "unk": unknown[script], "rate": unknown[script] / n}
                      for script, n in tokens.most_common()],
        "top_unk_texts": [{"text": text, "code_points": code_points(text), "count": n}
                          for text, n in texts.most_common(top)],
    }
