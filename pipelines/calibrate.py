"""Stage `calibrate`: every claim family's verdict rule on known answers (toksel.calibration): its power at the
paper's size, how often it holds at half of it, and its false-positive rate on a realistic null, each with its
95 % interval. The theory's families run on small synthetic data (calibration.synthetic), the training families
on each dataset their claims are judged on (its own token statistics; the seed-to-seed spread of its runs for
the accuracy gap). Writes results/calibration/: calibration.json, metrics.json and rates.png; the report renders
calibration.json as its table (this stage renders nothing, so editing how the report looks never reruns it).
"""

from __future__ import annotations

import statistics
import sys

from tqdm import tqdm

from pipelines.sections import STAGE_SECTIONS
from toksel.calibration.curves import TokenPopulation
from toksel.calibration.families import FAMILIES, DataAnswers, row, theory_answers, uncalibrated_rows
from toksel.claims.catalogue import BY_ID, in_scope
from toksel.claims.measurements import MATCHED, grid_runs
from toksel.data.draws import data_dir
from toksel.data.token_table import read_token_table
from toksel.report.plots import calibration_figure, save_figure
from toksel.runtime.cli import run_stage
from toksel.runtime.config import Config, load_config
from toksel.runtime.io import write_json
from toksel.runtime.paths import results_dir
from toksel.runtime.progress import show_progress
from toksel.runtime.records import RunRecord

SECTIONS = STAGE_SECTIONS["calibrate"]
OUT = results_dir("calibration", "")


def judged_on(family_claims: list[str], config: Config) -> list[str]:
    """The datasets any of the claims is measured on."""
    data = {name: load_config([f"dataset={name}"]).data for name in config.datasets}
    return [name for name in config.datasets
            if any(in_scope(BY_ID[claim], name, data[name], config) for claim in family_claims)]


def accuracy_spread(dataset: str, config: Config) -> float | None:
    """The seed-to-seed standard deviation of test accuracy in the dataset's runs under the claims' protocol,
    pooled over the trained and untrained arms; None before the train stage has run on it."""
    runs = grid_runs(dataset, config, MATCHED)
    arms = [[seed[arm]["test_accuracy"] for seed in runs.values() if arm in seed] for arm in ("trained", "untrained")]
    if any(len(values) < 2 for values in arms):
        return None
    return statistics.fmean(statistics.variance(values) for values in arms) ** 0.5


def calibrate(config: Config, run: RunRecord) -> None:
    rows = []
    with tqdm(total=config.calibration.replicates, desc="calibration: the theory's replicates",
              disable=not show_progress()) as bar:
        theory = theory_answers(config, len(config.base.seeds), bar.update)
    for family in (family for family in FAMILIES if family.source == "theory"):
        rows.append(row(family, "calibration.synthetic", theory[family.name], config))
    answers: dict[str, DataAnswers] = {}
    for family in (family for family in FAMILIES if family.source != "theory"):
        claims = [claim.id for claim in BY_ID.values() if claim.family == family.name]
        datasets = judged_on(claims, config)
        if not datasets:
            rows.append(row(family, "-", None, config, "none of its datasets is in this pipeline"))
        for dataset in datasets:
            if dataset not in answers:
                tokens = read_token_table(data_dir(dataset, config.training_seeds[0]) / "tokens.csv")
                population = TokenPopulation.of(tokens, config.train.heldout_min_count)
                answers[dataset] = DataAnswers(population, accuracy_spread(dataset, config), config,
                                               len(config.training_seeds), salt=len(answers) + 1)
            drawn = answers[dataset]
            if family.source == "accuracy" and drawn.accuracy_spread is None:
                rows.append(row(family, dataset, None, config, f"the train stage has not run on {dataset}"))
                continue
            rows.append(row(family, dataset, drawn.replicates(family), config))
    rows += uncalibrated_rows()
    write_json(OUT / "calibration.json", rows)
    save_figure(calibration_figure(rows), OUT / "rates.png")
    run.log_artifact(OUT / "rates.png")
    run.log_artifact(OUT / "calibration.json")
    metrics = {f"{item['family']}_{item['data']}_{condition}": item[condition]["rate"] for item in rows
               for condition in ("power", "half", "null") if condition in item}
    judged = [item for item in rows if "power" in item]
    metrics |= {"families_calibrated": float(sum(item["calibrated"] for item in judged)),
                "families_measured": float(len(judged))}
    run.record_metrics(OUT / "metrics.json", metrics)


def main(argv: list[str] | None = None) -> int:
    return run_stage("calibrate", SECTIONS, calibrate, argv, per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
