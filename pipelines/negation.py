"""Stage `negation` (ours, exploratory: no claim, no verdict): how the trained models read negators (not, never,
no, n't) and the strong sentiment words they negate, in real test reviews.

For each kept model of negation.models and each training seed: its accuracy on the test reviews that a rule marks
negated (a negator right before a strong sentiment word: params.yaml `negation`, toksel/data/negation.py) and on the
others, read back from the kept model (toksel/training/kept.py; the accuracy on every test review must be the one its
run recorded); for each one-layer model, the negators' alpha_s, E_s^T v and E_s^T p and where these stand among all
tokens. Writes results/negation/: negation.json (every row), summary.md, metrics.json, negation.png and examples.md
(the shortest negated test reviews of negation.dataset shaded by its one-layer model, first seed), which the report
shows.
"""

from __future__ import annotations

import collections
import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.verdict import seed_interval
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.negation import Rule, negated_rows, negations, negator_mask, negator_readings, strong_mask
from toksel.data.token_table import TokenTable, read_token_table
from toksel.figures.plots import negation_figure, save_figure
from toksel.models.reading import read_sequence
from toksel.params import Config, NegationConfig
from toksel.runtime.cli import run_stage
from toksel.runtime.config import dataset_configs
from toksel.runtime.io import write_json, write_text
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.records import RunRecord
from toksel.summaries.claims import publish_summary
from toksel.summaries.markdown import escape, literal
from toksel.summaries.negation import negation_metrics, section
from toksel.summaries.shading import class_name, reading_table
from toksel.training.kept import BAG_STAGES, Scored, scored_on_test

SECTIONS = STAGE_SECTIONS["negation"]
OUT = results_dir("negation", "")
TOP_NEGATED = 10  # the strong words most often negated, named per dataset
LABELLED = 4  # the negator words with the most occurrences, named in the figure


def rule(settings: NegationConfig) -> Rule:
    return Rule(tuple(settings.negators.split()), settings.window, settings.min_polarity, settings.min_count)


@dataclass(frozen=True)
class Lexicon:
    """A dataset's seed: its token table, its negators and its strong sentiment words (masks over the tokens)."""

    tokens: TokenTable
    negator: np.ndarray
    strong: np.ndarray

    def negations(self, split: PackedSplit, marking: Rule, max_len: int | None = None) -> np.ndarray:
        return negations(split, self.negator, self.strong, marking.window, max_len)


def lexicon(dataset: str, seed: int, marking: Rule) -> Lexicon:
    tokens = read_token_table(data_dir(dataset, seed) / "tokens.csv")
    return Lexicon(tokens, negator_mask(tokens.words, marking.negators), strong_mask(tokens, marking))


def accuracy_row(model: str, seed: int, scored: Scored, marked: np.ndarray,
                 by_polarity: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """A kept model's accuracy on the test reviews `marked` negated (one per row it was scored on) and the others,
    and on the negated reviews by the negated word's own polarity (`by_polarity`: positive, negative): negating a
    positive word flips it, while a negated negative word (don't waste) mostly keeps its review's side."""
    correct = scored.correct

    def accuracy(rows: np.ndarray) -> float:
        return float(correct[rows].mean()) if rows.any() else float("nan")

    found = {"model": model, "dataset": model.split("/")[1], "seed": seed, "max_len": scored.max_len,
             "reviews": len(scored.rows), "negated": int(marked.sum()), "test_accuracy": float(correct.mean()),
             "accuracy_negated": accuracy(marked), "accuracy_other": accuracy(~marked)}
    for polarity, rows in by_polarity.items():
        found |= {f"negated_{polarity}": int(rows.sum()), f"accuracy_negated_{polarity}": accuracy(rows)}
    return found | {"difference": found["accuracy_negated"] - found["accuracy_other"]}


def by_word_polarity(split: PackedSplit, pairs: np.ndarray, tokens: TokenTable) -> dict[str, np.ndarray]:
    """The negated reviews of `pairs` by the polarity of the word negated: positive (P(1|s) > P(0|s)), negative."""
    polarity = np.nan_to_num(tokens.column("posterior_difference"))[split.seq_tokens[pairs[:, 1]]]
    return {"positive": negated_rows(split, pairs[polarity > 0]), "negative": negated_rows(split, pairs[polarity < 0])}


def negated_words(split: PackedSplit, known: Lexicon, marking: Rule) -> dict[str, Any]:
    """How many strong sentiment words a lexicon has, and the TOP_NEGATED most often negated in the test reviews
    (read whole), with how often."""
    pairs = known.negations(split, marking)
    counted = collections.Counter(known.tokens.words[token] for token in split.seq_tokens[pairs[:, 1]])
    return {"strong_words": int(known.strong.sum()),
            "negated": [{"word": word, "negations": count} for word, count in counted.most_common(TOP_NEGATED)]}


def examples(name: str, scored: Scored, known: Lexicon, marking: Rule, count: int) -> str:
    """The `count` shortest negated test reviews, each shaded by the attention of the one-layer model `scored`
    (`name` says which), its negations underlined (Markdown with inline HTML)."""
    split, tokens = scored.split, known.tokens
    pairs = known.negations(split, marking)
    review_of = np.searchsorted(split.seq_indptr, pairs[:, 0], side="right") - 1
    lines = []
    for row in sorted(np.unique(review_of), key=lambda row: (split.lengths[row], row))[:count]:
        start, ids = split.seq_indptr[row], split.seq_tokens[split.seq_indptr[row]:split.seq_indptr[row + 1]]
        words = [tokens.words[i] for i in ids]
        mine = pairs[review_of == row] - start
        reading = read_sequence(scored.parameters["scores"], scored.parameters["values"], ids)
        said = ", ".join(f"{literal(words[negator])} {literal(words[word])}" for negator, word in mine)
        lines += [f"### {escape(name.split('/')[1])}, test review {row}: "
                  f"{class_name(int(split.labels[row]), tokens.num_classes)}; negated: {said}", "",
                  *reading_table(words, {name: reading}, tokens.num_classes, column="model",
                                 marked=set(mine.ravel().tolist())), ""]
    return "\n".join(lines)


def figure_frames(accuracy: list[dict[str, Any]], scored: Scored, known: Lexicon
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """negation_figure's two frames: every seed's accuracies with their intervals, and one model's tokens."""
    points = []
    for group, name in (("negated", "accuracy_negated"), ("other", "accuracy_other")):
        for model in dict.fromkeys(row["model"] for row in accuracy):
            seeds = [row for row in accuracy if row["model"] == model]
            interval = seed_interval([row[name] for row in seeds])
            points += [{"model": model, "group": group, "seed": row["seed"], "accuracy": row[name],
                        "mean": interval.mean, "low": interval.low, "high": interval.high} for row in seeds]
    tokens, negator, strong = known.tokens, known.negator, known.strong
    polarity = np.nan_to_num(tokens.column("posterior_difference"))
    kind = np.where(negator, "negator", np.where(strong, np.where(polarity > 0, "strong positive word",
                                                                  "strong negative word"), "other token"))
    frame = pd.DataFrame({"value": scored.parameters["values"], "score": scored.parameters["scores"], "kind": kind,
                          "word": ""})
    counts = tokens.per_class("count").sum(axis=0)
    named = sorted(np.flatnonzero(negator), key=lambda token: -counts[token])[:LABELLED]
    frame.loc[named, "word"] = [tokens.words[token] for token in named]
    return pd.DataFrame(points), frame[tokens.occurring() | negator]


def summary(found: dict[str, Any], shaded: str) -> str:
    seeds = found["seeds"]
    return "\n\n".join([
        f"# Negation in real reviews (ours, exploratory: no claim; seeds {', '.join(map(str, seeds))})",
        *section(found, shaded, "##", "![negation.png](negation.png)")]) + "\n"


def negation(config: Config, run: RunRecord, overrides: Sequence[str] = ()) -> None:
    settings, seeds, marking = config.negation, config.training_seeds, rule(config.negation)
    configs = dataset_configs(sorted({model.split("/")[1] for model in settings.models}), overrides)
    known = {(dataset, seed): lexicon(dataset, seed, marking) for dataset in configs for seed in seeds}
    shown = next(model for model in settings.models if model.startswith(f"train/{settings.dataset}/"))
    accuracy, readings, splits, first = [], [], {}, None
    for model in settings.models:
        stage, dataset, _ = model.split("/")
        for seed in seeds:
            lexicon_of = known[dataset, seed]
            scored = scored_on_test(seed_dir(results_dir(stage, model.split("/", 1)[1]), seed),
                                    data_dir(dataset, seed), lexicon_of.tokens, configs[dataset])
            pairs = lexicon_of.negations(scored.split, marking, scored.max_len)
            marked = negated_rows(scored.split, pairs)
            by_polarity = by_word_polarity(scored.split, pairs, lexicon_of.tokens)
            accuracy.append(accuracy_row(model, seed, scored, marked[scored.rows],
                                         {polarity: rows[scored.rows] for polarity, rows in by_polarity.items()}))
            splits[dataset, seed] = scored.split  # the whole test split, whichever rows the model was scored on
            if stage in BAG_STAGES:
                readings += [{"model": model, "dataset": dataset, "seed": seed, **row} for row in negator_readings(
                    lexicon_of.tokens, scored.parameters["scores"], scored.parameters["values"], marking.negators)]
            if (model, seed) == (shown, seeds[0]):
                first = scored
    assert first is not None  # params' rules: negation.models holds the shown model
    words = {dataset: negated_words(splits[dataset, seeds[0]], known[dataset, seeds[0]], marking)
             for dataset in configs}
    shaded = examples(f"{shown} seed {seeds[0]}", first, known[settings.dataset, seeds[0]], marking,
                      settings.examples)
    found = {"rule": {"negators": list(marking.negators), "window": settings.window,
                      "min_polarity": settings.min_polarity, "min_count": settings.min_count},
             "seeds": seeds, "accuracy": accuracy, "negators": readings, "words": words,
             "examples": {"model": shown, "seed": seeds[0], "count": settings.examples}}
    write_json(OUT / "negation.json", found)
    write_text(OUT / "examples.md", shaded + "\n")
    points, tokens = figure_frames(accuracy, first, known[settings.dataset, seeds[0]])
    save_figure(negation_figure(points, tokens, f"{shown} (seed {seeds[0]})"), OUT / "negation.png")
    run.log_artifact(OUT / "negation.png")
    publish_summary(run, OUT, summary(found, shaded), negation_metrics(accuracy, readings))


def main(argv: list[str] | None = None) -> int:
    overrides = sys.argv[1:] if argv is None else list(argv)  # each dataset's config takes them too
    return run_stage("negation", SECTIONS, functools.partial(negation, overrides=overrides), argv, per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
