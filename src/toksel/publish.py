"""Show the stages' run records (runs/) as MLflow runs: `python -m toksel.publish [<tracking URI>]`.

The pipeline's last DVC stage runs it on $MLFLOW_TRACKING_URI, else sqlite:///<project>/mlflow.db; run it by hand
for another store, or at any time. It rebuilds the view of the records present (tracking/view.py): after a failure,
twice or at once, the store holds each run once. A store that does not answer is one line and exit 2, with the
waits bounded by MLFLOW_HTTP_REQUEST_TIMEOUT (here 30 s unless set) and MLFLOW_HTTP_REQUEST_MAX_RETRIES (here 2).
The store's address is shown without the password it may hold.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from toksel.runtime.cli import PLAN_ENV, PLANNED
from toksel.runtime.errors import ToksError
from toksel.runtime.io import write_json
from toksel.runtime.paths import tracking_uri
from toksel.tracking.experiment import bounded_waits, masked_uri, store_failure
from toksel.tracking.view import Publisher, current_pipeline, read_specs

# The stage's output: how many records the store shows (a number of the records alone), and the artifacts it did not.
SUMMARY = Path("results/publish.json")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    if os.environ.get(PLAN_ENV):  # a plan (tools/plan.py): the view is not touched
        print("publish: would run (a plan: nothing published)", flush=True)
        return PLANNED
    uri = argv[0] if argv else tracking_uri()
    bounded_waits()
    try:
        published = Publisher(uri).publish(read_specs(current_pipeline()))
    except ToksError as error:
        print(f"publish: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 (whatever the store raises: one line, the records stay)
        print(f"publish: {store_failure(uri, error)}; nothing is lost: run `python -m toksel.publish` again once "
              "it answers", file=sys.stderr)
        return 2
    for path, why in published.not_shown.items():
        print(f"publish: {path} {why}: not shown", file=sys.stderr)
    if not argv:
        write_json(SUMMARY, {"records": published.records, "artifacts_not_shown": len(published.not_shown)})
    print(f"publish: {published.runs} runs in {masked_uri(uri)} ({published.created} made now, "
          f"{published.removed} no record backs removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
