"""The hard-margin QP of Theorem 4.3 on cases small enough to solve by hand."""

import cvxpy as cp
import numpy as np

from toksel.data.corpus import PackedSplit
from toksel.theory.max_margin import constraint_pairs, cosine, normalized_margin, solve_max_margin
from toksel.theory.selection import selected_entries, selection_fraction


def test_two_orthogonal_constraints():
    # Token 0 must beat token 1 by margin 1 along (2, 0) and token 2 along (0, 1): p = (1/2, 1).
    E = np.array([[2.0, 1.0], [0.0, 1.0], [2.0, 0.0]])
    solution = solve_max_margin(E, np.array([[0, 1], [0, 2]]))
    assert solution.status == "optimal"
    np.testing.assert_allclose(solution.direction, [0.5, 1.0], atol=1e-7)
    np.testing.assert_allclose(solution.norm, np.sqrt(1.25), atol=1e-7)
    np.testing.assert_allclose(normalized_margin(solution.direction, solution.differences), 1 / solution.norm)


def test_redundant_constraint_is_inactive():
    # (1, 0) >= 1 and (3, 0) >= 1: the second holds with slack, p = (1, 0).
    E = np.array([[1.0, 0.0], [0.0, 0.0], [-2.0, 0.0]])
    solution = solve_max_margin(E, np.array([[0, 1], [0, 2]]))
    np.testing.assert_allclose(solution.direction, [1.0, 0.0], atol=1e-7)


def test_contradictory_selection_is_reported_infeasible():
    E = np.array([[1.0, 0.0], [0.0, 1.0]])
    solution = solve_max_margin(E, np.array([[0, 1], [1, 0]]))  # 0 over 1 and 1 over 0
    assert solution.status == "infeasible" and not solution.solved and np.isnan(solution.norm)


def test_span_reduction_matches_the_full_dimensional_qp():
    rng = np.random.default_rng(0)
    E = rng.standard_normal((6, 40))  # d > |S|: the solver works in the 6-dimensional span
    pairs = np.array([[0, 3], [0, 4], [1, 4], [1, 5], [2, 5]])
    solution = solve_max_margin(E, pairs)
    p = cp.Variable(40)
    cp.Problem(cp.Minimize(cp.sum_squares(p)), [(E[pairs[:, 0]] - E[pairs[:, 1]]) @ p >= 1]).solve(cp.CLARABEL)
    np.testing.assert_allclose(solution.direction, p.value, atol=1e-6)
    assert cosine(solution.direction, p.value) > 1 - 1e-9


def test_constraint_pairs_and_selection_on_a_packed_split():
    split = PackedSplit.from_sequences([np.array([0, 1, 1, 2]), np.array([3, 2]), np.array([0, 3])],
                                       np.array([1, 0, 1]), vocab_size=4)
    scores = np.array([5.0, 1.0, 2.0, 5.0 - 1e-9])
    selected = selected_entries(scores, split, tol=1e-6)
    # Row 0 selects token 0; row 1 selects 3; row 2 selects both 0 and 3 (a tie within tol).
    assert selected.tolist() == [True, False, False, False, True, True, True]
    assert constraint_pairs(selected, split).tolist() == [[0, 1], [0, 2], [3, 2]]
    important = np.array([False, True, False, True])
    # Row 0 leaves its important token 1 out; rows 1 and 2 select their important token 3.
    assert selection_fraction(selected, important, split) == 2 / 3


def test_selection_of_every_versus_any_important_token():
    split = PackedSplit.from_sequences([np.array([0, 1, 2]), np.array([3, 2]), np.array([0, 3])],
                                       np.array([1, 0, 1]), vocab_size=4)
    selected = selected_entries(np.array([5.0, 1.0, 2.0, 6.0]), split, tol=0.0)
    important = np.array([False, True, True, True])
    # Row 0 selects none of its important tokens, row 1 one of two, row 2 its only one.
    assert selection_fraction(selected, important, split) == 1 / 3
    assert selection_fraction(selected, important, split, every=False) == 2 / 3


def test_the_least_distance_solve_matches_clarabel_on_assumption1_data():
    """The pipeline's solver against an interior-point one, on the synthetic data's own kind of problem: each
    sequence's important token against its others, E after the one step."""
    from toksel.data.prepared import prepare_synthetic
    from toksel.runtime.config import load_config
    from toksel.theory.one_step import one_step_from_initialisation

    config = load_config(["dataset=synthetic", "data.synthetic.n_train=120", "model.d=128"])
    prepared = prepare_synthetic(config.data.synthetic, (0, 1))
    train, tokens = prepared.splits["train"], prepared.tokens
    E = one_step_from_initialisation(train, tokens, 128, 3, 40.0).E1
    pairs = constraint_pairs(tokens.important[train.bag_tokens], train)
    solution = solve_max_margin(E, pairs)
    p = cp.Variable(E.shape[1])
    cp.Problem(cp.Minimize(cp.sum_squares(p)), [(E[pairs[:, 0]] - E[pairs[:, 1]]) @ p >= 1]).solve(cp.CLARABEL)
    assert solution.status == "optimal" and len(pairs) > 100
    assert cosine(solution.direction, p.value) > 1 - 1e-8
    np.testing.assert_allclose(solution.norm, np.linalg.norm(p.value), rtol=1e-6)
    assert abs(normalized_margin(solution.direction, solution.differences) * solution.norm - 1) < 1e-9
