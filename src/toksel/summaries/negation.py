"""What the negation stage found (results/negation/negation.json), as its summary and the report show it: each
model's accuracy on the negated test reviews and on the others, and how the one-layer models read the negators,
each a mean over the training seeds with its 95 % interval. Exploratory: no claim, no verdict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from toksel.claims.verdict import Interval, seed_interval
from toksel.summaries.claims import interval_text
from toksel.summaries.markdown import number, table
from toksel.summaries.shading import legend

Rows = Sequence[Mapping[str, Any]]

ACCURACY = ("accuracy_negated", "accuracy_other", "difference", "accuracy_negated_positive",
            "accuracy_negated_negative")
ACCURACY_HEADER = ["model", "tokens read", "negated reviews (of)", "accuracy: negated", "accuracy: the others",
                   "negated - others", "negated word positive (reviews)", "negated word negative (reviews)"]
READINGS = ("alpha", "value", "value_z", "score", "score_z")
NEGATOR_HEADER = ["model", "negator (words)", "alpha_s", "E_s^T v", "E_s^T v: z among the tokens (% below it)",
                  "E_s^T p", "E_s^T p: z among the tokens (% below it)"]


ACCURACY_NOTE = ("Each model's accuracy, mean over the training seeds [95 % interval], and on the negated reviews by "
                 "the negated word's own polarity (a review may hold both): a negated positive word (not good) flips "
                 "its sense, where a negated negative word (don't waste) mostly keeps its review's side, so the "
                 "first tests a flip, the second barely. A model with positions reads "
                 "the first tokens of each review only, as it was trained (sequence.cpu.max_len), and a review is "
                 "negated for it when the negation lies there; its accuracy on every test review it reads is the one "
                 "its run recorded.")
NEGATOR_NOTE = ("How each one-layer model reads the negators: alpha_s (a negator of several words: their sum), "
                "E_s^T v and E_s^T p (averaged over their occurrences), and the last two as z among every token with "
                "statistics (with the share of tokens below it), mean over the seeds [95 % interval].")
EXAMPLES_NOTE = "Each token shaded by the one-layer model's attention (first seed), its negations underlined."
NO_EXAMPLES = "No test review is negated."


def rule_text(rule: Mapping[str, Any], seed: int, words: Mapping[str, Mapping[str, Any]]) -> str:
    """The rule in words (negation.json's `rule`), and per dataset its strong words and those most often negated
    (`words`, on seed `seed`)."""
    found = "; ".join(f"{dataset}: {item['strong_words']} strong words, " + (
        "the most often negated " + ", ".join(f"{word['word']} ({word['negations']})" for word in item["negated"])
        if item["negated"] else "none negated") for dataset, item in words.items())
    return (f"A test review is negated when one of the negators {', '.join(rule['negators'])} (n't: every word "
            f"ending in it) stands at most {rule['window']} token(s) before a strong sentiment word: a word whose "
            f"|P(+|s) - P(-|s)| on the training split is at least {rule['min_polarity']:g}, from at least "
            f"{rule['min_count']} occurrences there (params.yaml `negation` gives the reasons; the rule was fixed "
            f"before any accuracy was computed with it). Seed {seed}, the test reviews read whole: {found}.")


def _grouped(rows: Rows, key: Callable[[Mapping[str, Any]], Any]) -> dict[Any, list[Mapping[str, Any]]]:
    """The rows by `key`, in the order each group first appears."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    return groups


def _interval(rows: Iterable[Mapping[str, Any]], name: str) -> Interval:
    return seed_interval([row[name] for row in rows])


def _mean(rows: Sequence[Mapping[str, Any]], name: str) -> float:
    return _interval(rows, name).mean


def accuracy_rows(rows: Rows) -> list[list[str]]:
    """Per model: the negated reviews (the mean count over the seeds, of how many test reviews), its accuracy on
    them and on the others, and the difference, each with its interval over the seeds."""
    listed = []
    for model, seeds in _grouped(rows, lambda row: row["model"]).items():
        read = seeds[0]["max_len"]
        listed.append([model, "all" if read is None else f"the first {read}",
                      f"{number(_mean(seeds, 'negated'), '.0f')} ({number(_mean(seeds, 'reviews'), '.0f')})",
                      *(interval_text(_interval(seeds, name)) for name in ACCURACY[:3]),
                      *(f"{interval_text(_interval(seeds, f'accuracy_negated_{polarity}'))} "
                        f"({number(_mean(seeds, f'negated_{polarity}'), '.0f')})"
                        for polarity in ("positive", "negative"))])
    return listed


def negator_rows(rows: Rows) -> list[list[str]]:
    """Per one-layer model and negator: its alpha_s, E_s^T v and E_s^T p, and the last two's standing among every
    token (z and percentile), each with its interval over the seeds."""
    listed = []
    for (model, negator), seeds in _grouped(rows, lambda row: (row["model"], row["negator"])).items():
        words = seeds[0]["words"]
        shown = "not in the vocabulary" if not words else ", ".join(words[:4]) + (
            f", ... ({len(words)} words)" if len(words) > 4 else "")
        standing = {name: f"{interval_text(_interval(seeds, f'{name}_z'))} "
                          f"({number(_mean(seeds, f'{name}_percentile'), '.0f')} % below)"
                    for name in ("value", "score")}
        listed.append([model, negator if words == [negator] else f"{negator} ({shown})",
                      interval_text(_interval(seeds, "alpha")), interval_text(_interval(seeds, "value")),
                      standing["value"], interval_text(_interval(seeds, "score")), standing["score"]])
    return listed


def section(found: Mapping[str, Any], shaded: str, level: str, figure: str = "") -> list[str]:
    """The section as the stage's summary and the report lay it out, paragraph by paragraph: the rule, the accuracy
    table, the negators' table (then `figure`, if any) and the shaded reviews, under subheadings of `level` (##)."""
    shown = found["examples"]
    dataset = shown["model"].split("/")[1]
    return [part for part in (
        rule_text(found["rule"], found["seeds"][0], found["words"]),
        f"{level} Accuracy on the negated test reviews and on the others", ACCURACY_NOTE,
        "\n".join(table(ACCURACY_HEADER, accuracy_rows(found["accuracy"]))),
        f"{level} How the one-layer models read the negators", NEGATOR_NOTE,
        "\n".join(table(NEGATOR_HEADER, negator_rows(found["negators"]))), figure,
        f"{level} The {shown['count']} shortest negated test reviews of {dataset}", EXAMPLES_NOTE, legend(),
        shaded.strip() or NO_EXAMPLES) if part]


def metric_name(*parts: str) -> str:
    """A metric name MLflow takes (letters, digits, _): train/imdb/trained, n't -> train_imdb_trained, nt."""
    return "_".join(re.sub(r"\W", "", part.replace("/", "_")) for part in parts)


def negation_metrics(accuracy: Rows, negators: Rows) -> dict[str, float]:
    """Flat numbers: per model its accuracies and their difference (mean, _low, _high) and its negated reviews;
    per one-layer model and negator the means of its readings."""
    metrics: dict[str, float] = {}
    for model, seeds in _grouped(accuracy, lambda row: row["model"]).items():
        for name in ACCURACY:
            interval = _interval(seeds, name)
            metrics |= {metric_name(model, name): interval.mean, metric_name(model, name, "low"): interval.low,
                        metric_name(model, name, "high"): interval.high}
        metrics[metric_name(model, "negated_reviews")] = _mean(seeds, "negated")
    for (model, negator), seeds in _grouped(negators, lambda row: (row["model"], row["negator"])).items():
        metrics |= {metric_name(model, negator, name): _mean(seeds, name) for name in READINGS}
    return metrics
