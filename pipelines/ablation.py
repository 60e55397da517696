"""Stage `ablation`: a model with positions (models/sequence.py) trained end to end with Lightning, every seed.

sequence.variant chooses the model: one_layer, mlp, mlp_residual, two_layer (paper Fig. 1, parameter-free
residual self-attention) or two_layer_kq (the rebuttal's trained W_KQ). sequence.scale picks the size profile:
`cpu` (minutes here) or `paper` (d 2048, whole reviews, all data: for a GPU). E, p and v start from a Gaussian
initialisation drawn from the run's seed. The run and its control on shuffled labels follow the protocol of
training/protocol.py at train.lr. dvc.yaml runs every variant on each dataset of ablation.datasets
(ablation@<dataset>-<variant>), every seed of base.seeds in one process, into
results/ablation/<dataset>/<variant>/seed<seed>/; their metrics gathered in results/ablation/<dataset>/<variant>.json.

Stage `pair` is the same training (pipelines/pair.py) on the pair datasets (pair.dataset and pair.control, each
variant of pair.variants), into results/pair/; there each fit also records its accuracy on the test sequences
that carry a pair (`pair_accuracy`; the shuffled-label control's is control_pair_accuracy), which the pair claims
read.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import TYPE_CHECKING

from pipelines.sections import STAGE_SECTIONS
from toksel.claims.measurements import curve_settings
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.synthetic import pair_rows, vocabulary
from toksel.data.token_table import read_token_table
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.progress import show_progress
from toksel.runtime.records import RunRecord

if TYPE_CHECKING:
    from toksel.training.sequence_classifier import SequenceModule
    from toksel.training.sequence_data import SequenceDataModule

SCORE_LABELS = {"two_layer_kq": "$p^T W_{KQ}^{(2)} E_s$"}  # the rebuttal's plotted score with a trained W_KQ^(2)


def pair_accuracy(config: Config, module: SequenceModule) -> dict[str, float]:
    """On a pair dataset: the accuracy on the test sequences that carry a pair, and how many there are."""
    from toksel.training.sequence_classifier import accuracy_on

    synthetic = config.data.synthetic
    vocab = vocabulary(synthetic.mode, synthetic.n_positive, synthetic.n_negative, synthetic.n_irrelevant)
    test = PackedSplit.load(data_dir(config.dataset, config.seed) / "test.npz")
    rows = pair_rows(test, vocab)
    return {"pair_accuracy": accuracy_on(module, test, rows, config.sequence.profile.max_len,
                                         config.sequence.batch_size),
            "pair_test_rows": float(len(rows))}


def ablation(config: Config, run: RunRecord, stage: str = "ablation") -> None:
    # torch and Lightning where a fit runs: in each seed's process, not in the one that hands the seeds out
    import torch

    from toksel.models.initial import initialise
    from toksel.models.sequence import LAYOUTS, SequenceClassifier
    from toksel.training.fit import FitPlan, checkpoint_dir, fit_key, parameter_dtype
    from toksel.training.protocol import Protocol, train_with_control
    from toksel.training.record import TokenReading, record_fit
    from toksel.training.sequence_classifier import SequenceModule
    from toksel.training.sequence_data import SequenceDataModule

    settings, training, dataset, seed = config.sequence, config.train, config.dataset, config.seed
    scale, variant = settings.profile, f"{dataset}/{settings.variant}"
    run.set_tag("variant", settings.variant)
    folder = data_dir(dataset, seed)
    tokens = read_token_table(folder / "tokens.csv")
    dtype = parameter_dtype(training.precision)

    def model(lr: float, shuffled: bool) -> SequenceModule:
        init = initialise(len(tokens), scale.d, seed, dtype, tokens.num_classes)
        return SequenceModule(SequenceClassifier(init.E, init.p, init.v, **LAYOUTS[settings.variant], seed=seed),
                              torch.tensor(tokens.important), training.optimizer, lr,
                              training.weight_decay)

    def data(shuffled: bool) -> SequenceDataModule:
        return SequenceDataModule(folder, settings.batch_size, training.val_fraction, seed,
                                  settings.bucketed, scale.max_len, scale.max_train, scale.max_test,
                                  label_seed=(config.base.data_seed, seed) if shuffled else None)

    rows = data(False)
    fingerprint = fit_key({**config.sections(STAGE_SECTIONS[stage]), "seed": seed}, folder / "train.npz")
    reading = TokenReading(tokens, curve_settings(config.train), rows.trained_tokens())
    plan = FitPlan(training, checkpoint_dir(stage, variant) / f"seed{seed}", fingerprint, run, seed,
                   show_progress())
    # On a pair dataset every fit, the shuffled-label control's too, is read on the pair sequences as well.
    extra = functools.partial(pair_accuracy, config) if stage == "pair" else None
    trained = train_with_control(Protocol(model, data, plan, reading, extra=extra), [training.lr])
    size = {"d": float(scale.d), "train_rows": float(len(rows.rows("train")[1])),
            "test_rows": float(len(rows.rows("test")[1])), "padding_fraction": rows.training_batches_padding()}
    record_fit(run, seed_dir(results_dir(stage, variant), seed),
               dataclasses.replace(trained, metrics={**trained.metrics, **size}), reading,
               f"{dataset}, {settings.variant} (d {scale.d}, first {scale.max_len or 'all'} tokens), seed {seed}: "
               "after training",
               {"stage": stage, "model": settings.variant, "dataset": dataset, "seed": seed, "lr": training.lr,
                "d": scale.d, "num_classes": tokens.num_classes},
               score_label=SCORE_LABELS.get(settings.variant, "$E_s^T p$"))


def main(argv: list[str] | None = None, stage: str = "ablation") -> int:
    return run_stage(stage, STAGE_SECTIONS[stage], functools.partial(ablation, stage=stage), argv,
                     every_seed=lambda config: results_dir(stage, f"{config.dataset}/{config.sequence.variant}"),
                     seeds=lambda config: config.training_seeds, variant=lambda config: config.sequence.variant)


if __name__ == "__main__":
    sys.exit(main())
