"""A prepared dataset: packed splits, the per-token table and prepare's metrics, from either source."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from toksel.data.corpus import PackedSplit
from toksel.data.frequency import (
    IRRELEVANT,
    assumption1_fraction,
    average_signed_frequency,
    class_counts,
    class_signed_frequency,
    posterior_difference,
    token_statistics,
    token_types,
)
from toksel.data.sources import balanced_subsample, load_text_splits, short_classes
from toksel.data.synthetic import generate, require_draw_memory, vocabulary
from toksel.data.token_table import TokenTable, top_decile
from toksel.data.tokenize import train_tokenizer
from toksel.data.vocabulary import UNKNOWN, build_vocabulary
from toksel.params import DataConfig, SyntheticConfig
from toksel.runtime.errors import ToksError


@dataclass(frozen=True)
class PreparedDataset:
    splits: dict[str, PackedSplit]  # train, test
    tokens: TokenTable
    metrics: dict[str, float]


def prepare_synthetic(settings: SyntheticConfig, seed: int | tuple[int, ...]) -> PreparedDataset:
    vocab = vocabulary(settings.mode, settings.n_positive, settings.n_negative, settings.n_irrelevant)
    require_draw_memory(vocab, settings.n_train + settings.n_test, settings.seq_len)  # both splits, before either
    rng = np.random.default_rng(seed)
    splits = {name: generate(settings.mode, vocab, n, settings.seq_len, settings.delta, rng, settings.pair_share,
                             settings.label_noise)
              for name, n in (("train", settings.n_train), ("test", settings.n_test))}
    statistics = token_statistics(splits["train"])
    groups = vocab.groups(settings.mode)
    table = token_table(splits["train"], splits["test"], 2, vocab.words(), special=np.zeros(vocab.size, dtype=bool),
                        important=groups != 0)
    irrelevant = groups == 0
    metrics = {
        "max_abs_alpha_irrelevant": float(np.abs(statistics.alpha[irrelevant]).max()),
        "mean_abs_alpha_relevant": float(np.abs(statistics.alpha[~irrelevant]).mean()),
        "assumption1_fraction": assumption1_fraction(splits["train"], statistics),
    }
    if vocab.pair:  # the negator's alpha against the first-order tokens' (their tenth percentile of |alpha|)
        first_order = np.concatenate([vocab.positive, vocab.negative])
        metrics |= {"alpha_negator": float(statistics.alpha[vocab.pair_tokens[0]]),
                    "first_order_abs_alpha_p10": float(np.quantile(np.abs(statistics.alpha[first_order]), 0.1))}
    return PreparedDataset(splits, table, metrics)


def prepare_text(dataset: str, data: DataConfig, seed: int | tuple[int, ...]) -> PreparedDataset:
    """Load, subsample (label-balanced, seeded), tokenize, build the vocabulary on train, encode, truncate."""
    rng = np.random.default_rng(seed)
    loaded = load_text_splits(dataset, data)
    raw, every_row = {}, {}
    for split, size in (("train", data.max_train), ("test", data.max_test)):  # train's draw first
        rows = balanced_subsample(loaded[split].labels, size, rng)
        if size and len(rows) == len(loaded[split].labels):
            warnings.warn(f"{dataset}: data.max_{split} = {size:,} takes every one of the {len(rows):,} rows of the "
                          f"{split} split: every draw holds the same rows"
                          + (" (the training rows are then resampled)" if split == "train" and data.bootstrap
                             else ""), stacklevel=2)
        for label, count, share in short_classes(loaded[split].labels, size):
            if len(rows) < len(loaded[split].labels):  # (a split taken whole is warned of above)
                warnings.warn(f"{dataset}: data.max_{split} = {size:,} asks {share:,} rows of each class, and class "
                              f"{label} has {count:,}: every draw holds the same {count:,} rows of it, so the seeds "
                              "vary the other classes' rows alone", stacklevel=2)
        raw[split] = loaded[split].subset(rows)
        every_row[split] = len(rows) == len(loaded[split].labels)
    tokenize = train_tokenizer(data.tokenizer, raw["train"].texts, data.subword_vocab_size)
    tokens = {split: tokenize(text_split.texts) for split, text_split in raw.items()}
    vocab = build_vocabulary(tokens["train"], data.min_count, data.max_vocab)
    if vocab.size == 1:
        raise ToksError(f"{dataset}: no token occurs data.min_count = {data.min_count} times in the training split, "
                        "so the vocabulary would be <unk> alone: lower data.min_count")
    splits, dropped = {}, {}
    for split, text_split in raw.items():
        ids = vocab.encode(tokens[split], data.max_len)
        keep = np.array([len(sequence) > 0 for sequence in ids])  # a review with no token at all
        dropped[split] = int((~keep).sum())
        splits[split] = PackedSplit.from_sequences([s for s, k in zip(ids, keep, strict=True) if k],
                                                   text_split.labels[keep], vocab.size)
        check_classes(f"{dataset}/{split}", splits[split].labels, data.num_classes, dropped[split])
    special = np.array([word == UNKNOWN for word in vocab.words])
    table = token_table(splits["train"], splits["test"], data.num_classes, vocab.words, special)
    test_unknown = np.isin(splits["test"].seq_tokens, np.flatnonzero(special)).mean()
    return PreparedDataset(splits, table, {
        "unknown_rate_test": float(test_unknown),
        "dropped_empty_train": dropped["train"],
        "dropped_empty_test": dropped["test"],
        "train_every_row": float(every_row["train"]),  # the whole training split: its draws would not differ
    })


def bootstrap_draw(prepared: PreparedDataset, num_classes: int, rng: np.random.Generator) -> PreparedDataset:
    """The draw with its training rows resampled with replacement (as many as it had), its token table recomputed
    on them; the vocabulary and the test split stay. The seeds then vary the data a dataset used whole gives."""
    train, test = prepared.splits["train"], prepared.splits["test"]
    drawn = np.sort(rng.integers(0, train.n, train.n))
    resampled = train.rows(drawn)
    check_classes("the bootstrap resample", resampled.labels, num_classes, 0)
    words = prepared.tokens.words
    table = token_table(resampled, test, num_classes, words, np.array([word == UNKNOWN for word in words]))
    return PreparedDataset({"train": resampled, "test": test}, table,
                           {**prepared.metrics, "bootstrap": 1.0, "distinct_train_rows": float(len(np.unique(drawn)))})


def check_classes(name: str, labels: np.ndarray, num_classes: int, dropped: int) -> None:
    """The cleaned split holds a review of every declared class: the statistics and the K output vectors need
    each (a class with no review would get plausible-looking slopes from nothing)."""
    missing = sorted(set(range(num_classes)) - set(np.unique(labels).tolist()))
    if missing:
        raise ToksError(f"{name}: after dropping {dropped} reviews with no token, no review of class "
                        f"{', '.join(map(str, missing))} is left of the data.num_classes = {num_classes} declared: "
                        "check the data, data.labels or data.num_classes")


def token_table(train: PackedSplit, test: PackedSplit, num_classes: int, words: list[str], special: np.ndarray,
                important: np.ndarray | None = None) -> TokenTable:
    """The token table of a training split and its held-out split (data/token_table.py lists the columns).

    Per class k: occurrences and the class-k signed frequency alpha_s^(k); the posterior difference is that of
    the last class against the first, P(K-1|s) - P(0|s) (5 against 1 star on Yelp; P(1|s) - P(0|s) for two).
    Two classes add the paper's alpha_s, computed exactly, whose |alpha_s| is the importance; K > 2 classes take
    max_k |alpha_s^(k)|. Important (unless given): the tenth with the largest importance. Special tokens
    (`special`) get no statistics.
    """
    counts = np.where(special, 0, class_counts(train, num_classes))
    alphas = np.where(special, np.nan, class_signed_frequency(train, num_classes))
    columns: dict[str, np.ndarray | list[str]] = {"token": np.arange(len(words)), "word": words}
    columns |= {f"count_class_{k}": counts[k] for k in range(num_classes)}
    columns |= {f"alpha_class_{k}": alphas[k] for k in range(num_classes)}
    columns["posterior_difference"] = posterior_difference(counts)
    if num_classes == 2:
        alpha = average_signed_frequency(train)
        columns["alpha"] = np.where(special, np.nan, alpha)
        columns["token_type"] = np.where(special, IRRELEVANT, token_types(alpha, counts[1], counts[0]))
        importance = np.abs(columns["alpha"])
    else:
        importance = np.abs(alphas).max(axis=0)
    columns |= {"importance": importance, "important": top_decile(importance) if important is None else important,
                "special": special, **heldout_columns(test, num_classes, special)}
    return TokenTable(pd.DataFrame(columns), num_classes)


def heldout_columns(test: PackedSplit, num_classes: int, special: np.ndarray) -> dict[str, np.ndarray]:
    """The token statistics of the held-out (test) split, prefixed `heldout_`: the occurrences, the posterior
    difference, per class alpha_s^(k) and its document-frequency form `presence`; two classes also alpha_s.

    A trained model fits the noise of its training labels too, so its scores follow the training split's token
    statistics even when the labels carry no signal (shuffled labels give a Spearman of E_s^T v with the training
    alpha_s of 0.8 on IMDB). Statistics of reviews it never saw measure what it learned about the tokens.
    """
    counts = np.where(special, 0, class_counts(test, num_classes))
    columns = {"heldout_count": counts.sum(axis=0),
               "heldout_posterior_difference": posterior_difference(counts)}
    for name, presence in (("alpha", False), ("presence", True)):
        values = class_signed_frequency(test, num_classes, presence=presence)
        columns |= {f"heldout_{name}_class_{k}": np.where(special, np.nan, values[k]) for k in range(num_classes)}
    if num_classes == 2:
        columns["heldout_alpha"] = np.where(special, np.nan, average_signed_frequency(test))
    return columns


def summary_metrics(prepared: PreparedDataset) -> dict[str, float]:
    """What prepare reports for every dataset, then the source's own metrics."""
    train, test = prepared.splits["train"], prepared.splits["test"]
    return {
        "vocab_size": len(prepared.tokens),
        "n_train": train.n,
        "n_test": test.n,
        "nnz_train": len(train.bag_tokens),
        "mean_length": float(train.lengths.mean()),
        "positive_label_fraction": float((train.labels == 1).mean()),  # label 1's share for K > 2
        **prepared.metrics,
    }
