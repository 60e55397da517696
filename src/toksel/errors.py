"""The one exception type that means "the user's input is wrong" (exit code 2, one line)."""


class ToksError(Exception):
    """Bad input: a config value, a missing file, an empty split. The message names the problem and the fix."""


class Terminated(BaseException):
    """SIGTERM reached a stage (a BaseException, so no `except Exception` swallows it): its runs are marked KILLED,
    its old outputs kept, and it exits 143."""
