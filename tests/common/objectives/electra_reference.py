"""google-research/electra's build_pretraining_dataset.py example builder,
re-implemented token list by token list for the fidelity tests.

It follows the reference's control flow literally (one sentence at a time,
one random draw where the reference makes one), so that given the same
``random.Random`` it must make exactly the examples common/objectives/electra.py
plans in bulk, and given other seeds it shows the reference's own spread.
No tokenizer and no TensorFlow: sentences arrive as token id lists.
"""

from __future__ import annotations

import random


class ExampleBuilder:
    """Sentences in, examples (input ids and segment ids, unpadded) out."""

    def __init__(self, max_length: int, rng: random.Random, cls_id: int, sep_id: int):
        self.max_length = max_length
        self.target_length = max_length
        self.rng = rng
        self.cls_id, self.sep_id = cls_id, sep_id
        self.sentences: list[list[int]] = []
        self.length = 0

    def add_sentence(self, tokens: list[int]):
        """A non-blank line: an example when the sentences reach the target length."""
        self.sentences.append(tokens)
        self.length += len(tokens)
        return self.make_example() if self.length >= self.target_length else None

    def blank_line(self):
        """A document's end: whatever was collected becomes an example."""
        return self.make_example() if self.length else None

    def make_example(self):
        rng = self.rng
        first_target = 100000 if rng.random() < 0.1 else (self.target_length - 3) // 2
        first: list[int] = []
        second: list[int] = []
        for sentence in self.sentences:
            goes_first = not first or len(first) + len(sentence) < first_target
            if not goes_first and not second and len(first) < first_target:
                goes_first = rng.random() < 0.5
            if goes_first:
                first = first + sentence
            else:
                second = second + sentence
        first = first[:self.max_length - 2]
        second = second[:max(0, self.max_length - len(first) - 3)]
        self.sentences, self.length = [], 0
        self.target_length = rng.randint(5, self.max_length) if rng.random() < 0.05 else self.max_length
        input_ids = [self.cls_id, *first, self.sep_id]
        segment_ids = [0] * len(input_ids)
        if second:
            input_ids += [*second, self.sep_id]
            segment_ids += [1] * (len(second) + 1)
        return input_ids, segment_ids


def build_examples(documents: list[list[list[int]]], max_length: int, rng: random.Random, cls_id: int, sep_id: int,
                   blanks_separate_docs: bool = True) -> list[tuple[list[int], list[int]]]:
    """One input file: documents of sentences, a blank line after each (if
    blanks separate documents), and the final flush the reference makes."""
    builder = ExampleBuilder(max_length, rng, cls_id, sep_id)
    examples = []
    for document in documents:
        for sentence in document:
            example = builder.add_sentence(sentence)
            if example:
                examples.append(example)
        if blanks_separate_docs:
            example = builder.blank_line()
            if example:
                examples.append(example)
    example = builder.blank_line()
    if example:
        examples.append(example)
    return examples
