"""Known answers for the pair claims (claims/catalogue.py, PAIR_CLAIMS) on the pair dataset's own generator.

- The one step (pair_alignment): fresh draws of the pair generator at the dataset's sizes, in which some of the
  quadruples are labelled the first-order way ({not, good} positive, {not, bad} negative), so that good and bad
  carry a planted first-order signal; the rung is the alignment that signal gives them in the statistic's own unit
  (eta0/2 times the first-order tokens' tenth percentile of |alpha_s|): 0 is the pair's own case, 1 as much as the
  weakest tenth of the first-order tokens. A quadruple moves alpha_good by 2 / (n T), so the rungs are met to
  within one quadruple's step. The update along v is exact from a draw of the initialisation's projections
  (theory/one_step.py), as for Lemma 4.1's known answers.
- The accuracy on the pair sequences (pair_cap, pair_past_cap): planted models, each seed's accuracy drawn around
  the rung with the seed-to-seed spread of the pair stage's runs, then counted over the dataset's own number of
  test pair sequences (a binomial draw).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.data.frequency import average_signed_frequency
from toksel.data.synthetic import PAIR_LABELS, generate_pair, require_draw_memory, vocabulary
from toksel.models.fused import FusedBags
from toksel.params import SyntheticConfig
from toksel.theory.one_step import pair_alignment, projected_initialisation, theory_slope, update_along_outputs


@dataclass(frozen=True)
class PairRegime:
    """What the pair claims' known answers need: the generator, d, eta0, the seeds of a verdict, and for the
    accuracies the number of test pair sequences and the seed-to-seed spread of the runs."""

    synthetic: SyntheticConfig
    d: int
    eta0: float
    seeds: int
    salt: int
    test_rows: int = 0
    spread: float = 0.0


def planted_quadruples(alpha_unit: float, planted: float, n: int, seq_len: int) -> int:
    """How many quadruples labelled the first-order way give good an alignment of `planted` in the statistic's
    unit (alpha_unit: the first-order tokens' tenth percentile of |alpha_s|): each moves alpha_good by 2 / (n T)."""
    return round(planted * alpha_unit * n * seq_len / 2)


def pair_step_statistics(regime: PairRegime, planted: float, replicate: int) -> list[dict[str, float]]:
    """One verdict's seeds: pair_alignment after one step on a fresh draw with the planted first-order signal."""
    synthetic = regime.synthetic
    vocab = vocabulary(synthetic.mode, synthetic.n_positive, synthetic.n_negative, synthetic.n_irrelevant)
    require_draw_memory(vocab, synthetic.n_train, synthetic.seq_len)  # its draws call generate_pair directly
    first_order = np.concatenate([vocab.positive, vocab.negative])
    def split(draw: tuple[int, ...], quadruples: int) -> PackedSplit:  # one draw's sequences, whatever their labels
        return generate_pair(vocab, synthetic.n_train, synthetic.seq_len, synthetic.pair_share,
                             PAIR_LABELS[synthetic.mode], np.random.default_rng(draw), synthetic.label_noise,
                             quadruples)

    found = []
    for seed in range(regime.seeds):
        draw = (regime.salt, replicate, seed)
        # The first-order tokens' alpha_s does not depend on how the quadruples are labelled: neither holds one.
        unit = float(np.quantile(np.abs(average_signed_frequency(split(draw, 0))[first_order]), 0.1))
        train = split(draw, planted_quadruples(unit, planted, synthetic.n_train, synthetic.seq_len))
        scores, values, p_dot_v = projected_initialisation(vocab.size, regime.d, 2, np.random.default_rng((*draw, 1)))
        along = update_along_outputs(scores, values, p_dot_v, FusedBags.from_split(train), regime.eta0)[:, 0]
        found.append(pair_alignment(along, average_signed_frequency(train), vocab.pair_tokens, first_order,
                                    theory_slope(regime.eta0, 2)))
    return found


def pair_step_unit(regime: PairRegime, unit: tuple[float, int]) -> list[dict[str, float]]:
    """A (planted, replicate) unit of the fan-out."""
    return pair_step_statistics(regime, *unit)


def planted_accuracies(regime: PairRegime, accuracy: float, rng: np.random.Generator) -> list[float]:
    """One verdict's seeds: each a planted model's accuracy on the test pair sequences, drawn around `accuracy`
    with the runs' spread, then counted over regime.test_rows sequences."""
    chance = np.clip(accuracy + regime.spread * rng.standard_normal(regime.seeds), 0.0, 1.0)
    return list(rng.binomial(regime.test_rows, chance) / regime.test_rows)
