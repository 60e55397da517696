"""Token selection (Lemma 4.4): S_X(p) = tokens of X whose score p^T E_s is the sequence's maximum.

Scores are compared in the direction of p: s is selected when (p / |p|)^T (E_max - E_s) <= tol, so the
tolerance does not change meaning as |p| grows.
"""

from __future__ import annotations

import numpy as np

from toksel.data.corpus import PackedSplit


def selected_entries(scores: np.ndarray, split: PackedSplit, tol: float) -> np.ndarray:
    """Boolean mask over the split's bag entries: is this token in S_X(p)? `scores` = E p / |p|."""
    entry_scores = scores[split.bag_tokens]
    row_max = np.maximum.reduceat(entry_scores, split.bag_indptr[:-1])
    return entry_scores >= np.repeat(row_max, np.diff(split.bag_indptr)) - tol


def selection_fraction(selected: np.ndarray, important: np.ndarray, split: PackedSplit, every: bool = True) -> float:
    """Fraction of sequences (with at least one important token) whose important tokens are all selected
    (Lemma 4.4), or, with every=False, of which at least one is (the paper's claim beyond Assumption 1)."""
    entry_important = important[split.bag_tokens]
    rows = split.bag_rows
    has_important = np.bincount(rows, weights=entry_important, minlength=split.n) > 0
    if every:
        hit = np.bincount(rows, weights=entry_important & ~selected, minlength=split.n) == 0
    else:
        hit = np.bincount(rows, weights=entry_important & selected, minlength=split.n) > 0
    return float((has_important & hit).sum() / max(has_important.sum(), 1))
