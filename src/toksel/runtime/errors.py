"""The one exception type that means "the user's input is wrong" (exit code 2, one line), and the one that means
"the stage was told to stop"."""

import signal


class ToksError(Exception):
    """Bad input: a config value, a missing file, an empty split. The message names the problem and the fix."""


class Terminated(BaseException):
    """SIGTERM or SIGINT (Ctrl-C) reached a stage (a BaseException, so no `except Exception` swallows it): its old
    outputs and run records are kept, and it exits 128 + the signal's number (143, 130)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum
