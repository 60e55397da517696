"""What long work tells the terminal. It cannot change a result: plumbing, in no compute stage's DVC deps."""

from __future__ import annotations

import math
import os
import sys
import time

from tqdm import tqdm

ESTIMATE_AFTER = 30.0  # seconds: every dataset's own flow ends within about two minutes; one still running then
LONG = 300.0  # is estimated once, and a rest longer than this is told in one line


def show_progress() -> bool:
    """Progress bars on a terminal, off in CI (CI set) or when TOKSEL_PROGRESS=0."""
    if os.environ.get("TOKSEL_PROGRESS") is not None:
        return os.environ["TOKSEL_PROGRESS"] not in ("0", "false", "")
    return not os.environ.get("CI") and sys.stderr.isatty()


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


class FlowWatch:
    """A flow's observer (theory/gradient_flow.py): a bar over log t on a terminal, and, ESTIMATE_AFTER seconds in,
    one warning line if at its pace the rest would take more than LONG seconds (its steps are the stiffness's, so
    the rest is about (horizon - t) / step steps, up to the step cap)."""

    def __init__(self, label: str, horizon: float, cap: int, setting: str) -> None:
        self.label, self.horizon, self.cap, self.setting = label, horizon, cap, setting
        self.started, self.estimated = time.monotonic(), False
        self.bar = tqdm(total=100, desc=label, disable=not show_progress(), mininterval=1.0,
                        bar_format="{desc}: |{bar}| {percentage:3.0f}% of log t{postfix} [{elapsed}]")

    def __call__(self, t: float, step: float, steps: int) -> None:
        if not self.bar.disable:  # called at every step: nothing formatted where no bar is drawn
            self.bar.set_postfix_str(f"t = {t:.3g} of {self.horizon:.3g}", refresh=False)
            self.bar.update(100 * math.log1p(t) / math.log1p(self.horizon) - self.bar.n)
        elapsed = time.monotonic() - self.started
        if self.estimated or elapsed < ESTIMATE_AFTER:
            return
        self.estimated = True
        left = min((self.horizon - t) / step, self.cap - steps)
        rest = elapsed / steps * left
        if rest > LONG:
            ending = ("reach the horizon" if left < self.cap - steps else
                      f"stop at the cap of {self.cap:,} steps, at t = {t + left * step:.2g}, with an error")
            print(f"{self.label}: warning: after {elapsed:.0f} s, t = {t:.3g} of the horizon {self.horizon:.3g} in "
                  f"steps of about {step:.3g}: at this pace it would {ending} in about {_duration(rest)} more; "
                  f"{self.setting} sets the horizon", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.bar.close()
