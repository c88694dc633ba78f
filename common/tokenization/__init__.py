"""The tokenizer axis: loading a tokenizer (WordPiece, BPE, Unigram; vocab.txt,
tokenizer.json, SentencePiece .model, model directory), what objectives need
of it (:class:`SpecialIds`: ids by role, word starts), fast exact encoders,
and training one."""

from common.tokenization.vocabulary import (
                                            SpecialIds,
                                            TokenizerError,
                                            Vocabulary,
                                            bert_tokenizer_from_vocab,
                                            load_tokenizer,
                                            load_vocabulary,
)

__all__ = ["SpecialIds", "TokenizerError", "Vocabulary", "bert_tokenizer_from_vocab", "load_tokenizer",
           "load_vocabulary"]
