"""Stage `ablation_report`: the model variants side by side, and our binned curves against the rebuttal's tables.

Reads the ablation runs of every dataset in ablation.datasets and, for the 4-class tables, the trained
one-layer model of ablation.multiclass (train@<it>-trained) with its one-step slopes per class. Writes
results/ablation_report/: summary.md, comparison.csv (one row per table and run), metrics.json and
rebuttal_tables.png (every table with our curves, each standardised).
"""

from __future__ import annotations

import sys

import pandas as pd

from toksel.cli import run_stage
from toksel.comparison import variants_comparison
from toksel.config import Config
from toksel.io import read_json, require_output, write_csv, write_text
from toksel.paths import results_dir
from toksel.plots import rebuttal_figure, save_figure
from toksel.rebuttal import compare_with_tables
from toksel.tracking import StageRun

SECTIONS = ("ablation",)
OUT = results_dir("ablation_report", "")


def _run(stage: str, run_name: str) -> tuple[dict, pd.DataFrame]:
    folder = results_dir(stage, run_name)
    metrics = read_json(require_output(folder / "metrics.json", producer=stage))
    return metrics, pd.read_csv(require_output(folder / "bins.csv", producer=stage))


def ablation_report(config: Config, run: StageRun) -> None:
    settings = config.ablation
    runs = {(dataset, variant): _run("ablation", f"{dataset}/{variant}")
            for dataset in settings.datasets for variant in settings.variants}
    multiclass = _run("train", f"{settings.multiclass}/trained")
    one_step = read_json(require_output(results_dir("one_step", settings.multiclass) / "metrics.json", "one_step"))

    bins_by_run = {(dataset, variant): bins for (dataset, variant), (_, bins) in runs.items()}
    bins_by_run[settings.multiclass, "multiclass"] = multiclass[1]
    comparison, curves = compare_with_tables(bins_by_run, settings.min_spearman)
    write_csv(OUT / "comparison.csv", comparison)
    save_figure(rebuttal_figure(curves), OUT / "rebuttal_tables.png")
    run.log_artifact(OUT / "rebuttal_tables.png", "figures")
    write_text(OUT / "summary.md", _summary(config, runs, comparison, one_step))
    run.log_artifact(OUT / "summary.md")
    metrics = {f"spearman_{row.table}_{row.dataset}": row.spearman for row in comparison.itertuples()}
    metrics |= {f"min_x_{row.table}_{row.dataset}": row.our_min_x for row in comparison.itertuples()
                if row.table.endswith("_p")}
    metrics |= {f"accuracy_{variant}_{dataset}": run_metrics["test_accuracy"]
                for (dataset, variant), (run_metrics, _) in runs.items()}
    metrics |= {"tables_agreeing": float(comparison["agrees"].sum()), "tables_compared": float(len(comparison))}
    run.record_metrics(OUT / "metrics.json", metrics)


def _summary(config: Config, runs: dict, comparison: pd.DataFrame, one_step: dict) -> str:
    settings, scale = config.ablation, config.sequence.profile
    parts = [f"# Architecture ablations (sequence.scale {config.sequence.scale}: d {scale.d}, first "
             f"{scale.max_len or 'all'} tokens, up to {scale.max_train or 'all'} training reviews)", ""]
    for dataset in settings.datasets:
        parts += [f"## {dataset}", "", variants_comparison({variant: runs[dataset, variant][0]
                                                            for variant in settings.variants}), ""]
    parts += ["## Against the rebuttal's tables", "",
              "Spearman of our bin means, read at the table's x (each axis over its largest \\|x\\|; only the "
              "table's bins inside the range of ours), with the table's; the x of the lowest bin (ours, theirs). "
              f"A curve agrees when Spearman >= {settings.min_spearman}.", "",
              "| table | run | Spearman | bins compared | lowest bin x: ours / theirs | agrees |",
              "|---|---|---|---|---|---|"]
    for row in comparison.itertuples():
        parts.append(f"| {row.title} | {row.dataset} {row.model} | {row.spearman:.3f} | {row.bins_compared} | "
                     f"{row.our_min_x:.3f} / {row.their_min_x:.3f} | {'yes' if row.agrees else 'no'} |")
    classes = sorted(int(key.rsplit("_", 1)[1]) for key in one_step if key.startswith("slope_class_"))
    if not classes:
        return "\n".join([*parts, "", f"{settings.multiclass} has two classes: no multi-class comparison."]) + "\n"
    parts += ["", f"## One step on {settings.multiclass} ({len(classes)} classes): the rebuttal's formula per class",
              "", f"Theory: slope eta0 = {one_step['slope_theory']:.4g} for every class.", "",
              "| class | slope | Pearson r |", "|---|---|---|"]
    parts += [f"| {k} | {one_step[f'slope_class_{k}']:.4g} | {one_step[f'pearson_r_class_{k}']:.5f} |"
              for k in classes]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    return run_stage("ablation_report", SECTIONS, ablation_report, argv)


if __name__ == "__main__":
    sys.exit(main())
