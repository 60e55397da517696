"""The one timer every benchmark uses: medians over runs, each run the mean of a few calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    seconds: list[float]  # one per run: the mean seconds of its calls
    result: Any  # what the first timed call returned

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def timed(action: Callable[[], Any], repeats: int, calls: int = 1, warm_up: bool = False) -> Timing:
    """`repeats` runs of `calls` calls each; warm_up calls once first, untimed (compilation, caches)."""
    if warm_up:
        action()
    seconds, result = [], None
    for run in range(repeats):
        start = time.perf_counter()
        for call in range(calls):
            outcome = action()
            if run == call == 0:
                result = outcome
        seconds.append((time.perf_counter() - start) / calls)
    return Timing(seconds, result)
