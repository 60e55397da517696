"""Stage `compare`: the three embedding arms of one training dataset side by side, over every seed: the training
claims (accuracy gap, spread ratios, the shapes of E_s^T v and E_s^T p, the 4-class curves) with their
controls, and the protocol-dependent ones again under the other protocols (claims.json, judged in summary.md).

dvc.yaml runs it for each of train.datasets (compare@<dataset>), after every seed of every arm.
"""

from __future__ import annotations

import sys

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.catalogue import BY_ID, assess, claim_metrics, verdict_counts
from toksel.claims.measurements import dataset_measurements, dataset_runs, mean_over_seeds
from toksel.params import EMBEDDINGS, Config
from toksel.runtime.cli import run_stage
from toksel.runtime.io import write_json
from toksel.runtime.paths import results_dir
from toksel.runtime.records import RunRecord
from toksel.summaries.claims import PROTOCOL_NOTE, Row, claims_table, publish_summary
from toksel.summaries.comparison import training_comparison
from toksel.summaries.markdown import number

SECTIONS = STAGE_SECTIONS["compare"]


def compare(config: Config, run: RunRecord) -> None:
    dataset = config.dataset
    kept = dataset_runs(dataset, config, arms=True)  # the claims' protocol: each arm at its rate, converged
    accuracy = (f"test accuracy {number(mean_over_seeds(kept, 'trained', 'test_accuracy'))} against "
                f"{number(mean_over_seeds(kept, 'untrained', 'test_accuracy'))}")
    details = {"accuracy_gap": accuracy, "accuracy_gap_size": accuracy}
    measurements = dataset_measurements(dataset, config, "compare", details)
    out = results_dir("compare", dataset)
    write_json(out / "claims.json", [measurement.as_record() for measurement in measurements])  # the report reads it
    assessed = [assess(BY_ID[item.claim], item, config) for item in measurements]
    own = [Row(item, dataset, "compare") for item in assessed if not item.measurement.protocol]
    others = [Row(item, f"{dataset}, {item.measurement.protocol}", "compare") for item in assessed
              if item.measurement.protocol]
    arms = {arm: [kept[seed].get(arm, {}) for seed in config.training_seeds] for arm in EMBEDDINGS}
    summary = "\n".join([
        f"# {dataset}: the embedding arms over seeds {', '.join(map(str, config.training_seeds))}", "",
        *claims_table(own), "", "## Under other protocols", "", PROTOCOL_NOTE, "", *claims_table(others), "",
        "## The arms side by side (mean +- std over the seeds)", "", training_comparison(arms)]) + "\n"
    publish_summary(run, out, summary, claim_metrics(assessed), verdict_counts(assessed))


def main(argv: list[str] | None = None) -> int:
    return run_stage("compare", SECTIONS, compare, argv)


if __name__ == "__main__":
    sys.exit(main())
