"""Runs side by side: the three embedding arms of a dataset with the paper's numbers, and the ablation variants;
each quantity as its mean and std over the seeds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from toksel.claims.paper import REBUTTAL_ACCURACY, REBUTTAL_LOSS
from toksel.params import EMBEDDINGS
from toksel.summaries.markdown import MISSING, table

PAPER = {(metric, arm): f"about {value:g}" for metric, numbers in (("test_accuracy", REBUTTAL_ACCURACY),
                                                                    ("test_loss", REBUTTAL_LOSS))
         for arm, value in numbers.items()}  # the rebuttal's, beside our arms

ROWS = (  # metric, what it is
    ("lr", "learning rate (the grid's best on validation)"),
    ("test_accuracy", "test accuracy"),
    ("test_loss", "test loss"),
    ("control_test_accuracy", "test accuracy, training labels shuffled (control)"),
    ("spearman_v_alpha", "Spearman of E_s^T v with alpha_s (held-out)"),
    ("u_rise", "the U: smaller side's Spearman of E_s^T p with |x| (held-out)"),
    ("bin_std_v", "mean per-bin std of E_s^T v"),
    ("bin_std_p", "mean per-bin std of E_s^T p"),
    ("bin_spread_v", "mean per-bin std of E_s^T v / std of all E_s^T v"),
    ("bin_spread_p", "mean per-bin std of E_s^T p / std of all E_s^T p"),
    ("norm_v", "|v|"),
    ("norm_p", "|p|"),
    ("mean_norm_E", "mean |E_s|"),
    ("p_min_location", "posterior difference where the E_s^T p curve is lowest"),
    ("test_attention_important_mass", "attention mass on the important tokens (test)"),
    ("test_argmax_important_fraction", "sequences whose top token is important (test)"),
    ("epochs", "epochs trained"),
)

VARIANT_ROWS = (  # the ablation runs of one dataset, side by side
    ("test_accuracy", "test accuracy"),
    ("test_loss", "test loss"),
    ("control_test_accuracy", "test accuracy, training labels shuffled (control)"),
    ("best_train_loss", "train loss (best model)"),
    ("spearman_v_alpha", "Spearman of E_s^T v with alpha_s (held-out)"),
    ("u_rise", "the U: smaller side's Spearman of the <cls> score with |x| (held-out)"),
    ("v_rise_positive", "Spearman of E_s^T v with x, x > 0"),
    ("v_rise_negative", "Spearman of E_s^T v with x, x < 0"),
    ("p_min_location", "posterior difference where the <cls> score curve is lowest"),
    ("bin_spread_p", "mean per-bin std of the <cls> score / std of all"),
    ("test_attention_important_mass", "attention mass on the important tokens (test)"),
    ("padding_fraction", "padding in the training batches"),
    ("epochs", "epochs trained"),
)


def spread(values: Sequence[Any]) -> str:
    """mean +- std over the seeds' finite values (`n/a` when there are none)."""
    kept = [float(value) for value in values if isinstance(value, int | float) and math.isfinite(value)]
    if not kept:
        return MISSING
    mean = sum(kept) / len(kept)
    if len(kept) == 1:
        return f"{mean:.4g}"
    std = math.sqrt(sum((value - mean) ** 2 for value in kept) / (len(kept) - 1))
    return f"{mean:.4g} +- {std:.2g}"


def side_by_side(runs: Mapping[str, Sequence[Mapping[str, Any]]], rows: Sequence[tuple[str, str]],
                 paper: Mapping[tuple[str, str], str] | None = None) -> str:
    """Markdown table: one column per run (its metrics per seed), one row per metric; a `paper` column if given."""
    names = list(runs)

    def row(metric: str, label: str) -> list[str]:
        values = [spread([seed.get(metric) for seed in runs[name]]) if any(runs[name]) else "not run" for name in names]
        papers = [] if paper is None else ["; ".join(f"{paper[metric, name]} ({name})" for name in names
                                                     if (metric, name) in paper)]
        return [label, *values, *papers]

    header = ["quantity", *names, *([] if paper is None else ["paper"])]
    return "\n".join(table(header, [row(metric, label) for metric, label in rows]))


def training_comparison(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The three embedding arms (keyed by EMBEDDINGS; each a list of per-seed metrics) with the paper's numbers."""
    return side_by_side({arm: runs.get(arm, []) for arm in EMBEDDINGS}, ROWS, PAPER)


def variants_comparison(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The ablation variants of one dataset, one column each."""
    return side_by_side(runs, VARIANT_ROWS)
