"""The DVC stages: one thin module per stage, `python -m pipelines.<stage> [key=value ...]`."""

import os
import signal
import sys


def _stopped_outside_its_work(signum: int, frame: object) -> None:
    """Ctrl-C or a `kill` before runtime/cli.py takes the signals over (while the stage's imports run, seconds with
    torch) or after it gives them back: one line instead of the traceback of whatever was importing."""
    stage = os.path.basename(sys.argv[0]).removesuffix(".py") if sys.argv[0] != "-m" else "stage"
    sys.stderr.write(f"{stage}: stopped by {signal.Signals(signum).name} outside its work (while its process started "
                     "or ended): its outputs are as its last finished run left them\n")
    sys.exit(128 + signum)  # SystemExit prints nothing; no run record is open outside the stage's work


# Python sets sys.argv[0] to "-m" while it imports the package of `python -m pipelines.<stage>`: only a stage's own
# process, never one that imports a stage (the tests), takes these handlers.
if sys.argv and sys.argv[0] == "-m":
    for _signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signum, _stopped_outside_its_work)
