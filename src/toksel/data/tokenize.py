"""Tokenizers: a word-level default and subword tokenizers (WordPiece, BPE) trained on the training split.

Both lowercase the text and replace the HTML line breaks `<br />` of IMDB by spaces. The word tokenizer keeps
runs of letters, digits, underscores and apostrophes as words and splits every other non-space character off
as a token of its own ("it's great!" -> it's, great, !).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from toksel.data.vocabulary import UNKNOWN

LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
WORD = re.compile(r"[\w']+|[^\w\s]")

Tokenize = Callable[[list[str]], list[list[str]]]


def word_tokens(text: str) -> list[str]:
    return WORD.findall(LINE_BREAK.sub(" ", text).lower())


def train_tokenizer(kind: str, train_texts: list[str], vocab_size: int) -> Tokenize:
    """A function from texts to token lists: `word`, or a `wordpiece` / `bpe` model trained on train_texts."""
    if kind == "word":
        return lambda texts: [word_tokens(text) for text in texts]
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    unknown = UNKNOWN  # the subword model's own unknown token is the vocabulary's <unk>
    if kind == "wordpiece":
        model, trainer = models.WordPiece(unk_token=unknown), trainers.WordPieceTrainer
    else:
        model, trainer = models.BPE(unk_token=unknown), trainers.BpeTrainer
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.Sequence([normalizers.Replace(Regex(LINE_BREAK.pattern), " "),
                                                 normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()  # words and punctuation, as the word tokenizer
    tokenizer.train_from_iterator(train_texts, trainer(vocab_size=vocab_size, special_tokens=[unknown],
                                                       show_progress=False))
    return lambda texts: [encoding.tokens for encoding in tokenizer.encode_batch(texts)]
