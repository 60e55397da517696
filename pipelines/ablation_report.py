"""Stage `ablation_report`: the ablation claims measured over every seed, the model variants side by side, and our
binned curves set against the rebuttal's tables.

Reads the ablation runs of every dataset in ablation.datasets (every seed), the one-layer model's trained arm
of the same datasets (the control of the not-monotone claim) and, for the 4-class tables, the trained arm of
ablation.multiclass with its one-step slopes per class. Writes results/ablation_report/: claims.json (the
measurements the report judges), summary.md, comparison.csv (one row per table, run and seed), metrics.json
and rebuttal_tables.png (every table with our first seed's curves, each standardised).
"""

from __future__ import annotations

import sys

import pandas as pd

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.catalogue import BY_ID, CLAIMS, assess, measure, verdict_counts
from toksel.claims.measurements import ablation_runs
from toksel.claims.rebuttal import compare_with_tables
from toksel.figures.plots import rebuttal_figure, save_figure
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.io import read_json, require_output, write_csv, write_json
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.records import RunRecord
from toksel.summaries import markdown
from toksel.summaries.claims import Row, claims_table, publish_summary
from toksel.summaries.comparison import variants_comparison

SECTIONS = STAGE_SECTIONS["ablation_report"]
OUT = results_dir("ablation_report", "")


def _bins(folder, seed: int) -> pd.DataFrame:
    return pd.read_csv(require_output(seed_dir(folder, seed) / "bins.csv", producer=folder.parts[1]))


def ablation_report(config: Config, run: RunRecord) -> None:
    settings, seeds = config.ablation, config.training_seeds
    runs = {dataset: ablation_runs(dataset, config) for dataset in settings.datasets}
    variants = {(dataset, variant): {seed: runs[dataset][seed][variant] for seed in seeds}
                for dataset in settings.datasets for variant in settings.variants}
    for (dataset, variant), by_seed in variants.items():
        for seed, metrics in by_seed.items():
            if not metrics:
                require_output(seed_dir(results_dir("ablation", f"{dataset}/{variant}"), seed) / "metrics.json",
                               f"ablation@{dataset}-{variant}-{seed}")
    measurements = [measure(claim, dataset, runs[dataset]) for dataset in settings.datasets for claim in CLAIMS
                    if claim.producer == "ablation_report"]
    write_json(OUT / "claims.json", [item.as_record() for item in measurements])

    multiclass = results_dir("train", f"{settings.multiclass}/trained")
    rows, curves = [], []
    for seed in seeds:
        bins_by_run = {(dataset, variant): _bins(results_dir("ablation", f"{dataset}/{variant}"), seed)
                       for dataset, variant in variants}
        bins_by_run[settings.multiclass, "multiclass"] = _bins(multiclass, seed)
        comparison, seed_curves = compare_with_tables(bins_by_run, settings.min_spearman)
        rows.append(comparison.assign(seed=seed))
        curves = curves or seed_curves  # the figure shows the first seed's
    comparison = pd.concat(rows, ignore_index=True)
    write_csv(OUT / "comparison.csv", comparison)
    save_figure(rebuttal_figure(curves), OUT / "rebuttal_tables.png")
    run.log_artifact(OUT / "rebuttal_tables.png")
    one_step = read_json(seed_dir(results_dir("one_step", settings.multiclass), seeds[0]) / "metrics.json",
                         "one_step")
    assessed = [assess(BY_ID[item.claim], item, config) for item in measurements]
    mean = comparison.groupby(["table", "dataset"])["spearman"].mean()
    metrics = {f"spearman_{table}_{dataset}": value for (table, dataset), value in mean.items()}
    metrics |= {f"{item.claim.id}_{item.measurement.data}": item.interval.mean for item in assessed}
    metrics |= {"claims_held": float(sum(item.verdict == "holds" for item in assessed)),
                "claims_total": float(len(assessed))}
    publish_summary(run, OUT, _summary(config, variants, assessed, comparison, one_step), metrics,
                    verdict_counts(assessed))


def _summary(config: Config, variants: dict, assessed: list, comparison: pd.DataFrame, one_step: dict) -> str:
    settings, scale = config.ablation, config.sequence.profile
    parts = [f"# Architecture ablations (sequence.scale {config.sequence.scale}: d {scale.d}, first "
             f"{scale.max_len or 'all'} tokens, up to {scale.max_train or 'all'} training reviews; seeds "
             f"{', '.join(map(str, config.training_seeds))})", "", "## The claims", "",
             *claims_table([Row(item, item.measurement.data, "ablation_report") for item in assessed]), ""]
    for dataset in settings.datasets:
        parts += [f"## {dataset} (mean +- std over the seeds)", "", variants_comparison(
            {variant: list(variants[dataset, variant].values()) for variant in settings.variants}), ""]
    table = comparison.groupby(["title", "dataset", "model"], sort=False).agg(
        spearman=("spearman", "mean"), low=("spearman", "min"), high=("spearman", "max"),
        bins=("bins_compared", "mean"), our_min_x=("our_min_x", "mean"), their_min_x=("their_min_x", "first"))
    parts += ["## Against the rebuttal's tables (described, not judged)", "",
              "Spearman of our bin means, read at the table's x (only the table's bins inside the range of our kept "
              "bins), with the table's, over the seeds; the x of the lowest bin (ours, theirs).", "",
              *markdown.table(["table", "run", "Spearman: mean (min, max)", "bins compared",
                               "lowest bin x: ours / theirs"],
                              [[title, f"{dataset} {model}", f"{row.spearman:.3f} ({row.low:.3f}, {row.high:.3f})",
                                f"{row.bins:.0f}", f"{row.our_min_x:.3f} / {row.their_min_x:.3f}"]
                               for (title, dataset, model), row in table.iterrows()])]
    classes = sorted(int(key.rsplit("_", 1)[1]) for key in one_step if key.startswith("slope_class_"))
    if not classes:
        return "\n".join([*parts, "", f"{settings.multiclass} has two classes: no multi-class comparison."]) + "\n"
    first = config.training_seeds[0]
    parts += ["", f"## One step on {settings.multiclass} ({len(classes)} classes, seed {first}): the "
              "rebuttal's formula per class", "", f"Theory: slope eta0 = {one_step['slope_theory']:.4g} for every "
              "class.", "", *markdown.table(["class", "slope", "Pearson r"],
                                            [[k, f"{one_step[f'slope_class_{k}']:.4g}",
                                              f"{one_step[f'pearson_r_class_{k}']:.5f}"] for k in classes])]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    return run_stage("ablation_report", SECTIONS, ablation_report, argv, per_dataset=False)


if __name__ == "__main__":
    sys.exit(main())
