"""The one exception type that means "the user's input is wrong" (exit code 2, one line), the one that means
"the stage was told to stop", and the handler of the signals that tell it."""

import signal
from typing import NoReturn


class ToksError(Exception):
    """Bad input: a config value, a missing file, an empty split. The message names the problem and the fix."""


class Terminated(BaseException):
    """SIGTERM or SIGINT (Ctrl-C) reached a stage (a BaseException, so no `except Exception` swallows it): its old
    outputs and run records are kept, and it exits 128 + the signal's number (143, 130)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


_RECEIVED: list[int] = []  # the stopping signals this stage received


def stop(signum: int, frame: object = None) -> NoReturn:
    """The handler of SIGTERM and SIGINT: raise Terminated, and remember the stop. A handler runs wherever Python
    happens to be, a finalizer (__del__) too, where the exception it raises is only printed and the stage goes on: the
    stage asks `raise_if_stopped` again between training steps and before it writes its outputs."""
    _RECEIVED.append(signum)
    raise Terminated(signum)


def raise_if_stopped() -> None:
    """Raise the stop again if one was received (its first raise may have been lost)."""
    if _RECEIVED:
        raise Terminated(_RECEIVED[0])


def forget_stops() -> None:
    """A new stage run: no stop received yet (a test may run several in one process)."""
    _RECEIVED.clear()
