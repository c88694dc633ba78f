"""The tokenizer axis: loading a tokenizer, what objectives need of it
(:class:`SpecialIds`), fast exact encoders, and training one."""

from common.tokenization.vocabulary import (SpecialIds, TokenizerError, Vocabulary, bert_tokenizer_from_vocab,
                                            load_tokenizer)

__all__ = ["SpecialIds", "TokenizerError", "Vocabulary", "bert_tokenizer_from_vocab", "load_tokenizer"]
