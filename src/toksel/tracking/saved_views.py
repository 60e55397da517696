"""The runs table's saved views, one per kind of run, with the columns that tell its runs apart.

MLflow (3.15 and later) keeps a saved view as an experiment tag `mlflow.sharedViewState.<id>` holding its name and
state (a search on the `stage` tag, the columns, the charts' x axis); `#/experiments/<id>/runs?viewStateShareKey=<id>`
opens one.
"""

from __future__ import annotations

import json
import time
from typing import Any

TAG_PREFIX = "mlflow.sharedViewState."
PIPELINES_VIEW = "toksel-pipelines"
# The charts' x axis: the step every history is logged against (a flow's 100 log10 t, an epoch), whatever axis the
# browser last chose. MLflow's time axes would draw a curve the stage logged at once as one vertical line.
LINE_CHARTS = {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""}
VERDICTS = ("claims_held", "claims_failed", "claims_inconclusive", "ours_held", "ours_failed", "ours_inconclusive")

# id -> (name, stage, params, metrics): the key values and numbers of a kind of run, as its runs carry them.
KINDS: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "toksel-one-step": ("toksel: one step (Lemma 4.1)", "one_step", ("model.d", "one_step.eta0", "seed"),
                        ("pearson_r", "slope_rel_error", "orthogonal_ratio")),
    "toksel-gradient-flow": ("toksel: gradient flow (Lemmas 4.2, 4.4, Theorem 4.3)", "gradient_flow",
                             ("model.d", "one_step.eta0", "gradient_flow.horizon", "seed"),
                             ("loss", "p_norm", "selection_fraction", "log_growth", "flow_faithful", "steps")),
    "toksel-evaluate": ("toksel: claims per dataset", "evaluate", ("model.d", "one_step.eta0"),
                        ("claims_held", "claims_total")),
    "toksel-training": ("toksel: training arms and their trials", "train", ("arm", "seed", "labels", "train.lr"),
                        ("lr", "test_accuracy", "best_val_loss", "best_epoch", "stopped_epoch", "budget_bound")),
}


def _column(kind: str, name: str) -> str:
    return f"{kind}.`{name}`"


def _view(name: str, stage: str, columns: list[str], grouped_by: str | None = None) -> str:
    """A view of the runs of `stage`, grouped by the tag `grouped_by` if given (else folded under their parents)."""
    state = {"searchFilter": f"tags.stage = '{stage}'", "orderByKey": "attributes.start_time", "orderByAsc": False,
             "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
             "selectedColumns": [_column("tags", "dataset"), *columns], "runsHiddenMode": "SHOW_ALL",
             "globalLineChartConfig": LINE_CHARTS}
    if grouped_by:
        state["groupBy"] = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": grouped_by}]}
        state["groupsExpanded"] = {}
    now = int(time.time() * 1000)
    return json.dumps({"name": name, "createdAt": now, "updatedAt": now, "state": json.dumps(state)})


def save_views(client: Any, experiment_id: str, compared: list[str], pipeline_tag: str) -> None:
    """A view per kind of run, grouped by pipeline run (`pipeline_tag`), and one of the pipelines' parents with the
    values `compared` and the verdict counts."""
    views = {PIPELINES_VIEW: _view("toksel: pipelines, what differs and the verdicts", "pipeline",
                                       [*(_column("params", key) for key in compared),
                                        *(_column("metrics", name) for name in VERDICTS)])}
    for key, (name, stage, shown, numbers) in KINDS.items():
        views[key] = _view(name, stage, [*(_column("params", key) for key in shown),
                                         *(_column("metrics", number) for number in numbers)], pipeline_tag)
    for key, value in views.items():
        client.set_experiment_tag(experiment_id, TAG_PREFIX + key, value)
