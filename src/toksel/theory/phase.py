"""The eta0 x d phase diagram (docs/results.md: The eta0 x d phase diagram) and the d sweep of the one-step error.

Scale argument: after the step, an important token's embedding is its random part (norm about 1) plus
(eta0 alpha_s / 2) v. Selection needs that signal above the O(1/sqrt(d)) noise the step leaves on the other
tokens, and below the random part, else p aligns with +v or -v and serves one class only:

    1/sqrt(d) < eta0 |alpha_s| / 2 < 1,   i.e.   2 / (|alpha| sqrt(d)) < eta0 < 2 / |alpha|,

with |alpha| the mean |alpha_s| over the important tokens. The measured window is where the selection holds
on the grid; each edge lies between the last failing and the first holding eta0 on the grid.

One-step error: the update's part orthogonal to v comes from the p0 term of the gradient, and is expected
to fall like 1/sqrt(d) next to the part along v: a slope of about -1/2 on log-log axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def predicted_window(mean_abs_alpha: float, d: int) -> tuple[float, float]:
    """The eta0 range of the scale argument: (2 / (|alpha| sqrt(d)), 2 / |alpha|)."""
    return 2 / (mean_abs_alpha * math.sqrt(d)), 2 / mean_abs_alpha


@dataclass(frozen=True)
class Window:
    low: float | None  # smallest eta0 of the grid where the claim holds (None: nowhere)
    high: float | None  # largest
    below: float | None  # the largest failing eta0 under `low` (None: `low` is the grid's first)
    above: float | None  # the smallest failing eta0 over `high` (None: `high` is the grid's last)
    holding: int  # cells of the row where it holds
    contiguous: bool  # no failing cell between low and high

    def bracket(self, which: str) -> tuple[float, float] | None:
        """The two grid cells the edge lies between (failing, holding), in increasing eta0; None if not bracketed."""
        inside, outside = (self.low, self.below) if which == "low" else (self.high, self.above)
        return None if inside is None or outside is None else (min(inside, outside), max(inside, outside))

    def edge(self, which: str) -> float | None:
        """The edge's estimate: the geometric mean of its bracket; None if the grid does not bracket it."""
        bracket = self.bracket(which)
        return None if bracket is None else math.sqrt(bracket[0] * bracket[1])


def measured_window(eta0: np.ndarray, holds: np.ndarray) -> Window:
    """The window of one row of the grid: eta0 (ascending) and whether the claim holds at each."""
    order = np.argsort(eta0)
    eta0, holds = np.asarray(eta0, dtype=float)[order], np.asarray(holds, dtype=bool)[order]
    if not holds.any():
        return Window(None, None, None, None, 0, True)
    first, last = np.flatnonzero(holds)[[0, -1]]
    return Window(low=float(eta0[first]), high=float(eta0[last]),
                  below=float(eta0[first - 1]) if first > 0 else None,
                  above=float(eta0[last + 1]) if last + 1 < len(eta0) else None,
                  holding=int(holds.sum()), contiguous=bool(holds[first : last + 1].all()))


def bracketing(window: Window) -> list[float]:
    """The eta0 of the cells that bracket the window's edges (the last failing and first holding on each side)."""
    return sorted({eta0 for eta0 in (window.below, window.low, window.high, window.above) if eta0 is not None})


def edge_factor(measured: float | None, predicted: float) -> float | None:
    """How far apart a measured edge and the predicted one are, as a factor >= 1 (None: not measured)."""
    return None if measured is None else max(measured / predicted, predicted / measured)


def factor_range(bracket: tuple[float, float], predicted: float) -> tuple[float, float]:
    """The smallest and largest edge_factor of an edge anywhere in `bracket` against `predicted`: 1 at least where
    the prediction lies inside the bracket."""
    factors = [edge_factor(end, predicted) for end in bracket]
    inside = bracket[0] <= predicted <= bracket[1]
    return (1.0 if inside else min(factors)), max(factors)


@dataclass(frozen=True)
class PowerLaw:
    slope: float  # b in y = a d^b
    prefactor: float  # a
    r: float  # Pearson r of log y on log d
    slope_interval: tuple[float, float] = (float("nan"), float("nan"))  # 95 % (t, n - 2 degrees of freedom)

    def __call__(self, d: np.ndarray) -> np.ndarray:
        return self.prefactor * np.asarray(d, dtype=float) ** self.slope


def fit_power_law(d: np.ndarray, y: np.ndarray) -> PowerLaw:
    """Least squares of log y on log d; NaN slope and prefactor with fewer than two distinct d."""
    log_d, log_y = np.log(np.asarray(d, dtype=float)), np.log(np.asarray(y, dtype=float))
    if len(np.unique(log_d)) < 2:
        return PowerLaw(float("nan"), float("nan"), float("nan"))
    slope, intercept = np.polyfit(log_d, log_y, deg=1)
    r = float(np.corrcoef(log_d, log_y)[0, 1]) if len(log_d) > 2 else float("nan")
    interval = (float("nan"), float("nan"))
    if len(log_d) > 2:
        residuals = log_y - (slope * log_d + intercept)
        stderr = math.sqrt(float(residuals @ residuals) / (len(log_d) - 2) / float(((log_d - log_d.mean()) ** 2).sum()))
        from scipy.stats import t as student_t  # here: half a second to import, for this one quantile

        half = float(student_t.ppf(0.975, len(log_d) - 2)) * stderr
        interval = (float(slope) - half, float(slope) + half)
    return PowerLaw(float(slope), float(math.exp(intercept)), r, interval)
