"""Live curves: a fit's metrics sent to MLflow as it trains (`tracking.live`), through Lightning's own MLFlowLogger.

The run the logger makes carries LIVE_TAG, and so does the fit's record: `publish` completes that run with the
record (its parameters, tags, artifacts, its place under the stage's run) instead of making a second. A live run
whose stage died before writing its record is left behind at the top level: `publish` deletes it once the
process that trained (LIVE_PROCESS_TAG) is gone, as its stage's rerun makes its own. Sending the
curves changes no result, so no stage depends on this module (tools/stage_deps.py, RESULT_NEUTRAL).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from toksel.runtime.experiment import LIVE_PROCESS_TAG, LIVE_TAG, experiment_name, open_experiment, this_process
from toksel.runtime.paths import tracking_uri
from toksel.runtime.records import RunRecord

if TYPE_CHECKING:
    from pytorch_lightning.loggers import Logger


def live_logger(run: RunRecord) -> Logger:
    """Lightning's MLflow logger for the fit of `run`, whose record it tags with the live run's key."""
    from pytorch_lightning.loggers import MLFlowLogger

    uri = tracking_uri()
    open_experiment(uri)  # made as publish makes it (its artifacts' place), before Lightning would
    key = uuid.uuid4().hex
    run.set_tag(LIVE_TAG, key)
    return MLFlowLogger(experiment_name=experiment_name(), tracking_uri=uri, run_name=run.name,
                        tags={LIVE_TAG: key, LIVE_PROCESS_TAG: this_process()})
