"""A verdict rule's operating characteristic: how often it says `holds` as the planted effect grows.

A family's known answers are drawn at each effect of its ladder (0, the null, up past the paper's size or the
threshold). At each effect, replicates are drawn until the Wilson interval of the holding rate is as narrow as
asked (half-width `target`: 0.05 where a replicate is cheap, 0.1 where it follows a flow or trains a model), or
a cap is reached; a rate at 0 or 1 needs a few dozen replicates, one near 1/2 a few hundred. Replicate r draws
the same random numbers at every effect (common random numbers), so the curve's steps are the effect's, not the
draws'. From the curve: the power at the paper's size (or at the family's reference effect where the paper gives
no number), the false-positive rate at the null, and the effect at which the power reaches 0.8 (interpolated
between the ladder's points, with the bracket of points whose Wilson intervals lie below and above 0.8).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toksel.calibration.rates import holding_rate, wilson
from toksel.claims.catalogue import Claim

POWER = 0.8  # the power a calibrated rule reaches at the paper's size, and the level the curve's crossing reads
BATCH = 16  # replicates drawn at a time before the interval is looked at again

# One verdict's statistic on each of its seeds, for an effect and a replicate.
Draw = Callable[[float, int], Sequence[float | None]]
# Many at once: (effect, replicate) pairs -> their verdicts' values, in order (a fan-out, or a plain loop).
DrawMany = Callable[[Sequence[tuple[float, int]]], list[Sequence[float | None]]]


@dataclass(frozen=True)
class Precision:
    target: float  # the Wilson half-width wanted
    most: int  # replicates at most per effect


def half_width(holds: int, replicates: int) -> float:
    low, high = wilson(holds, replicates)
    return (high - low) / 2


def operating_curve(claim: Claim, config: Any, effects: Sequence[float], draw_many: DrawMany,
                    precision: Precision) -> list[dict[str, Any]]:
    """The holding rate of `claim`'s rule at each effect: a point per effect with its rate and Wilson interval,
    the replicates it took and the mean statistic there. All effects still short of their precision draw their
    next batch together, so a fan-out keeps every worker busy."""
    drawn: dict[float, list[Sequence[float | None]]] = {effect: [] for effect in effects}

    def settled(effect: float) -> bool:
        values = drawn[effect]
        if len(values) >= precision.most:
            return True
        if not values:
            return False
        rate = holding_rate(claim, values, config)
        return half_width(rate.holds, rate.replicates) <= precision.target

    while open_effects := [effect for effect in effects if not settled(effect)]:
        wanted = [(effect, len(drawn[effect]) + k) for effect in open_effects
                  for k in range(min(BATCH, precision.most - len(drawn[effect])))]
        for (effect, _), values in zip(wanted, draw_many(wanted), strict=True):
            drawn[effect].append(values)
    return [{"effect": effect, **holding_rate(claim, drawn[effect], config).as_record()} for effect in effects]


def loop(draw: Draw) -> DrawMany:
    """A DrawMany that draws one after the other in this process."""
    return lambda pairs: [draw(effect, replicate) for effect, replicate in pairs]


def rate_at(curve: Sequence[dict[str, Any]], effect: float | None) -> dict[str, Any] | None:
    """The curve's point at `effect` (a ladder point), or None."""
    if effect is None:
        return None
    return next((point for point in curve if math.isclose(point["effect"], effect)), None)


def power_crossing(curve: Sequence[dict[str, Any]], level: float = POWER) -> dict[str, float | None]:
    """The smallest effect at which the holding rate reaches `level`, along the ladder in increasing effect:
    linearly interpolated between the points on either side (None if it never does), with its bracket: from the
    last point whose Wilson interval lies wholly below the level (None if none does) to the first whose interval lies
    wholly above it (None if none does)."""
    points = sorted(curve, key=lambda point: point["effect"])
    crossing = None
    for before, after in zip([None, *points], points, strict=False):
        if after["rate"] >= level:
            if before is None or after["rate"] == before["rate"]:
                crossing = after["effect"]
            else:
                share = (level - before["rate"]) / (after["rate"] - before["rate"])
                crossing = before["effect"] + share * (after["effect"] - before["effect"])
            break
    above = next((index for index, point in enumerate(points) if point["low"] >= level), len(points))
    high = points[above]["effect"] if above < len(points) else None
    low = next((point["effect"] for point in reversed(points[:above]) if point["high"] < level), None)
    return {"effect": crossing, "low": low, "high": high}


