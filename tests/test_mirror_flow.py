"""Mirror descent on p with the l_q potential: its maps, its steps, and the direction it converges to."""

import numpy as np
import pytest

from toksel.data.synthetic import generate_assumption1, vocabulary
from toksel.models.fused import FusedBags
from toksel.models.initial import initialise
from toksel.theory.flow_field import FlowField
from toksel.theory.gradient_flow import GradientStep, Integration, halved, run_gradient_flow
from toksel.theory.max_margin import constraint_pairs, cosine, solve_lq_max_margin, solve_max_margin
from toksel.theory.mirror_step import MirrorStep, to_dual, to_primal
from toksel.theory.one_step import one_gradient_step_on_embeddings

VOCAB = vocabulary("assumption1", 4, 4, 16)


@pytest.mark.parametrize("q", [1.5, 2.0, 4.0])
def test_the_mirror_maps_invert_each_other_and_q_2_is_the_identity(q):
    p = np.random.default_rng(0).standard_normal(50)
    assert np.allclose(to_primal(to_dual(p, q), q), p)
    if q == 2.0:
        assert np.array_equal(to_dual(p, q), p)


def _problem(d: int = 64, seed: int = 0):
    split = generate_assumption1(VOCAB, 160, 6, np.random.default_rng(seed))
    init = initialise(VOCAB.size, d, seed)
    E0, p0, v = init.E.numpy().astype(np.float64), init.p.numpy().astype(np.float64), init.v.numpy().astype(np.float64)
    bags = FusedBags.from_split(split)
    E1 = one_gradient_step_on_embeddings(E0, p0, v, bags, 60.0)
    important = np.isin(split.bag_tokens, np.concatenate([VOCAB.positive, VOCAB.negative]))
    pairs = constraint_pairs(important, split)
    return E1, p0, v, bags, E1[pairs[:, 0]] - E1[pairs[:, 1]], pairs


def test_a_mirror_step_of_the_l2_potential_is_a_gradient_step():
    E1, p0, v, bags, _, _ = _problem()
    field = FlowField(E1, v, bags, 0.0)
    _, gradient = field(p0)
    for ours, theirs in zip(MirrorStep(field, 2.0)(p0, gradient, 0.3), GradientStep(field)(p0, gradient, 0.3),
                            strict=True):
        assert np.allclose(ours, theirs, rtol=1e-12, atol=0)


@pytest.mark.slow  # 8 s or more: make test-slow (make test stays under 5 minutes)
def test_each_flow_converges_to_its_own_norms_margin():
    """Gradient flow and the l_1.5 and l_4 mirror flows on the same tiny Assumption-1 problem: each ends closer to
    the hard-margin direction of its own norm than to either other's, and its run with every step halved agrees."""
    E1, p0, v, bags, differences, pairs = _problem()
    solutions = {2.0: solve_max_margin(E1, pairs).direction,
                 **{q: solve_lq_max_margin(E1, pairs, q).direction for q in (1.5, 4.0)}}
    assert max(cosine(solutions[2.0], solutions[q]) for q in (1.5, 4.0)) < 0.98  # the norms pick different ones
    for q in solutions:
        run = run_gradient_flow(E1, p0, v, bags, Integration(1e8, 1e-3, potential=q))
        end = run.p[-1]
        own = cosine(end, solutions[q])
        assert own > max(cosine(end, solutions[other]) for other in solutions if other != q), q
        assert own > 0.97, (q, own)  # logarithmically slowly: 0.976 for q = 1.5 at t = 1e8
        twin = halved(E1, p0, v, bags, run)
        assert twin.potential == q and cosine(twin.p[-1], end) > 1 - 1e-6


def test_the_lq_solver_agrees_with_the_least_distance_solve_at_q_2():
    E1, _, _, _, differences, pairs = _problem()
    exact = solve_max_margin(E1, pairs).direction
    conic = solve_lq_max_margin(E1, pairs, 2.0)
    assert conic.status == "optimal" and cosine(conic.direction, exact) > 1 - 1e-6
    assert (differences @ conic.direction).min() == pytest.approx(1.0, abs=1e-6)


def test_the_l_q_potential_refuses_the_implicit_methods():
    E1, p0, v, bags, _, _ = _problem()
    with pytest.raises(Exception, match="explicit steps only"):
        run_gradient_flow(E1, p0, v, bags, Integration(10.0, 1e-3, method="implicit", potential=1.5))

