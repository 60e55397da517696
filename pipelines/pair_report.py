"""Stage `pair_report`: the claims on a label carried by a pair of tokens (ours, docs/results.md), judged over
every seed: the one step on pair.dataset leaves the pair's tokens unaligned, the one-layer model does not get past
its cap of 3/4 on the pair sequences, the MLP head does; each with pair.control (the same generator, the pair
first-order) or the one-layer model as its control. Reads one_step@<both datasets> and pair@<both>-<variant>;
writes results/pair_report/: claims.json (the measurements the report judges), summary.md, metrics.json,
verdicts.json and pair.png."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.catalogue import BY_ID, PAIR_CLAIMS, assess, claim_metrics, measure, verdict_counts
from toksel.claims.measurements import pair_runs
from toksel.data.draws import data_dir
from toksel.data.synthetic import PAIR_CAP, PAIR_WORDS
from toksel.data.token_table import read_token_table
from toksel.figures.plots import pair_figure, save_figure
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.io import read_npz, write_json
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.records import RunRecord
from toksel.summaries.claims import Row, claims_table, publish_summary
from toksel.summaries.markdown import number, table

SECTIONS = STAGE_SECTIONS["pair_report"]
OUT = results_dir("pair_report", "")


def one_step_points(dataset: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """alpha_s, the one step's update along v and which tokens are the pair's, on one seed of a dataset."""
    tokens = read_token_table(data_dir(dataset, seed) / "tokens.csv")
    embeddings = read_npz(seed_dir(results_dir("one_step", dataset), seed) / "embeddings.npz", "one_step")
    update = (embeddings["E1"] - embeddings["E0"]) @ embeddings["v"]
    return tokens.column("alpha"), update, np.isin(tokens.frame["word"].to_numpy(), PAIR_WORDS)


def pair_report(config: Config, run: RunRecord) -> None:
    settings, first = config.pair, config.base.seeds[0]
    runs = pair_runs(config)
    measurements = [measure(claim, settings.dataset, runs) for claim in PAIR_CLAIMS]
    write_json(OUT / "claims.json", [item.as_record() for item in measurements])
    assessed = [assess(BY_ID[item.claim], item, config) for item in measurements]
    accuracy = pd.DataFrame([{"dataset": dataset, "model": variant, "seed": seed,
                              "pair_accuracy": by_name.get(variant + suffix, {}).get("pair_accuracy")}
                             for dataset, suffix in ((settings.dataset, ""), (settings.control, "_control"))
                             for variant in settings.variants for seed, by_name in runs.items()]).dropna()
    figure = pair_figure({dataset: one_step_points(dataset, first) for dataset in (settings.dataset, settings.control)},
                         accuracy, PAIR_CAP, settings.past_cap)
    save_figure(figure, OUT / "pair.png")
    run.log_artifact(OUT / "pair.png")
    means = accuracy.groupby(["dataset", "model"], sort=False)["pair_accuracy"].agg(["mean", "min", "max"])
    summary = "\n".join([
        f"# A label carried by a pair of tokens ({settings.dataset}, control {settings.control}; seeds "
        f"{', '.join(map(str, sorted(runs)))})", "",
        *claims_table([Row(item, settings.dataset, "pair_report") for item in assessed]), "",
        f"Accuracy on the test sequences that carry the pair (the one-layer model's cap: {PAIR_CAP:g}):", "",
        *table(["dataset", "model", "mean", "min", "max"],
               [[dataset, model, number(row["mean"]), number(row["min"]), number(row["max"])]
                for (dataset, model), row in means.iterrows()]), "", "![pair.png](pair.png)"]) + "\n"
    publish_summary(run, OUT, summary, claim_metrics(assessed), verdict_counts(assessed))


def main(argv: list[str] | None = None) -> int:
    return run_stage("pair_report", SECTIONS, pair_report, argv)


if __name__ == "__main__":
    sys.exit(main())
