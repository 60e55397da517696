"""From a claim's measurements to an interval and a three-way verdict.

A claim is measured once per seed (or, for a few claims, with an interval its own method gives: the bracket
of a grid, the confidence interval of a fitted slope). The seeds' values give a 95 % interval for their mean,
Student's t with n - 1 degrees of freedom: mean +- t(0.975, n - 1) std / sqrt(n), std the sample standard
deviation. The verdict compares the whole interval with the threshold:

- `holds` when the interval lies on the claim's side of the threshold (the threshold itself included),
- `fails` when it lies strictly on the other side,
- `inconclusive` when it straddles the threshold, or when there is no interval (a single seed),
- `not computed` when no seed gave a finite value.

A size claim is an equivalence test (TOST: two one-sided tests, Schuirmann 1987): it holds when the 90 %
interval (each one-sided test at 5 %) lies inside the band around the paper's number, or on the claim's side of
its threshold for a size read as a bound (`judge_size`); it fails when the 95 % interval misses the band, and is
inconclusive otherwise.

Each verdict has its p-value (`p_values`): a presence claim's one-sided t-test against its threshold (it holds
exactly when p <= 0.025, the 95 % interval's end), a size claim's TOST p-value (it holds when p <= 0.05), and the
p-value of the opposite test, for `fails`. toksel.claims.multiplicity controls the error rate across claims with
them. An interval a method gives itself (a grid's bracket) has no p-value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
VERDICTS = ("holds", "fails", "inconclusive", "not computed")


@dataclass(frozen=True)
class Interval:
    values: tuple[float, ...]  # the finite measurements it summarises (one per seed)
    mean: float  # their mean (for a method's own interval: its point estimate)
    std: float  # their sample std (NaN below two values)
    low: float  # the interval's ends; NaN when there is none
    high: float
    method: str  # how the ends were found, in words

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def exists(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def _finite(values: Sequence[float | None]) -> tuple[float, ...]:
    return tuple(float(value) for value in values if value is not None and math.isfinite(value))


def seed_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval:
    """The t-interval of the mean of the finite `values`; no ends with fewer than two."""
    kept = _finite(values)
    n = len(kept)
    if n == 0:
        return Interval((), math.nan, math.nan, math.nan, math.nan, "no value")
    mean = math.fsum(kept) / n
    if n == 1:
        return Interval(kept, mean, math.nan, math.nan, math.nan, "one seed: no interval")
    std = math.sqrt(math.fsum((value - mean) ** 2 for value in kept) / (n - 1))
    from scipy.stats import t as student_t  # here: scipy.stats costs a second to import, and training stages need none

    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return Interval(kept, mean, std, mean - half, mean + half, f"{confidence:.0%} t-interval over {n} seeds")


def given_interval(estimate: float | None, low: float | None, high: float | None, method: str) -> Interval:
    """An interval a measurement brings itself (a grid's bracket, a regression's confidence interval)."""
    if estimate is None or not math.isfinite(estimate):
        return Interval((), math.nan, math.nan, math.nan, math.nan, "no value")
    ends = [math.nan if end is None else float(end) for end in (low, high)]
    return Interval((float(estimate),), float(estimate), math.nan, min(ends), max(ends), method)


def judge(interval: Interval, comparison: str, threshold: float) -> str:
    """`holds`, `fails`, `inconclusive` or `not computed`: where the interval lies against the threshold."""
    if comparison not in (">=", "<="):
        raise ValueError(f"comparison must be '>=' or '<=', got {comparison!r}")
    if interval.n == 0:
        return "not computed"
    if not interval.exists:
        return "inconclusive"
    if comparison == ">=":
        return "holds" if interval.low >= threshold else "fails" if interval.high < threshold else "inconclusive"
    return "holds" if interval.high <= threshold else "fails" if interval.low > threshold else "inconclusive"


def judge_within(interval: Interval, low: float, high: float) -> str:
    """`holds` when the interval lies inside [low, high], `fails` when it lies wholly outside, else `inconclusive`;
    `not computed` without a value."""
    if interval.n == 0:
        return "not computed"
    if not interval.exists:
        return "inconclusive"
    if low <= interval.low and interval.high <= high:
        return "holds"
    return "fails" if interval.high < low or interval.low > high else "inconclusive"


def judge_size(values: Sequence[float | None], alpha: float, comparison: str, threshold: float | None = None,
               band: tuple[float, float] | None = None) -> str:
    """A size claim's verdict: `holds` when the 1 - 2 alpha interval (TOST at alpha: 90 % for 5 %) lies inside
    `band` (or on the claim's side of `threshold`), `fails` when the 95 % interval lies wholly outside it, else
    `inconclusive`."""
    equivalence, wide = seed_interval(values, 1 - 2 * alpha), seed_interval(values)
    if band is not None:
        holds, missed = judge_within(equivalence, *band), judge_within(wide, *band)
    else:
        holds, missed = judge(equivalence, comparison, threshold), judge(wide, comparison, threshold)
    if holds in ("holds", "not computed"):
        return holds
    return "fails" if missed == "fails" else "inconclusive" if equivalence.exists else holds


@dataclass(frozen=True)
class PValues:
    holds: float  # the p-value of the test whose rejection makes the claim hold
    fails: float  # of the test whose rejection makes it fail


def _student(interval: Interval) -> tuple[float, float, int] | None:
    """(mean, standard error, degrees of freedom) of a seed interval; None without one."""
    if interval.n < 2 or not interval.method.endswith("seeds") or not math.isfinite(interval.std):
        return None
    return interval.mean, interval.std / math.sqrt(interval.n), interval.n - 1


def _above(mean: float, se: float, df: int, bound: float, inclusive: bool = False) -> float:
    """One-sided p-value of H0: mu below bound (inclusive: the bound itself counts as above it, as a threshold
    counts for its claim) against mu above it; seeds that agree exactly decide by their common value."""
    from scipy.stats import t as student_t

    if se == 0:
        return 0.0 if mean > bound or (inclusive and mean == bound) else 1.0
    return float(student_t.sf((mean - bound) / se, df))


def p_values(interval: Interval, comparison: str, threshold: float | None = None,
             band: tuple[float, float] | None = None) -> PValues | None:
    """The p-values of a seed interval's verdict: for `holds`, the one-sided t-test against the threshold (or
    TOST's larger p-value against the band); for `fails`, the test of the opposite side (or of either side
    outside the band). None where there is no spread over seeds to test with (one seed, a method's interval)."""
    student = _student(interval)
    if student is None:
        return None
    mean, se, df = student
    if band is not None:
        low, high = band
        return PValues(max(_above(mean, se, df, low, True), _above(-mean, se, df, -high, True)),
                       min(_above(mean, se, df, high), _above(-mean, se, df, -low)))
    if comparison == ">=":
        return PValues(_above(mean, se, df, threshold, True), _above(-mean, se, df, -threshold))
    return PValues(_above(-mean, se, df, -threshold, True), _above(mean, se, df, threshold))
