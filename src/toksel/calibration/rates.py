"""How often a claim's verdict rule holds over replicates of a known answer, with a 95 % interval.

A replicate is one verdict: the claim's statistic on as many seeds as the claim is judged on, their t-interval,
and the claim's own rule (its threshold, or its band around the paper's number), through toksel.claims.catalogue.assess.
The rate of `holds` over the replicates is a proportion; its interval is Wilson's score interval, which stays
inside [0, 1] and keeps its coverage near 0 and 1, where power and false-positive rates live.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from toksel.claims.catalogue import Claim, Measurement, assess

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """Wilson's 95 % score interval of a proportion."""
    if trials == 0:
        return math.nan, math.nan
    rate, z2 = successes / trials, Z95**2
    centre = (rate + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z95 * math.sqrt(rate * (1 - rate) / trials + z2 / (4 * trials**2)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    holds: int  # replicates whose verdict is `holds`
    replicates: int
    mean_statistic: float  # the statistic's mean over every seed of every replicate: where the answer sits

    @property
    def rate(self) -> float:
        return self.holds / self.replicates if self.replicates else math.nan

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.holds, self.replicates)

    def as_record(self) -> dict[str, Any]:
        low, high = self.interval
        return {**asdict(self), "rate": self.rate, "low": low, "high": high}


def holding_rate(claim: Claim, replicates: Sequence[Sequence[float | None]], config: Any) -> Rate:
    """The share of replicates (each the statistic's value on every seed of one verdict) for which the claim's rule
    says `holds`."""
    verdicts = [assess(claim, Measurement(claim.id, "calibration", list(range(len(values))), list(values),
                                          [None] * len(values)), config).verdict for values in replicates]
    finite = [value for values in replicates for value in values if value is not None and math.isfinite(value)]
    return Rate(sum(verdict == "holds" for verdict in verdicts), len(replicates),
                sum(finite) / len(finite) if finite else math.nan)
