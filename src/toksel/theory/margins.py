"""Which margin an optimiser on p picks (ours, beyond the paper).

Theorem 4.3: gradient flow on p, E frozen after the step, converges in direction to the l_2 hard-margin solution
of the important tokens' selection. Julistiono, Tarzanagh and Azizan (2024, arXiv 2410.14581) prove that the
mirror flow of the l_q potential (q > 1) converges to the l_q hard-margin solution instead. On one seed's data,
each flow of `potentials` is followed to the horizon (with its twin of halved steps, the check that the steps
follow the flow) and each norm's hard-margin direction is solved; the cosines between them say which optimiser
ends nearest which norm's solution. Sign descent and Adam on p, whose geometry for attention is not proven (for
linear models they favour l_inf), are run for a fixed number of steps and read against the same solutions plus
the l_inf one: shown, not judged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from toksel.models.fused import FusedBags
from toksel.runtime.errors import ToksError
from toksel.theory.flow_field import FlowField
from toksel.theory.gradient_flow import Integration, StepCapReached, halved, run_gradient_flow
from toksel.theory.max_margin import cosine, solve_lq_max_margin, solve_max_margin

L2 = 2.0
ADAM_BETAS = (0.9, 0.999)  # the usual moments; eps 1e-8
ADAM_EPS = 1e-8


def norm_name(q: float) -> str:
    return "linf" if math.isinf(q) else f"l{q:g}"


def flow_name(q: float) -> str:
    return "gradient" if q == L2 else f"mirror_{norm_name(q)}"


class NotFollowed(ToksError):
    """A draw on which the claims' premise fails, so its flows say nothing of them: why, in words."""


def hard_margin_directions(E: np.ndarray, pairs: np.ndarray, norms: Sequence[float]) -> dict[float, np.ndarray]:
    """Each norm's hard-margin direction of the selection whose (s, s') pairs are given (unit length)."""
    found = {}
    for q in norms:
        solution = solve_max_margin(E, pairs) if q == L2 else solve_lq_max_margin(E, pairs, q)
        if not solution.solved:
            raise NotFollowed(f"the {norm_name(q)} hard-margin problem is {solution.status} "
                              f"({len(pairs):,} constraints): the important tokens are not separable on these data")
        found[q] = solution.direction / np.linalg.norm(solution.direction)
    return found


@dataclass(frozen=True)
class FlowEnd:
    potential: float
    p: np.ndarray  # where the flow is at the horizon
    steps: int
    halved_angle: float | None  # radians between its end and its halved-step twin's; None: no twin run
    halved_norm_gap: float | None  # |p| of the two ends, relative
    path: Path | None = None  # the flow's direction at each record: how it approaches its limit


@dataclass(frozen=True)
class Path:
    """A flow's direction p_t / |p_t| at its record times (t > 0)."""

    times: np.ndarray  # (k,)
    directions: np.ndarray  # (k, d), unit rows

    @classmethod
    def of(cls, times: np.ndarray, p: np.ndarray) -> Path:
        moving = times > 0
        return cls(times[moving], p[moving] / np.linalg.norm(p[moving], axis=1, keepdims=True))

    def mixed(self, other: Path, share: float) -> Path:
        """The normalised mix (1 - share) self + share other, record by record (the same record times)."""
        mix = (1 - share) * self.directions + share * other.directions
        return Path(self.times, mix / np.linalg.norm(mix, axis=1, keepdims=True))


def cosine_limit(path: Path, solution: np.ndarray, half: int | None = None) -> float:
    """Where the flow's cosine with `solution` is heading: the least-squares fit of its gap, 1 - cos(p_t, solution)
    = a + b / log t, over the flow's records (t in [T / 2^20, T]; half 0 or 1: the first or second half of them in
    log t), read at t -> infinity: 1 - a. A flow converging in direction to `solution` closes its gap like
    1 / log t or faster (the implicit-bias rate) and reads about 1 (a little above where the gap closes faster);
    one heading to another direction reads about the cosine between the two. NaN with fewer than 3 records."""
    logs = np.log(path.times[path.times > 1])
    directions = path.directions[path.times > 1]
    if half is not None:
        middle = (logs[0] + logs[-1]) / 2
        keep = logs <= middle if half == 0 else logs >= middle
        logs, directions = logs[keep], directions[keep]
    if len(logs) < 3:
        return float("nan")
    gap = 1 - directions @ (solution / np.linalg.norm(solution))
    _, intercept = np.polyfit(1 / logs, gap, 1)
    return float(1 - intercept)


def flow_end(E: np.ndarray, p0: np.ndarray, v: np.ndarray, bags: FusedBags, potential: float, horizon: float,
             tolerance: float, twin: bool) -> FlowEnd:
    """The flow of the l_q potential (q = 2: gradient flow) from p0 to the horizon; twin: and its halved replay."""
    try:
        run = run_gradient_flow(E, p0, v, bags, Integration(horizon, tolerance, potential=potential))
    except StepCapReached as error:
        raise NotFollowed(f"the {flow_name(potential)} flow: {error}") from None
    end, path = run.p[-1], Path.of(run.times, run.p)
    if not twin:
        return FlowEnd(potential, end, run.steps, None, None, path)
    other = halved(E, p0, v, bags, run).p[-1]
    angle = math.acos(min(1.0, max(-1.0, cosine(end, other))))
    gap = abs(np.linalg.norm(end) - np.linalg.norm(other)) / np.linalg.norm(end)
    return FlowEnd(potential, end, run.steps, angle, float(gap), path)


def sign_descent(field: FlowField, p0: np.ndarray, steps: int, lr: float) -> np.ndarray:
    """p <- p - lr sign(grad L(p)): steepest descent in the l_inf norm, steps of fixed length."""
    p = p0.astype(np.float64, copy=True)
    for _ in range(steps):
        p -= lr * np.sign(field(p)[1])
    return p


def adam(field: FlowField, p0: np.ndarray, steps: int, lr: float) -> np.ndarray:
    """Adam on p (Kingma and Ba 2015), bias-corrected moments."""
    (beta1, beta2), p = ADAM_BETAS, p0.astype(np.float64, copy=True)
    first, second = np.zeros_like(p), np.zeros_like(p)
    for step in range(1, steps + 1):
        gradient = field(p)[1]
        first = beta1 * first + (1 - beta1) * gradient
        second = beta2 * second + (1 - beta2) * gradient**2
        p -= lr * (first / (1 - beta1**step)) / (np.sqrt(second / (1 - beta2**step)) + ADAM_EPS)
    return p


def preference(cosines: dict[tuple[str, float], float], owners: dict[str, float]) -> float:
    """The smallest, over the optimisers, of the cosine to their own norm's solution minus the largest to another
    norm's: positive when every optimiser ends nearer its own norm's solution than any other's."""
    norms = set(owners.values())
    return min(cosines[name, own] - max(cosines[name, other] for other in norms - {own})
               for name, own in owners.items())


SETTLED_LIMIT = 0.01  # the cosine's limit read on each half of the records agrees within this


def convergence_metrics(paths: dict[str, Path], owners: dict[str, float],
                        solutions: dict[float, np.ndarray]) -> dict[str, float]:
    """What margin_converged reads of the flows' paths: `own_cosine_limit`, the smallest, over the flows, limit
    of the cosine with their own norm's solution that the trend over the flow's records heads to (cosine_limit);
    settled when each flow's limit read on the first and on the second half of its records agree within
    SETTLED_LIMIT, the threshold's distance (0.99) from 1: a reading that moves by more than the room the threshold
    leaves while the flow runs on is a transient, and the horizon too short for it. Its control: the largest limit
    of a flow's cosine with another norm's solution (the cosine between the two solutions, for a flow that
    converges)."""
    judged = list(owners.values())
    limit = {(name, q): cosine_limit(paths[name], solutions[q]) for name in owners for q in judged}
    halves = {(name, q): (cosine_limit(paths[name], solutions[q], 0), cosine_limit(paths[name], solutions[q], 1))
              for name, q in owners.items()}
    return {"own_cosine_limit": min(limit[name, own] for name, own in owners.items()),
            "own_cosine_limit_moved": max(abs(late - early) for early, late in halves.values()),
            "own_cosine_limit_settled": float(all(abs(late - early) <= SETTLED_LIMIT
                                                  for early, late in halves.values())),
            "control_own_cosine_limit": max(limit[name, other] for name, own in owners.items() for other in judged
                                            if other != own)}


def margin_metrics(ends: dict[str, np.ndarray], owners: dict[str, float],
                   solutions: dict[float, np.ndarray], paths: dict[str, Path] | None = None) -> dict[str, float]:
    """One seed's cosines of every optimiser's end with every solution, and what the claims read of them:
    `own_preference` (preference above), `own_cosine` (the smallest cosine of a flow with its own norm's solution,
    shown); their controls read the gradient flow's end in every optimiser's place (an optimiser blind to the
    geometry) and the largest cosine of a flow with another norm's solution; `solutions_cosine`, the largest cosine
    between the l_2 solution and another norm's (how far apart the norms' answers are); with the flows' paths, how
    each approaches its solution (convergence_metrics)."""
    cosines = {(name, q): cosine(end, solution) for name, end in ends.items() for q, solution in solutions.items()}
    judged = list(owners.values())
    blind = {(name, q): cosines[flow_name(L2), q] for name in owners for q in judged}
    metrics = {f"cos_{name}_{norm_name(q)}": value for (name, q), value in cosines.items()}
    if paths is not None:
        metrics |= convergence_metrics(paths, owners, solutions)
    return metrics | {
        "own_preference": preference(cosines, owners),
        "control_own_preference": preference(blind, owners),
        "own_cosine": min(cosines[name, own] for name, own in owners.items()),
        "control_own_cosine": max(cosines[name, other] for name, own in owners.items() for other in judged
                                  if other != own),
        "solutions_cosine": max(cosine(solutions[L2], solutions[q]) for q in judged if q != L2),
    }


def unselected_share(E: np.ndarray, p: np.ndarray, pairs: np.ndarray) -> float:
    """The share of the (important s, other s') pairs that p does not rank strictly apart, p^T (E_s - E_s') <= 0:
    0 where p selects every important token of every sequence."""
    return float(np.mean(E[pairs[:, 0]] @ p <= E[pairs[:, 1]] @ p)) if len(pairs) else 0.0


def follow_optimisers(E: np.ndarray, p0: np.ndarray, v: np.ndarray, bags: FusedBags, pairs: np.ndarray,
                      potentials: Sequence[float], horizon: float, tolerance: float,
                      twin: bool, also: Sequence[float] = ()) -> tuple[dict[float, np.ndarray], dict[float, FlowEnd]]:
    """Gradient flow and the mirror flows of `potentials` from p0 to the horizon (twin: each with its halved-step
    replay), and the hard-margin direction of each of their norms and of the norms `also` names.

    Theorem 4.3 (and its mirror analogue) reads the limit of a flow that selects the important tokens (Lemma 4.4,
    eta0 within its window). Where gradient flow's end does not, the mirror flows are not followed: their limits
    answer another question, and off the window they stiffen (at eta0 50, d 512 an l_4 flow needed over 200,000
    steps). NotFollowed says why, as it does for a hard-margin problem without a solution or a flow that needs
    more steps than the cap to reach the horizon."""
    norms = (L2, *potentials)
    solutions = hard_margin_directions(E, pairs, (*norms, *also))
    gradient = flow_end(E, p0, v, bags, L2, horizon, tolerance, twin)
    if (unselected := unselected_share(E, gradient.p, pairs)) > 0:
        raise NotFollowed(f"gradient flow's end at t = {horizon:g} leaves {unselected:.1%} of the important tokens' "
                          "constraints unmet: it does not select the important tokens (Lemma 4.4's premise: the "
                          "step's eta0 within its window)")
    return solutions, {L2: gradient} | {q: flow_end(E, p0, v, bags, q, horizon, tolerance, twin) for q in potentials}
