"""Gradient flow on p with E frozen, by a linearly implicit (Rosenbrock) method: long steps where the flow is stiff.

The loss depends on p only through the token scores a = E p, so its Hessian is H = E^T H_a E, with H_a a sum over
the reviews of a diagonal-plus-low-rank matrix on each review's tokens (rank 3 for two classes). On real data the
one-step update E1 = E0 + u_p p0^T + u_v v^T (eta0 = 1000) makes the scores very sensitive to p's component along
v: on yelp_polarity H's top eigenvalue is 0.07 at p0 and 0.3 to 0.6 later, its eigenvector within 15 degrees of v,
while the next ones are 0.016 and below (a continuum down to 1e-7, a few negative ones down to -5e-3). Gradient
steps must stay below 2 / lambda_max (about 3.5 there) whatever the flow time; a stable implicit method need not.

The method is ROS2 (Verwer, Spee, Blom and Hundsdorfer, SIAM J. Sci. Comput. 20, 1999), for p' = F(p) = -grad L:

    (I + gamma h W) k1 = F(p_n)
    (I + gamma h W) k2 = F(p_n + h k1) - 2 k1
    p_n+1 = p_n + h (3/2 k1 + 1/2 k2),          gamma = 1 + 1/sqrt(2)

It is L-stable (with W the Jacobian), and second-order accurate for any matrix W (a "W-method": the Taylor
expansion of p_n+1 matches the flow's to h^2 whatever W is), so an approximate W costs stability, never accuracy.
That is why it is still the flow: a consistent second-order integrator of dp/dt = -grad L(p), not a rescaled or
normalised descent, converging to the flow as h -> 0; W only decides how long the stable steps may be. The embedded
first-order solution p_n + h k1 (linearly implicit Euler) gives the local error estimate h/2 |k1 + k2|, held below
`tolerance` max(|p|, 1) as the explicit integrator does (controller exponent 1/2), and the halved run checks it.

Two choices of W (gradient_flow.METHODS):
- "implicit": W the Gauss-Newton part of the Hessian (positive semi-definite; on yelp_polarity its top eigenvalues
  are within 15 % of H's), built dense (d x d, float32) and eigendecomposed, and kept over many steps: rebuilt where
  p has drifted from where it was built, where the steps have shrunk, or where steps keep being refused
  (`FrozenRosenbrockStep`). A step costs two evaluations of the gradient; a build, one pass over the corpus, a
  product of a d x (at most W_REVIEWS) matrix with its transpose and an eigendecomposition (1.3 s on yelp_polarity,
  1.6 s on IMDB, one thread). Its halved run builds W at the same flow times (its steps 2i for the run's i), and
  again wherever a step's error estimate exceeds the run's tolerance (it has no controller to refuse the step).
  A kept W is staler than the Hessian, so at long horizons this method needs a tighter tolerance than the next for
  the same agreement with its halved run (yelp_polarity to t = 1e7: 3e-4; to 5e8: 1e-4).
- "implicit-krylov": W = H(p_n) at every step, the systems solved by conjugate gradients (relative residual
  LINEAR_TOLERANCE), each product with H one pass over the corpus (the exact directional derivative of the fused
  pass's dL/da) and two products with E. Nothing is kept between steps, but late in the flow, where many of H's
  eigenvalues exceed 1/h, CG takes tens of products a step.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
import scipy.linalg

from toksel.models.fused import FusedBags
from toksel.models.products import scores, transposed_product
from toksel.theory.flow_field import FlowField

GAMMA = 1.0 + 1.0 / math.sqrt(2.0)
LINEAR_TOLERANCE = 1e-2  # CG's relative residual: the solve's error moves a step by about 1e-2 of its increment
MAX_ITERATIONS = 100  # CG's products per linear system at most
SINGLE = True  # W's products with a float32 copy of E (half the bytes; W need only be near H)


@dataclass(frozen=True)
class Linearisation:
    """What the Hessian of the loss in the token scores needs at a point a = E p, per corpus entry and per review:
    the attention weights q (with counts), the values' offsets from the review's output, b_s - f (one column per
    output), dL/df and d^2L/df^2 (already divided by n)."""

    weights: np.ndarray  # (nnz,)
    offsets: np.ndarray  # (nnz * outputs,) entry-major
    slopes: np.ndarray  # (n * outputs,)
    curvatures: np.ndarray  # (n * outputs * outputs,)
    roots: np.ndarray  # (n * outputs * outputs,): R with R^T R = the review's d^2L/df^2 (row-major, r then j)
    outputs: int


def linearise(token_scores: np.ndarray, values: np.ndarray, bags: FusedBags) -> Linearisation:
    """The per-entry and per-review quantities of the Hessian of L in a at a = token_scores; values: b = E v."""
    outputs, n = bags.num_outputs, len(bags.labels)
    weights, offsets = np.empty(len(bags.tokens)), np.empty(len(bags.tokens) * outputs)
    slopes, curvatures, roots = np.empty(n * outputs), np.empty(n * outputs * outputs), np.empty(n * outputs**2)
    _linearise_kernel(outputs)(np.ascontiguousarray(token_scores, dtype=np.float64),
                               np.ascontiguousarray(values, dtype=np.float64).reshape(-1), bags.indptr, bags.tokens,
                               bags.counts, bags.labels, numba.get_num_threads(), weights, offsets, slopes,
                               curvatures, roots)
    return Linearisation(weights, offsets, slopes, curvatures, roots, outputs)


def hessian_product_scores(linear: Linearisation, direction: np.ndarray, bags: FusedBags,
                           gauss_newton: bool = False) -> np.ndarray:
    """H_a u: the Hessian of L in the token scores times u (one entry per token); with `gauss_newton`, its
    Gauss-Newton part alone, sum over reviews of J^T (d^2L/df^2) J u with J = df/da (positive semi-definite)."""
    out = np.zeros((numba.get_num_threads(), bags.vocab_size))
    _product_kernel(linear.outputs)(np.ascontiguousarray(direction, dtype=np.float64), linear.weights,
                                    linear.offsets, linear.slopes, linear.curvatures, bags.indptr, bags.tokens,
                                    gauss_newton, out)
    return out.sum(axis=0)


class Hessian:
    """u -> H u = E^T H_a E u (+ penalty u) at one point p: one pass over the corpus and two products with E.
    `product_matrix`: the E the products use (default E; a float32 copy of it reads half the bytes, for a W that
    need only be near H)."""

    def __init__(self, E: np.ndarray, values: np.ndarray, bags: FusedBags, p: np.ndarray, penalty: float,
                 gauss_newton: bool = False, product_matrix: np.ndarray | None = None) -> None:
        self.E = E if product_matrix is None else product_matrix
        self.bags, self.penalty, self.gauss_newton = bags, penalty, gauss_newton
        self.linear = linearise(scores(E, p), values, bags)
        self.products = 0

    def __call__(self, u: np.ndarray) -> np.ndarray:
        self.products += 1
        product = transposed_product(self.E, hessian_product_scores(self.linear, scores(self.E, u), self.bags,
                                                                      self.gauss_newton))
        return product + self.penalty * u if self.penalty else product


@functools.cache
def _linearise_kernel(outputs: int):
    @numba.njit(parallel=True, fastmath=False, cache=True, nogil=True)
    def kernel(a, b, indptr, tokens, counts, labels, chunks, weights, offsets, slopes, curvatures,
               roots):  # pragma: no cover
        n = len(labels)
        for chunk in numba.prange(chunks):
            f_minus_reference, reference = np.empty(outputs), np.empty(outputs)
            logits, probabilities = np.empty(outputs), np.empty(outputs)
            for row in range(chunk * n // chunks, (chunk + 1) * n // chunks):
                start, stop = indptr[row], indptr[row + 1]
                top, r = -np.inf, start
                for e in range(start, stop):
                    if a[tokens[e]] >= top:
                        top, r = a[tokens[e]], e
                z = 0.0
                for e in range(start, stop):
                    weights[e] = counts[e] * np.exp(a[tokens[e]] - top)
                    z += weights[e]
                for e in range(start, stop):
                    weights[e] /= z
                for j in range(outputs):  # f - b_r in the difference form, as the fused pass computes it
                    reference[j] = b[tokens[r] * outputs + j]
                    total = 0.0
                    for e in range(start, stop):
                        total += weights[e] * (b[tokens[e] * outputs + j] - reference[j])
                    f_minus_reference[j] = total
                for e in range(start, stop):
                    for j in range(outputs):
                        offsets[e * outputs + j] = (b[tokens[e] * outputs + j] - reference[j]) - f_minus_reference[j]
                if outputs == 1:
                    y = 2.0 * labels[row] - 1.0
                    margin = y * (reference[0] + f_minus_reference[0])
                    wrong = 1.0 / (1.0 + np.exp(margin))  # sigmoid(-margin), stable both ways
                    right = 1.0 / (1.0 + np.exp(-margin))
                    slopes[row] = -y * wrong / n
                    curvatures[row] = wrong * right / n
                    roots[row] = math.sqrt(wrong * right / n)
                else:
                    for j in range(outputs):
                        logits[j] = reference[j] + f_minus_reference[j]
                    largest = logits.max()
                    total = 0.0
                    for j in range(outputs):
                        probabilities[j] = np.exp(logits[j] - largest)
                        total += probabilities[j]
                    for j in range(outputs):
                        probabilities[j] /= total
                    for j in range(outputs):
                        slopes[row * outputs + j] = (probabilities[j] - (1.0 if j == labels[row] else 0.0)) / n
                        for k in range(outputs):
                            diagonal = probabilities[j] if j == k else 0.0
                            curvatures[(row * outputs + j) * outputs + k] = (diagonal
                                                                            - probabilities[j] * probabilities[k]) / n
                    # diag(s) - s s^T = B^T B with B_rj = sqrt(s_r) (delta_rj - s_j), as sum_j s_j = 1
                    for r in range(outputs):
                        for j in range(outputs):
                            roots[(row * outputs + r) * outputs + j] = (math.sqrt(probabilities[r])
                                                                       * ((1.0 if r == j else 0.0) - probabilities[j])
                                                                       / math.sqrt(n))

    return kernel


@functools.cache
def _product_kernel(outputs: int):
    """d(dL/da_s) along a: for each review, with q its weights, D_s = b_s - f, g = dL/df, C = d^2L/df^2 and
    m = sum q_s u_s, df = sum_s q_s (u_s - m) D_s:
    d(dL/da_s) = q_s [(u_s - m) g.D_s + (C df).D_s - g.df]."""

    @numba.njit(parallel=True, fastmath=False, cache=True, nogil=True)
    def kernel(u, weights, offsets, slopes, curvatures, indptr, tokens, gauss_newton, out):  # pragma: no cover
        n = len(indptr) - 1
        chunks = out.shape[0]
        for chunk in numba.prange(chunks):
            df, ddelta = np.empty(outputs), np.empty(outputs)
            for row in range(chunk * n // chunks, (chunk + 1) * n // chunks):
                start, stop = indptr[row], indptr[row + 1]
                m = 0.0
                for e in range(start, stop):
                    m += weights[e] * u[tokens[e]]
                for j in range(outputs):
                    df[j] = 0.0
                for e in range(start, stop):
                    shifted = weights[e] * (u[tokens[e]] - m)
                    for j in range(outputs):
                        df[j] += shifted * offsets[e * outputs + j]
                constant = 0.0
                for j in range(outputs):
                    constant += slopes[row * outputs + j] * df[j]
                    total = 0.0
                    for k in range(outputs):
                        total += curvatures[(row * outputs + j) * outputs + k] * df[k]
                    ddelta[j] = total
                for e in range(start, stop):
                    along, bend = 0.0, 0.0
                    for j in range(outputs):
                        along += slopes[row * outputs + j] * offsets[e * outputs + j]
                        bend += ddelta[j] * offsets[e * outputs + j]
                    if gauss_newton:
                        out[chunk, tokens[e]] += weights[e] * bend
                    else:
                        out[chunk, tokens[e]] += weights[e] * ((u[tokens[e]] - m) * along + bend - constant)

    return kernel


class RosenbrockStep:
    """One ROS2 step of length h from p (see the module's docstring): (p_new, L(p_new), grad L(p_new), the local
    error estimate h/2 |k1 + k2|, |p_new - p|). The Hessian at p is kept for the retries of a refused step."""

    def __init__(self, E: np.ndarray, v: np.ndarray, bags: FusedBags, penalty: float,
                 linear_tolerance: float = LINEAR_TOLERANCE, max_iterations: int = MAX_ITERATIONS,
                 single: bool = SINGLE) -> None:
        self.field = FlowField(E, v, bags, penalty)
        self.product_matrix = self.field.E.astype(np.float32) if single else None
        self.linear_tolerance, self.max_iterations = linear_tolerance, max_iterations
        self.linearisations, self._done = 0, 0  # Hessians built; products of the Hessians before the current one
        self._point: np.ndarray | None = None
        self._hessian: Hessian | None = None

    @property
    def products(self) -> int:
        return self._done + (self._hessian.products if self._hessian is not None else 0)

    def hessian_at(self, p: np.ndarray) -> Hessian:
        if self._hessian is None or p is not self._point:
            self._done = self.products
            self._hessian = Hessian(self.field.E, self.field.values, self.field.bags, p, self.field.penalty,
                                    product_matrix=self.product_matrix)
            self._point = p
            self.linearisations += 1
        return self._hessian

    def __call__(self, p: np.ndarray, gradient: np.ndarray, h: float) -> tuple[np.ndarray, float, np.ndarray,
                                                                                float, float]:
        hessian, scale = self.hessian_at(p), GAMMA * h

        def solve(rhs: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
            return conjugate_gradients(lambda x: x + scale * hessian(x), rhs, self.linear_tolerance,
                                       self.max_iterations, start)

        k1 = solve(-gradient)
        _, middle = self.field(p + h * k1)
        k2 = solve(-middle - 2 * k1, start=-k1)
        new = p + h * (1.5 * k1 + 0.5 * k2)
        loss, new_gradient = self.field(new)
        return new, loss, new_gradient, 0.5 * h * float(np.linalg.norm(k1 + k2)), float(np.linalg.norm(new - p))


def conjugate_gradients(operator: Callable[[np.ndarray], np.ndarray], rhs: np.ndarray, tolerance: float,
                        max_iterations: int, start: np.ndarray | None = None) -> np.ndarray:
    """x with |operator(x) - rhs| <= tolerance |rhs|, by CG from `start` (0 if None); stops early, keeping the
    iterate it has, on a direction of non-positive curvature (the operator is I + gamma h H and H can be
    indefinite): the W-method property makes that a question of stability, which the step's error control judges."""
    x = np.zeros_like(rhs) if start is None else start.copy()
    residual = rhs - operator(x) if start is not None else rhs.copy()
    goal = tolerance * float(np.linalg.norm(rhs))
    direction, size = residual.copy(), float(residual @ residual)
    for _ in range(max_iterations):
        if math.sqrt(size) <= goal:
            break
        image = operator(direction)
        curvature = float(direction @ image)
        if curvature <= 0:
            return x if np.any(x) else rhs.copy()
        alpha = size / curvature
        x += alpha * direction
        residual -= alpha * image
        new_size = float(residual @ residual)
        direction = residual + (new_size / size) * direction
        size = new_size
    return x


ROWS_PER_BLOCK = 2048  # reviews of the Gauss-Newton factor gathered at a time (a block is rows x d float64)
W_REVIEWS = 4096  # the reviews W is built from, at most (IMDB's 25,000: an evenly spaced sixth of them)


@dataclass(frozen=True)
class DenseW:
    """A symmetric positive semi-definite W = Q diag(eigenvalues) Q^T, with the solves of the steps:
    (I + c W)^-1 x for any c >= 0 at the cost of two products with a d x d matrix."""

    basis: np.ndarray  # (d, d) Q, orthonormal columns
    eigenvalues: np.ndarray  # (d,) >= 0

    def solve(self, rhs: np.ndarray, scale: float) -> np.ndarray:
        return self.basis @ ((self.basis.T @ rhs) / (1.0 + scale * self.eigenvalues))


def gauss_newton_w(E: np.ndarray, values: np.ndarray, bags: FusedBags, p: np.ndarray, penalty: float) -> DenseW:
    """The Gauss-Newton part of the Hessian at p, sum over reviews of (J E)^T (d^2L/df^2) (J E) (J = df/da, one row
    per output), plus penalty I, as a dense d x d matrix in float32 and eigendecomposed. It is the Hessian but for
    the terms in dL/df times the curvature of the attention output: positive semi-definite, and on real data it
    carries the stiff directions (on yelp_polarity its top eigenvalues are within 15 % of the Hessian's). Over
    W_REVIEWS reviews, an evenly spaced subset of that many stands for all of them (its sum scaled up): W need only
    be near the Jacobian, and the stiff directions are sums over many reviews."""
    linear = linearise(scores(E, p), values, bags)
    n, outputs, d = len(bags.labels), linear.outputs, E.shape[1]
    reviews = np.arange(min(n, W_REVIEWS), dtype=np.int64) * n // min(n, W_REVIEWS)
    gram = np.zeros((d, d), dtype=np.float32)
    for first in range(0, len(reviews), ROWS_PER_BLOCK):
        block = np.zeros((len(reviews[first:first + ROWS_PER_BLOCK]) * outputs, d))
        _gather_kernel(outputs)(E, linear.weights, linear.offsets, linear.roots, bags.indptr, bags.tokens,
                                reviews[first:first + ROWS_PER_BLOCK], block)
        single = block.astype(np.float32)
        gram += single.T @ single
    eigenvalues, basis = scipy.linalg.eigh(gram, driver="evd", overwrite_a=True, check_finite=False)
    scale = n / len(reviews)
    return DenseW(basis.astype(np.float64), scale * np.maximum(eigenvalues.astype(np.float64), 0.0) + penalty)


@functools.cache
def _gather_kernel(outputs: int):
    """Rows r of each review in `reviews`: sum over its entries e of q_e (sum_j R_rj D_ej) E_{s_e}."""

    @numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
    def kernel(E, weights, offsets, roots, indptr, tokens, reviews, block):  # pragma: no cover
        d = E.shape[1]
        for index in numba.prange(len(reviews)):
            row = reviews[index]
            for r in range(outputs):
                out = index * outputs + r
                for e in range(indptr[row], indptr[row + 1]):
                    coefficient = 0.0
                    for j in range(outputs):
                        coefficient += roots[(row * outputs + r) * outputs + j] * offsets[e * outputs + j]
                    coefficient *= weights[e]
                    s = tokens[e]
                    for k in range(d):
                        block[out, k] += coefficient * E[s, k]

    return kernel


REBUILD_DRIFT = 1.0  # W is rebuilt where p has moved this share of max(|p_W|, 1) from where W was built
REBUILD_RETRIES = 2  # ... and where a step from the same point has been refused this many times
REBUILD_SHRINK = 4.0  # ... and where the controller's steps have shrunk this much below their longest since the last
REBUILD_SPACING = 10  # build (a stale W makes the steps short); these two rules wait this many steps after a build


class FrozenRosenbrockStep:
    """ROS2 with W the dense Gauss-Newton matrix (`gauss_newton_w`), kept over many steps and rebuilt where p has
    drifted from where it was built or the controller keeps refusing steps; each step then costs two evaluations
    and four products with a d x d matrix. `schedule`: the replay of a run, which has no controller to refuse its
    steps: rebuild at these kept steps (the run's, doubled) and, given the run's `tolerance`, wherever a step's
    error estimate exceeds it with a W built earlier (then the step is taken again with the new W, as the run would
    have retried it). `rebuilds` lists the kept steps at whose start W was built, in order."""

    def __init__(self, E: np.ndarray, v: np.ndarray, bags: FusedBags, penalty: float,
                 schedule: tuple[int, ...] | None = None, tolerance: float | None = None) -> None:
        self.field = FlowField(E, v, bags, penalty)
        self.schedule, self.tolerance = None if schedule is None else set(schedule), tolerance
        self.rebuilds: list[int] = []
        self.products = 0
        self._w: DenseW | None = None
        self._w_point = np.zeros(0)
        self._last: np.ndarray | None = None
        self._step, self._tries, self._longest = -1, 0, 0.0
        self._recent: list[float] = []  # the first step tried from each of the last three points

    def _track(self, p: np.ndarray) -> None:
        if p is self._last:
            self._tries += 1
        else:
            self._last, self._step, self._tries = p, self._step + 1, 0

    def _due(self, p: np.ndarray, h: float) -> bool:
        if self.schedule is not None:
            return self._tries == 0 and self._step in self.schedule
        if self._w is None:
            return True
        aged = self._step - self.rebuilds[-1] >= REBUILD_SPACING  # a W just built is not the problem
        if self._tries > 0:
            return self._tries == REBUILD_RETRIES and aged
        self._longest, self._recent = max(self._longest, h), [*self._recent[-2:], h]
        drift = float(np.linalg.norm(p - self._w_point)) / max(float(np.linalg.norm(self._w_point)), 1.0)
        # the last three steps: one cut short to land on a record does not count as shrinking
        return drift > REBUILD_DRIFT or (aged and max(self._recent) * REBUILD_SHRINK < self._longest)

    def __call__(self, p: np.ndarray, gradient: np.ndarray, h: float) -> tuple[np.ndarray, float, np.ndarray,
                                                                                float, float]:
        self._track(p)
        if self._due(p, h):
            self._build(p, h)
        step = self._step_with_w(p, gradient, h)
        if self._too_large(step[3], p):
            self._build(p, h)
            step = self._step_with_w(p, gradient, h)
        return step

    def _too_large(self, error: float, p: np.ndarray) -> bool:
        """A replay's step whose error estimate exceeds the run's tolerance, with a W built at an earlier step."""
        if self.schedule is None or self.tolerance is None or self.rebuilds[-1] == self._step:
            return False
        return error > self.tolerance * max(float(np.linalg.norm(p)), 1.0)

    def _build(self, p: np.ndarray, h: float) -> None:
        self._w = gauss_newton_w(self.field.E, self.field.values, self.field.bags, p, self.field.penalty)
        self._w_point, self._longest, self._recent = p.copy(), h, [h]
        self.rebuilds.append(self._step)

    def _step_with_w(self, p: np.ndarray, gradient: np.ndarray, h: float) -> tuple[np.ndarray, float, np.ndarray,
                                                                                    float, float]:
        assert self._w is not None
        scale = GAMMA * h
        k1 = self._w.solve(-gradient, scale)
        _, middle = self.field(p + h * k1)
        k2 = self._w.solve(-middle - 2 * k1, scale)
        new = p + h * (1.5 * k1 + 0.5 * k2)
        loss, new_gradient = self.field(new)
        return new, loss, new_gradient, 0.5 * h * float(np.linalg.norm(k1 + k2)), float(np.linalg.norm(new - p))
