"""Tracking that never costs a result: the store's calls, none of which can stop a stage.

A store that fails (a server that does not answer within $TOKSEL_TRACKING_TIMEOUT seconds, default 10; a
damaged or vanished mlflow.db) costs the stage one warning line: from then on its calls are kept, in order,
in .toksel/pending/<process>.jsonl, and the stage goes on with its outputs, metrics.json included.
`python -m toksel.guarded upload [<uri>]` sends them once the store answers again (each file to the store it was
meant for, or to <uri>), mapping the runs they created to the runs the store creates now.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toksel.errors import ToksError
from toksel.tracker import Store, StoreCalls

TIMEOUT_ENV = "TOKSEL_TRACKING_TIMEOUT"
PENDING = Path(".toksel") / "pending"
PLACEHOLDER = "pending-"  # the id of a run or experiment the store has not created yet
SKIPPED_ON_UPLOAD = ("search_runs", "run_info")  # lookups: what they found then is what the stage used


def tracking_timeout() -> float:
    """Seconds a tracking server gets to answer one call ($TOKSEL_TRACKING_TIMEOUT, default 10)."""
    text = os.environ.get(TIMEOUT_ENV, "10")
    try:
        seconds = float(text)
    except ValueError:
        raise ToksError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ToksError(f"{TIMEOUT_ENV}={text!r} must be positive")
    return seconds


def limit_server_waits() -> None:
    """MLflow's HTTP client retries for minutes by default: one try within the timeout, unless the user chose."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", f"{tracking_timeout():g}")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


def _offline_answer(name: str) -> Any:
    if name == "experiment_id":
        return f"{PLACEHOLDER}experiment"
    if name == "create_run":
        return f"{PLACEHOLDER}{uuid.uuid4().hex}"
    if name == "search_runs":
        return []
    if name == "run_info":
        return {"status": "RUNNING", "experiment_id": f"{PLACEHOLDER}experiment", "tags": {}}
    return None


class GuardedStore(StoreCalls):
    """Store's calls through `opener`'s store; after its first failure, kept for later instead."""

    def __init__(self, uri: str, opener: Callable[[], Any], who: str) -> None:
        self.uri, self.opener, self.who = uri, opener, who
        self.store: Any = None
        self.pending: Path | None = None

    def _call(self, name: str, args: list[Any]) -> Any:
        if self.pending is None:
            try:
                if self.store is None:
                    self.store = self.opener()
                return getattr(self.store, name)(*args)
            except Exception as error:  # noqa: BLE001 (whatever the store raises, the stage goes on)
                self._go_offline(error)
        answer = _offline_answer(name)
        self._keep(name, args, answer if name in ("experiment_id", "create_run") else None)
        return answer

    def _go_offline(self, error: Exception) -> None:
        PENDING.mkdir(parents=True, exist_ok=True)
        self.pending = (PENDING / f"{os.getpid()}-{time.time_ns()}.jsonl").resolve()
        self._write({"uri": self.uri})
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        if re.search(r"error code (401|403)\b", reason):  # MLflow's words for a refused login
            reason += " - the server asks who you are: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
        print(f"{self.who}: MLflow tracking at {self.uri} failed ({type(error).__name__}: {reason}); the stage goes "
              f"on and keeps its results in its files; what it could not log waits in {self.pending}: "
              "`python -m toksel.guarded upload` sends it", file=sys.stderr)

    def _keep(self, name: str, args: list[Any], made: str | None) -> None:
        """One call, and the placeholder id it answered (a run or experiment the upload creates for real)."""
        if name == "log_artifact":
            args = [args[0], str(Path(args[1]).resolve()), *args[2:]]
        self._write({"call": name, "args": args, "made": made})

    def _write(self, record: dict[str, Any]) -> None:
        with open(self.pending, "a") as handle:
            handle.write(json.dumps(record) + "\n")


def upload(uri: str | None = None, folder: Path = PENDING) -> list[str]:
    """Send every pending file's calls to its store (or to `uri`); a file is removed once all of it is sent."""
    sent = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        store = Store(uri or lines[0]["uri"])
        ids: dict[str, str] = {}
        for record in lines[1:]:
            name, args = record["call"], [_real(arg, ids) for arg in record["args"]]
            if name in SKIPPED_ON_UPLOAD:
                continue
            answer = getattr(store, name)(*args)
            if record["made"] is not None:
                ids[record["made"]] = answer
        path.unlink()
        sent.append(f"{path.name}: {len(lines) - 1} calls sent to {uri or lines[0]['uri']}")
    return sent


def _real(value: Any, ids: dict[str, str]) -> Any:
    """`value` with the placeholders it holds (as ids, in tags such as a parent run, in lists) made real."""
    if isinstance(value, dict):
        return {key: _real(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [_real(item, ids) for item in value]
    return ids.get(value, value) if isinstance(value, str) else value


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] != "upload" or len(args) > 2:
        print("usage: python -m toksel.guarded upload [<tracking uri>]", file=sys.stderr)
        return 2
    try:
        for line in upload(args[1] if len(args) == 2 else None):
            print(line)
    except Exception as error:  # noqa: BLE001 (the store still fails: nothing is lost, the files stay)
        print(f"upload: the store failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''});"
              " the pending calls stay for the next try", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
