"""A flow's watch: one warning line when, ESTIMATE_AFTER seconds in, the rest would take more than LONG seconds;
none for a flow that ends soon, whatever its horizon; never twice."""

import pytest

from toksel.runtime import progress
from toksel.runtime.progress import ESTIMATE_AFTER, FlowWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    return clock


def _watch(steps_per_second: float, step: float, horizon: float, clock: Clock) -> FlowWatch:
    """A flow that keeps steps of `step` at `steps_per_second`, told to its watch for ESTIMATE_AFTER + 5 s."""
    clock.now = 0.0
    watch = FlowWatch("gradient_flow mine seed 0", horizon, cap=200_000, setting="datasets.mine.gradient_flow.horizon")
    watch.bar.disable = True
    steps = int(steps_per_second * (ESTIMATE_AFTER + 5))
    for k in range(1, steps + 1):
        clock.now = k / steps_per_second
        watch(k * step, step, k)
    return watch


def test_a_stiff_flow_to_a_far_horizon_is_told_once(clock, capsys):
    _watch(100, 0.5, 1e10, clock)  # steps of 0.5: the cap, 200,000 steps, in about 33 min
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert "stop at the cap of 200,000 steps, at t = 1e+05" in lines[0] and "datasets.mine.gradient_flow" in lines[0]
    assert "in about 33 min more" in lines[0]


def test_a_flow_that_reaches_its_horizon_later_says_so(clock, capsys):
    _watch(100, 0.5, 5e4, clock)  # 100,000 steps: 1000 s, under the cap
    assert "would reach the horizon in about 16 min more" in capsys.readouterr().err


def test_a_flow_that_ends_soon_is_not_told(clock, capsys):
    _watch(100, 0.5, 3e3, clock)  # 6,000 steps: 60 s, 30 of them left at the estimate
    _watch(100, 0.5, 1.7e4 + 1, clock)  # 34,002 steps: 310 s left at the estimate, over LONG ...
    assert capsys.readouterr().err.count("warning") == 1  # ... is told; the first is not
