"""Stage `one_step`: E0, p0 ~ N(0, I/d), v a unit vector (K orthonormal v_k for K > 2 classes), drawn from the
run's seed; one full-batch GD step on E (Lemma 4.1; the rebuttal's formula for K classes), and its control, the
same step on labels that carry no signal (shuffled, seeded by base.data_seed and the run's seed), regressed on
the true alpha_s; on a pair dataset, how far the step moved the pair's tokens along v (pair_alignment). Every seed
of base.seeds in one process (one_step@<dataset>), each into results/one_step/<dataset>/seed<seed>/ (E0, E1, p0,
v and the control's update in factored form); their metrics gathered in results/one_step/<dataset>.json."""

from __future__ import annotations

import math
import sys

import numpy as np

from pipelines.sections import STAGE_SECTIONS
from toksel.data.corpus import PackedSplit
from toksel.data.draws import data_dir
from toksel.data.synthetic import PAIR_LABELS, vocabulary
from toksel.data.token_table import read_token_table
from toksel.params import Config
from toksel.runtime.cli import run_stage
from toksel.runtime.errors import ToksError
from toksel.runtime.io import write_npz
from toksel.runtime.paths import results_dir, seed_dir
from toksel.runtime.records import RunRecord
from toksel.theory.one_step import one_step_from_initialisation, pair_alignment, theory_slope

SECTIONS = STAGE_SECTIONS["one_step"]


def one_step(config: Config, run: RunRecord) -> None:
    data = data_dir(config.dataset, config.seed)
    tokens = read_token_table(data / "tokens.csv")
    # An overflow is judged below from the step's numbers, in one line: numpy's warnings would say it first in nine.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        step = one_step_from_initialisation(PackedSplit.load(data / "train.npz"), tokens, config.model.d,
                                            config.seed, config.one_step.eta0,
                                            null_seed=(config.base.data_seed, config.seed))
    overflowed = sorted(name for name, value in step.metrics.items() if value is not None and not math.isfinite(value))
    if overflowed:  # a step so large that its own numbers overflow: not a result
        raise ToksError(f"config error: one_step.eta0 = {config.one_step.eta0:g} is too large: the step's "
                        f"{', '.join(overflowed)} overflow; lower one_step.eta0")
    synthetic = config.data.synthetic
    if config.data.source == "synthetic" and synthetic.mode in PAIR_LABELS:
        vocab = vocabulary(synthetic.mode, synthetic.n_positive, synthetic.n_negative, synthetic.n_irrelevant)
        step.metrics.update(pair_alignment((step.E1 - step.E0) @ step.v, tokens.column("alpha"), vocab.pair_tokens,
                                           np.concatenate([vocab.positive, vocab.negative]),
                                           theory_slope(config.one_step.eta0, 2)))
    out = seed_dir(results_dir("one_step", config.dataset), config.seed)
    write_npz(out / "embeddings.npz", E0=step.E0, E1=step.E1, p0=step.p0, v=step.v,
              null_along_p=step.null_update.along_p, null_along_v=step.null_update.along_v)
    run.record_metrics(out / "metrics.json", step.metrics)


def main(argv: list[str] | None = None) -> int:
    return run_stage("one_step", SECTIONS, one_step, argv,
                     every_seed=lambda config: results_dir("one_step", config.dataset))


if __name__ == "__main__":
    sys.exit(main())
