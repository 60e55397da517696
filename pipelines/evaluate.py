"""Stage `evaluate`: figures, the theory checks against their thresholds, and a Markdown summary."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from toksel.checks import summary_markdown, theory_checks
from toksel.cli import run_stage
from toksel.comparison import training_comparison
from toksel.config import EMBEDDINGS, Config
from toksel.data.token_table import importance, num_classes, occurring, read_token_table
from toksel.io import read_json, read_npz, require_output, write_csv, write_json, write_text
from toksel.paths import processed_dir, results_dir
from toksel.plots import (
    gradient_flow_figure,
    multiclass_one_step_figure,
    multiclass_token_scores_figure,
    one_step_figure,
    save_figure,
    token_scores_figure,
)
from toksel.tracking import StageRun

SECTIONS = ("data", "one_step", "evaluate")


def _metrics(stage: str, dataset: str) -> dict:
    return read_json(require_output(results_dir(stage, dataset) / "metrics.json", producer=stage))


def top_tokens(scores: pd.DataFrame, num_classes: int, count: int = 12) -> dict[str, list[str]]:
    """The words with the largest E_s^T p_T, and the largest and smallest E_s^T v (per class for K > 2)."""
    words = scores.set_index("word")
    top = {"top by E_s^T p": words["score_p"].nlargest(count).index.tolist()}
    if num_classes == 2:
        top["top by E_s^T v"] = words["score_v"].nlargest(count).index.tolist()
        top["bottom by E_s^T v"] = words["score_v"].nsmallest(count).index.tolist()
    for k in range(num_classes if num_classes > 2 else 0):
        top[f"top by E_s^T v_{k}"] = words[f"score_v_class_{k}"].nlargest(count).index.tolist()
    return top


def token_scores(tokens: pd.DataFrame, embeddings: dict, p_final: np.ndarray, num_classes: int) -> pd.DataFrame:
    """Per token: its statistics, the one-step update along v (each v_k), E1^T v (E1^T v_k) and E1^T p_T."""
    E0, E1, v = embeddings["E0"], embeddings["E1"], embeddings["v"]
    if num_classes == 2:
        return tokens[["token", "word", "token_type", "alpha", "posterior_difference"]].assign(
            update_v=(E1 - E0) @ v, score_v=E1 @ v, score_p=E1 @ p_final)
    updates, values = (E1 - E0) @ v, E1 @ v
    columns = {"importance": importance(tokens), "posterior_difference": tokens["posterior_difference"],
               "score_p": E1 @ p_final}
    for k in range(num_classes):
        columns |= {f"alpha_class_{k}": tokens[f"alpha_class_{k}"], f"update_v_class_{k}": updates[:, k],
                    f"score_v_class_{k}": values[:, k]}
    return tokens[["token", "word"]].assign(**columns)


def one_step_notes(one_step: dict, num_classes: int) -> list[str]:
    if num_classes == 2:
        return []
    per_class = ", ".join(f"class {k}: slope {one_step[f'slope_class_{k}']:.4g}, "
                          f"r {one_step[f'pearson_r_class_{k}']:.5f}" for k in range(num_classes))
    return [f"One step, K = {num_classes} classes, along each v_k against the class-k signed frequency (theory "
            f"slope eta0 = {one_step['slope_theory']:.4g}): {per_class}."]


def _number(value: float | None, spec: str) -> str:
    return "not computed" if value is None else format(value, spec)


def evaluate(config: Config, run: StageRun) -> None:
    dataset = config.dataset
    tokens = read_token_table(processed_dir(dataset) / "tokens.csv")
    embeddings = read_npz(results_dir("one_step", dataset) / "embeddings.npz", producer="one_step")
    trajectory = read_npz(results_dir("gradient_flow", dataset) / "trajectory.npz", producer="gradient_flow")
    history = pd.read_csv(require_output(results_dir("gradient_flow", dataset) / "history.csv", "gradient_flow"))
    prepare, one_step, gradient_flow = (_metrics(stage, dataset) for stage in ("prepare", "one_step", "gradient_flow"))

    classes = num_classes(tokens)
    present = token_scores(tokens, embeddings, trajectory["p"][-1], classes)[occurring(tokens)]

    out = results_dir("evaluate", dataset)
    write_csv(out / "token_scores.csv", present)
    title = f"{dataset}: E1 after one step, p after gradient flow"
    if classes == 2:
        figures = {
            "token_scores.png": token_scores_figure(present, title),
            "one_step.png": one_step_figure(present["alpha"].to_numpy(), present["update_v"].to_numpy(),
                                            present["token_type"].to_numpy(), one_step["slope_theory"],
                                            one_step["slope"]),
        }
    else:
        figures = {
            "token_scores.png": multiclass_token_scores_figure(present, classes, title),
            "one_step.png": multiclass_one_step_figure(
                present.filter(regex="^alpha_class_").to_numpy().T, present.filter(like="update_v_class_").to_numpy().T,
                one_step["slope_theory"], [one_step[f"slope_class_{k}"] for k in range(classes)]),
        }
    figures["gradient_flow.png"] = gradient_flow_figure(history, gradient_flow.get("max_margin_norm") or float("nan"))
    for name, figure in figures.items():
        save_figure(figure, out / name)
        run.log_artifact(out / name, "figures")

    synthetic = config.data.source == "synthetic"
    # Lemma 4.4 and Theorem 4.3 assume Assumption 1, which the independent generator does not meet.
    assumption1 = synthetic and config.data.synthetic.mode == "assumption1"
    checks = theory_checks(one_step, gradient_flow, config.evaluate, synthetic=assumption1, num_classes=classes)
    write_json(out / "checks.json", [check.as_record() for check in checks])  # what the report reads
    notes = [f"E_s^T p_T: {_number(gradient_flow.get('score_p_important'), '.4g')} on average over the important "
             f"tokens, {_number(gradient_flow.get('score_p_least_important'), '.4g')} over the least important "
             f"tenth, after {_number(gradient_flow.get('steps'), '.0f')} steps (loss "
             f"{_number(gradient_flow.get('loss'), '.4g')}, |p_T| = {_number(gradient_flow.get('p_norm'), '.4g')})."]
    if synthetic:
        notes += [
            f"Assumption 1 (needed by Lemma 4.4 and Theorem 4.3) holds for "
            f"{_number(prepare.get('assumption1_fraction'), '.1%')} of the training sequences.",
            f"Sequences with at least one important token selected: "
            f"{_number(gradient_flow.get('selection_any_fraction'), '.1%')} (the claim beyond Assumption 1).",
            f"Margin ratio (normalised margin x |p_mm|, 1 at the max-margin direction): "
            f"{_number(gradient_flow.get('margin_ratio'), '.4g')}.",
        ]
    notes += one_step_notes(one_step, classes)
    top = top_tokens(present, classes)
    write_json(out / "top_tokens.json", top)
    run.log_artifact(out / "top_tokens.json")
    notes += [f"{label}: {', '.join(words)}" for label, words in top.items()]
    # Optional when a stage is run by hand (dvc.yaml lists them as dependencies): a missing run reads "not run".
    trained = {variant: read_json(path) if (path := results_dir("train", f"{dataset}/{variant}") / "metrics.json")
               .exists() else {} for variant in EMBEDDINGS}
    comparison, training_metrics = training_comparison(trained)
    summary = summary_markdown(checks, f"toksel theory checks: {dataset}", list(figures), notes,
                               sections={"Full training (Lightning) next to the paper": comparison})
    write_text(out / "summary.md", summary)
    run.log_artifact(out / "summary.md")
    metrics: dict[str, float | None] = {}
    for check in checks:
        metrics.update(check.as_metrics())
    metrics["checks_held"] = float(sum(check.holds for check in checks))
    metrics["checks_total"] = float(len(checks))
    metrics.update(training_metrics)
    run.record_metrics(out / "metrics.json", metrics)
    print(summary.split("\n\n![")[0])


def main(argv: list[str] | None = None) -> int:
    return run_stage("evaluate", SECTIONS, evaluate, argv)


if __name__ == "__main__":
    sys.exit(main())
