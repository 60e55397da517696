"""Whether to draw progress bars. It cannot change a result: plumbing, in no compute stage's DVC deps."""

import os
import sys


def show_progress() -> bool:
    """Progress bars on a terminal, off in CI (CI set) or when TOKSEL_PROGRESS=0."""
    if os.environ.get("TOKSEL_PROGRESS") is not None:
        return os.environ["TOKSEL_PROGRESS"] not in ("0", "false", "")
    return not os.environ.get("CI") and sys.stderr.isatty()
