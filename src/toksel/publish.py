"""Show the stages' run records (runs/) as MLflow runs: `python -m toksel.publish [<tracking URI>]`.

The pipeline's last DVC stage runs it on $MLFLOW_TRACKING_URI, else sqlite:///<project>/mlflow.db; run it by hand
for another store, or at any time. It rebuilds the view of the records present (tracking/view.py): after a failure,
twice or at once, the store holds each run once. A store that does not answer is one line and exit 2, with the
waits bounded by MLFLOW_HTTP_REQUEST_TIMEOUT (here 30 s unless set) and MLFLOW_HTTP_REQUEST_MAX_RETRIES (here 2).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from toksel.runtime.cli import PLAN_ENV, PLANNED
from toksel.runtime.errors import ToksError
from toksel.runtime.io import write_json
from toksel.runtime.paths import tracking_uri
from toksel.tracking.view import Publisher, current_pipeline, read_specs

# The stage's output: how many records the store shows (a number of the records alone), and the artifacts it did not.
SUMMARY = Path("results/publish.json")


def _without_password(uri: str) -> str:
    return re.sub(r"//[^/@]*@", "//", uri)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    if os.environ.get(PLAN_ENV):  # a plan (tools/plan.py): the view is not touched
        print("publish: would run (a plan: nothing published)", flush=True)
        return PLANNED
    uri = argv[0] if argv else tracking_uri()
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    try:
        published = Publisher(uri).publish(read_specs(current_pipeline()))
    except ToksError as error:
        print(f"publish: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 (whatever the store raises: one line, the records stay)
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        if re.search(r"error code (401|403)\b", reason):  # MLflow's words for a refused login
            reason += " - the server asks who you are: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
        print(f"publish: the MLflow store {_without_password(uri)} failed ({type(error).__name__}: {reason}); "
              "nothing is lost: run `python -m toksel.publish` again once it answers", file=sys.stderr)
        return 2
    for path in published.skipped_artifacts:
        print(f"publish: {path} has changed since its stage wrote it: not shown", file=sys.stderr)
    if not argv:
        write_json(SUMMARY, {"records": published.records,
                             "artifacts_not_shown": len(published.skipped_artifacts)})
    print(f"publish: {published.runs} runs in {_without_password(uri)} ({published.created} made now, "
          f"{published.removed} no record backs removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
