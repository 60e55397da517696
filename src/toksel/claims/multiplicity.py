"""Error control across the report's claims: how many of its verdicts a report of this size makes by chance.

Each counted claim's verdict is a test at its own level (a presence claim's one-sided t-test at 2.5 %, the 95 %
interval's end; a size claim's TOST at 5 %). Across the ~40 counted rows, some would `hold` by chance alone.
Holm's step-down procedure (Holm 1979) bounds the family-wise error rate, the chance that any counted verdict is
wrong, at report.family_alpha under any dependence between the claims (several claims read the same runs).
Benjamini-Yekutieli (2001) bounds the false discovery rate under any dependence, a weaker promise, and is shown
beside it. A row holds under the control when its own rule says it holds and its adjusted p-value is within the
family's level; the same for `fails`, with the p-values of the opposite tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's adjusted p-values: the k-th smallest times (m - k + 1), made non-decreasing, capped at 1."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def benjamini_yekutieli(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini-Yekutieli adjusted p-values: Benjamini-Hochberg's m p_(k) / k, times the harmonic sum
    c(m) = 1 + 1/2 + ... + 1/m that makes it hold under any dependence; made non-increasing from the top."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    harmonic = float(np.sum(1.0 / np.arange(1, m + 1)))
    scaled = p[order] * m * harmonic / np.arange(1, m + 1)
    stepped = np.minimum.accumulate(scaled[::-1])[::-1]
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted
