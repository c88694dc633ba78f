"""fairseq's TokenBlockDataset packing (break_mode "complete" and
"complete_doc", token_block_utils_fast.pyx), re-implemented on token lists
for the RoBERTa fidelity tests.

fairseq's input is one line per sentence, each ending in </s>, and an empty
line (just </s>) between documents; "complete" keeps that empty line as a
unit of the stream (the separator between documents), "complete_doc" skips
it and never lets a block cross it.  fairseq recognises the separator by its
size (1: a real sentence has at least a token and </s>); our sentences carry
no </s>, so here each unit says whether it is a separator.
"""

from __future__ import annotations


def units(documents: list[list[list[int]]], separator_id: int, capacity: int) -> list[tuple[list[int], bool]]:
    """The stream's units: sentences (cut into pieces of ``capacity`` tokens
    when longer, the pipeline's documented rule for what fairseq would make
    one over-long block of) and a separator between two documents."""
    out: list[tuple[list[int], bool]] = []
    for index, document in enumerate(documents):
        if index:
            out.append(([separator_id], True))
        for sentence in document:
            for start in range(0, len(sentence), capacity):
                out.append((sentence[start:start + capacity], False))
    return out


def blocks(stream_units: list[tuple[list[int], bool]], block_size: int, break_mode: str) -> list[list[int]]:
    """fairseq's slices, as token lists: a block takes the next unit while
    it fits (or while it is empty); "complete_doc" closes it at a separator,
    which it then skips."""
    out: list[list[int]] = []
    current: list[int] = []
    index = 0
    while index < len(stream_units):
        tokens, is_separator = stream_units[index]
        doc_end = break_mode == "complete_doc" and is_separator
        if (len(current) + len(tokens) <= block_size or not current) and not doc_end:
            current = current + tokens
            index += 1
        else:
            if current:
                out.append(current)
            current = []
            if doc_end:
                index += 1
    if current:
        out.append(current)
    return out
