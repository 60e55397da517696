"""Stage `evaluate`: one dataset's theory claims (Lemmas 4.1, 4.2, 4.4, Theorem 4.3) measured over every seed
(claims.json, judged in summary.md), the figures of its first seed and its top tokens. The training runs'
claims are stage `compare`'s."""

from __future__ import annotations

import sys
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.catalogue import BY_ID, assess, claim_metrics, verdict_counts
from toksel.claims.measurements import dataset_measurements, dataset_runs, mean_over_seeds
from toksel.data.draws import data_dir
from toksel.data.token_table import TokenTable, read_token_table
from toksel.figures.plots import (
    gradient_flow_figure,
    multiclass_one_step_figure,
    multiclass_token_scores_figure,
    one_step_figure,
    save_figure,
    token_scores_figure,
)
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.io import read_json, read_npz, require_output, write_csv, write_json
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.records import RunRecord
from toksel.summaries.claims import Row, claims_table, publish_summary
from toksel.summaries.markdown import number

SECTIONS = STAGE_SECTIONS["evaluate"]
TOP_WORDS = 12  # words listed per score


class Views(NamedTuple):
    scores: pd.DataFrame  # per occurring token: its statistics and scores (token_scores.csv)
    figures: dict[str, Figure]
    top: dict[str, list[str]]  # the words at the top (bottom) of each score


def top_words(scores: pd.DataFrame, column: str, count: int, largest: bool = True) -> list[str]:
    ranked = scores.set_index("word")[column]
    return (ranked.nlargest(count) if largest else ranked.nsmallest(count)).index.tolist()


def binary_views(tokens: TokenTable, embeddings: dict, p_final: np.ndarray, one_step: dict, title: str) -> Views:
    """Two classes: per token alpha_s, its type, the one-step update along v, E1^T v and E1^T p_T; the figures
    colour the tokens by type; the words with the largest E_s^T p_T and the largest and smallest E_s^T v."""
    E0, E1, v = embeddings["E0"], embeddings["E1"], embeddings["v"]
    scores = tokens.frame[["token", "word", "token_type", "alpha", "posterior_difference"]].assign(
        update_v=(E1 - E0) @ v, score_v=E1 @ v, score_p=E1 @ p_final)[tokens.occurring()]
    figures = {"token_scores.png": token_scores_figure(scores, title),
               "one_step.png": one_step_figure(scores["alpha"].to_numpy(), scores["update_v"].to_numpy(),
                                               scores["token_type"].to_numpy(), one_step["slope_theory"],
                                               one_step["slope"])}
    top = {"top by E_s^T p": top_words(scores, "score_p", TOP_WORDS),
           "top by E_s^T v": top_words(scores, "score_v", TOP_WORDS),
           "bottom by E_s^T v": top_words(scores, "score_v", TOP_WORDS, largest=False)}
    return Views(scores, figures, top)


def multiclass_views(tokens: TokenTable, embeddings: dict, p_final: np.ndarray, one_step: dict,
                     title: str) -> Views:
    """K classes: per token its importance, each alpha_s^(k), the update along v_k and E1^T v_k, and E1^T p_T;
    a panel per class; the words with the largest E_s^T p_T and the largest E_s^T v_k of each class."""
    E0, E1, v = embeddings["E0"], embeddings["E1"], embeddings["v"]
    updates, values, alphas = (E1 - E0) @ v, E1 @ v, tokens.per_class("alpha")
    columns = {"importance": tokens.importance(), "posterior_difference": tokens.column("posterior_difference"),
               "score_p": E1 @ p_final}
    for k in range(tokens.num_classes):
        columns |= {f"alpha_class_{k}": alphas[k], f"update_v_class_{k}": updates[:, k],
                    f"score_v_class_{k}": values[:, k]}
    present = tokens.occurring()
    scores = tokens.frame[["token", "word"]].assign(**columns)[present]
    figures = {"token_scores.png": multiclass_token_scores_figure(scores, tokens.num_classes, title),
               "one_step.png": multiclass_one_step_figure(
                   alphas[:, present], updates[present].T, one_step["slope_theory"],
                   [one_step[f"slope_class_{k}"] for k in range(tokens.num_classes)])}
    top = {"top by E_s^T p": top_words(scores, "score_p", TOP_WORDS),
           **{f"top by E_s^T v_{k}": top_words(scores, f"score_v_class_{k}", TOP_WORDS)
              for k in range(tokens.num_classes)}}
    return Views(scores, figures, top)


def details(runs: dict, binary: bool) -> dict[str, str]:
    """A few words of context for some claims' `ours`: the means over the seeds of what the statistic is made of."""
    return {
        "lemma41_slope": f"slope {number(mean_over_seeds(runs, 'step', 'slope' if binary else 'slope_class_0'))}"
                         f" against {number(mean_over_seeds(runs, 'step', 'slope_theory'))}"
                         + ("" if binary else " (class 0)"),
        "lemma42_growth": f"|p_T| {number(mean_over_seeds(runs, 'flow', 'p_norm'))} at flow time "
                          f"{number(mean_over_seeds(runs, 'flow', 'flow_time'))}, "
                          f"+{number(mean_over_seeds(runs, 'flow', 'p_norm_last_doubling'))} over its last doubling",
    }


def evaluate(config: Config, run: RunRecord) -> None:
    dataset, first = config.dataset, config.base.seeds[0]
    tokens = read_token_table(data_dir(dataset, first) / "tokens.csv")  # the draw of the seed the figures show
    step_folder, flow_folder = (seed_dir(results_dir(stage, dataset), first) for stage in ("one_step", "gradient_flow"))
    embeddings = read_npz(step_folder / "embeddings.npz", producer="one_step")
    trajectory = read_npz(flow_folder / "trajectory.npz", producer="gradient_flow")
    history = pd.read_csv(require_output(flow_folder / "history.csv", "gradient_flow"))
    one_step, gradient_flow = (read_json(folder / "metrics.json", stage) for folder, stage in
                               ((step_folder, "one_step"), (flow_folder, "gradient_flow")))

    views = binary_views if tokens.binary else multiclass_views
    present, figures, top = views(tokens, embeddings, trajectory["p"][-1], one_step,
                                  f"{dataset}, seed {first}: E1 after one step, p after gradient flow")
    out = results_dir("evaluate", dataset)
    write_csv(out / "token_scores.csv", present)
    figures["gradient_flow.png"] = gradient_flow_figure(history, gradient_flow.get("max_margin_norm") or float("nan"))
    for name, figure in figures.items():
        save_figure(figure, out / name)
        run.log_artifact(out / name)

    runs = dataset_runs(dataset, config)
    measurements = dataset_measurements(dataset, config, "evaluate", details(runs, tokens.binary))
    write_json(out / "claims.json", [measurement.as_record() for measurement in measurements])  # the report reads it
    assessed = [assess(BY_ID[item.claim], item, config) for item in measurements]
    write_json(out / "top_tokens.json", top)
    run.log_artifact(out / "top_tokens.json")
    notes = [f"E_s^T p_T (seed {first}): {number(gradient_flow.get('score_p_important'))} on average over the "
             f"important tokens, {number(gradient_flow.get('score_p_least_important'))} over the least important "
             f"tenth.", *[f"{label}: {', '.join(words)}" for label, words in top.items()]]
    summary = "\n".join([
        f"# {dataset}: the theory's claims over seeds {', '.join(map(str, config.base.seeds))}", "",
        *claims_table([Row(item, dataset, "evaluate") for item in assessed]), "",
        *[f"- {note}" for note in notes], "", *[f"![{name}]({name})" for name in figures]]) + "\n"
    publish_summary(run, out, summary, claim_metrics(assessed), verdict_counts(assessed))


def main(argv: list[str] | None = None) -> int:
    return run_stage("evaluate", SECTIONS, evaluate, argv)


if __name__ == "__main__":
    sys.exit(main())
