"""Stage `train`: the one-layer model trained with Lightning, each embedding arm of train.arms, every training seed.

An arm is what E does (training/arms.py): `trained` (E, p, v jointly), `untrained` (E frozen at E0) or `one_step`
(E frozen at E1). Every arm follows one protocol (training/protocol.py): each rate of train.lr_grid screened for a
few epochs (the grid extended past an edge where the best sits on it), the best on validation trained under the
stopping rule, and train.lr (the matched-lr protocol, the claims'), then its control on shuffled training labels.
The arms share one process (and its data) because they share every input; each is its own MLflow run under its
seed's. Every training seed (the first train.seeds of base.seeds) in one process (train@<dataset>), into
results/train/<dataset>/<arm>/seed<seed>/; their metrics gathered in results/train/<dataset>.json.

Each metrics.json says how its fits ended (stopped_epoch, best_epoch, budget_bound; control_ for the control).
epochs.csv follows the kept and the matched fit epoch by epoch (column `fit`; one fit under both names when
train.lr is the kept rate): lr, train_loss, val_loss, val_accuracy, test_loss, test_accuracy and the spreads of
the token curves then (bin_spread_v, bin_spread_p, bin_std_v, bin_std_p, binned on the held-out statistics as
bins.csv is, and the same prefixed train_binned_, binned on the training split's), for the figure of test
accuracy against epochs; the fits' runs hold the same curves as epoch_<column> against the epoch.
"""

from __future__ import annotations

import sys

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.measurements import curve_settings
from toksel.data.draws import data_dir
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.io import write_csv
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.progress import show_progress
from toksel.runtime.records import RunRecord

SECTIONS = STAGE_SECTIONS["train"]


def train(config: Config, run: RunRecord) -> None:
    # Lightning (and torch) where a fit runs: in each seed's process, not in the one that hands the seeds out, which
    # would import them first (4 to 5 s) while the seeds wait
    from toksel.training.arms import Arms
    from toksel.training.fit import FitPlan, checkpoint_dir, fit_key
    from toksel.training.protocol import Protocol, train_with_control
    from toksel.training.record import TokenReading, record_fit

    settings, dataset, seed = config.train, config.dataset, config.seed
    folder = data_dir(dataset, seed)
    arms = Arms(config, folder, seed, config.model.d)
    tokens = arms.tokens
    # A checkpoint belongs to these parameters and these inputs: anything else starts afresh.
    fingerprint = fit_key({**config.sections(SECTIONS), "seed": seed}, folder / "train.npz")
    reading = TokenReading(tokens, curve_settings(config.train))
    for arm in settings.arms:
        with run.child(f"{arm} seed {seed}", {"embeddings": arm}, {"arm": arm}) as arm_run:
            plan = FitPlan(settings, checkpoint_dir("train", f"{dataset}/{arm}") / f"seed{seed}", fingerprint,
                           arm_run, seed, show_progress())
            trained = train_with_control(Protocol(arms.model(arm), arms.data, plan, reading, per_epoch=True),
                                         settings.lr_grid, matched=settings.lr)
            out = seed_dir(results_dir("train", f"{dataset}/{arm}"), seed)
            write_csv(out / "grid.csv", trained.trials)
            arm_run.log_artifact(out / "grid.csv")
            write_csv(out / "epochs.csv", trained.epoch_log)
            arm_run.log_artifact(out / "epochs.csv")
            record_fit(arm_run, out, trained, reading,
                       f"{dataset}, embeddings {arm}, seed {seed} (lr {trained.metrics['lr']:g}): after training",
                       {"stage": "train", "model": "one_layer", "dataset": dataset, "embeddings": arm, "seed": seed,
                        "lr": trained.metrics["lr"], "num_classes": tokens.num_classes})


def main(argv: list[str] | None = None) -> int:
    return run_stage("train", SECTIONS, train, argv, every_seed=lambda config: results_dir("train", config.dataset),
                     seeds=lambda config: config.training_seeds)


if __name__ == "__main__":
    sys.exit(main())
