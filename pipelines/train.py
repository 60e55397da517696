"""Stage `train`: the one-layer model trained with Lightning from the one_step stage's initialisation.

train.embeddings chooses what E does: `trained` (E, p, v jointly), `untrained` (E frozen at E0, its random
init) or `one_step` (E frozen at E1). dvc.yaml runs all three on every dataset (train@<dataset>-<choice>).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from toksel.cli import run_stage, show_progress
from toksel.config import Config, params_hash
from toksel.data.token_table import class_alphas, num_classes, occurring, read_token_table
from toksel.io import file_digest, read_npz, write_csv
from toksel.paths import processed_dir, results_dir
from toksel.plots import binned_scores_figure, save_figure
from toksel.theory.token_curves import token_curves
from toksel.tracking import StageRun
from toksel.training.classifier import AttentionClassifier
from toksel.training.data import PackedDataModule
from toksel.training.fit import fit

SECTIONS = ("base", "train")
DTYPES = {"64-true": torch.float64}


def train(config: Config, run: StageRun) -> None:
    settings, dataset = config.train, config.dataset
    variant = f"{dataset}/{settings.embeddings}"
    run.set_tag("embeddings", settings.embeddings)
    run.set_tag("mlflow.runName", f"train {settings.embeddings}")
    tokens = read_token_table(processed_dir(dataset) / "tokens.csv")
    embeddings = read_npz(results_dir("one_step", dataset) / "embeddings.npz", producer="one_step")
    dtype = DTYPES.get(settings.precision, torch.float32)
    start = embeddings["E1"] if settings.embeddings == "one_step" else embeddings["E0"]
    trains_embeddings = settings.embeddings == "trained"
    module = AttentionClassifier(
        torch.tensor(start, dtype=dtype), torch.tensor(embeddings["p0"], dtype=dtype),
        torch.tensor(embeddings["v"], dtype=dtype), torch.tensor(tokens["important"].to_numpy(dtype=bool)),
        train_embeddings=trains_embeddings, optimizer=settings.optimizer,
        lr=settings.lr if trains_embeddings else settings.frozen_lr, weight_decay=settings.weight_decay)
    data = PackedDataModule(processed_dir(dataset), settings.batch_size, settings.val_fraction, config.base.seed,
                            dtype)
    checkpoints = checkpoint_dir(variant)
    # A checkpoint belongs to these parameters and these inputs: anything else starts afresh.
    fingerprint = params_hash(config.sections(SECTIONS)) + file_digest(
        processed_dir(dataset) / "train.npz", results_dir("one_step", dataset) / "embeddings.npz")
    result = fit(module, data, settings, checkpoints, fingerprint, run, config.base.seed, show_progress())

    E, p, v = (parameter.detach().cpu().double().numpy() for parameter in (module.E, module.p, module.v))
    score_p, score_v = E @ p, E @ v
    metrics, curves = token_curves(tokens, score_p, score_v, settings.bins)
    out = results_dir("train", variant)
    # One row per bin; columns centre_<curve>, count_<curve>, mean_<curve>, std_<curve> (curves p, v or v_class_k).
    write_csv(out / "bins.csv", pd.concat([curve.as_frame().add_suffix(f"_{name}") for name, curve in curves.items()],
                                          axis=1))
    figure = binned_scores_figure(_panels(tokens, score_p, score_v, curves),
                                  f"{dataset}, embeddings {settings.embeddings}: after training")
    save_figure(figure, out / "token_scores.png")
    run.log_artifact(out / "token_scores.png", "figures")
    run.log_artifact(out / "bins.csv")
    # best_train_/best_val_ loss and accuracy: the tested (best) model on the whole splits; MLflow also has the
    # per-epoch curves train_loss_epoch, val_loss, ...
    final = {**result.test, **result.fitted, **metrics, "epochs": float(result.epochs), "seconds": result.seconds,
             "resumed_from_epoch": None if result.resumed_from_epoch is None else float(result.resumed_from_epoch)}
    run.record_metrics(out / "metrics.json", final, logged=result.test)
    shutil.rmtree(checkpoints)  # finished: nothing left to resume


def checkpoint_dir(variant: str) -> Path:
    """Lightning's checkpoints of an unfinished run; not a DVC output, so DVC leaves them for a resume."""
    return Path("checkpoints") / variant


def _panels(tokens: pd.DataFrame, score_p: np.ndarray, score_v: np.ndarray, curves: dict) -> list:
    """Figure panels: E_s^T p over the posterior difference, then E_s^T v (each v_k over alpha_s^(k))."""
    present = occurring(tokens)
    x = tokens["posterior_difference"].to_numpy()[present]
    panels = [(x, score_p[present], curves["p"].as_frame(), "posterior difference", "$E_s^T p$")]
    if num_classes(tokens) == 2:
        return [*panels, (x, score_v[present], curves["v"].as_frame(), "posterior difference", "$E_s^T v$")]
    alphas = class_alphas(tokens)[:, present]
    return [*panels, *((alphas[k], score_v[present, k], curves[f"v_class_{k}"].as_frame(),
                        rf"$\alpha_s^{{({k})}}$", f"$E_s^T v_{{{k}}}$") for k in range(len(alphas)))]


def main(argv: list[str] | None = None) -> int:
    return run_stage("train", SECTIONS, train, argv)


if __name__ == "__main__":
    sys.exit(main())
