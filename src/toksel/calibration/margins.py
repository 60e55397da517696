"""Known answers for the margin claims (claims/catalogue.py, MARGIN_CLAIMS) on margins.dataset's own generator.

Each replicate is a fresh draw of the data and the initialisation at the dataset's d and eta0, the one step on the
true labels, then gradient flow and the mirror flows of margins.potentials to margins.horizon and each norm's
hard-margin direction: what the stage runs, without the halved-step twins. The rung plants how far each mirror
optimiser got from gradient flow's end towards its own flow's, at every record of its path: 0 is an optimiser blind
to the geometry (gradient flow's path in its place), 1 the mirror flow itself, in between the normalised mix of the
two directions. The flows and solutions of a draw do not depend on the rung, so a replicate's rungs share them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toksel.calibration.theory import Recent, seed_of, training_draw
from toksel.models.fused import FusedBags
from toksel.models.initial import initialise
from toksel.params import SyntheticConfig
from toksel.theory.margins import L2, Path, flow_name, follow_optimisers, margin_metrics
from toksel.theory.max_margin import constraint_pairs
from toksel.theory.one_step import embedding_update


@dataclass(frozen=True)
class MarginRegime:
    """What the margin claims' known answers need: the generator, d, eta0, the optimisers and their flows."""

    synthetic: SyntheticConfig
    d: int
    eta0: float
    potentials: tuple[float, ...]
    horizon: float
    tolerance: float
    seeds: int
    salt: int


# a draw's solutions, and its optimisers' unit ends and paths
Followed = tuple[dict[float, np.ndarray], dict[float, np.ndarray], dict[float, Path]]
_FOLLOWED = Recent()


def _followed(regime: MarginRegime, draw: tuple[int, ...]) -> Followed:
    """One draw's solutions and the unit directions its optimisers end at (kept for the rungs still to read them)."""
    def make() -> Followed:
        train, important = training_draw(regime.synthetic, draw)
        init = initialise(train.vocab_size, regime.d, seed_of(*draw))
        E0, p0, v = init.E.numpy(), init.p.numpy(), init.v.numpy()
        bags = FusedBags.from_split(train)
        E1 = embedding_update(E0, p0, v, bags, regime.eta0).applied(E0, p0, v)
        pairs = constraint_pairs(important[train.bag_tokens], train)
        solutions, flows = follow_optimisers(E1, p0, v, bags, pairs, regime.potentials, regime.horizon,
                                             regime.tolerance, twin=False)
        return (solutions, {q: end.p / np.linalg.norm(end.p) for q, end in flows.items()},
                {q: end.path for q, end in flows.items()})

    return _FOLLOWED.get((repr(regime), draw), make)  # a config is not hashable; its repr holds every value


def margin_statistics(regime: MarginRegime, planted: float, replicate: int) -> list[dict[str, float]]:
    """One verdict's seeds: the margin claims' statistics with each mirror optimiser `planted` of the way from
    gradient flow's end to its own flow's."""
    found = []
    for seed in range(regime.seeds):
        solutions, ends, paths = _followed(regime, (regime.salt, replicate, seed))
        mixed = {flow_name(q): end if q == L2 else (1 - planted) * ends[L2] + planted * end for q, end in ends.items()}
        approach = {flow_name(q): path if q == L2 else paths[L2].mixed(path, planted) for q, path in paths.items()}
        found.append(margin_metrics(mixed, {flow_name(q): q for q in ends}, solutions, approach))
    return found


def margin_unit(regime: MarginRegime, unit: tuple[float, int]) -> list[dict[str, float]]:
    """A (planted, replicate) unit of the fan-out."""
    return margin_statistics(regime, *unit)
