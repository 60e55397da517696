"""Gradient flow on p with E frozen (Lemmas 4.2 and 4.4, Theorem 4.3), followed in flow time.

The flow dp/dt = -grad L(p) is integrated by gradient steps of adaptive length, p <- p - eta grad L(p), each
advancing flow time by eta. A step is kept when its local error, estimated by the difference with the
trapezoidal (Heun) step, (eta / 2) |grad L(p_new) - grad L(p)|, is at most `tolerance` max(|p|, 1); its
successor's eta is then scaled by how much room the error left (the usual controller, exponent 1/2 for this
first-order pair). Where the loss is flat, as |p| grows, the steps grow with t: a flow time of 1e6 takes a few
hundred steps where a fixed rate needs 1e4 or more. Where the problem is stiff (real data), the steps stay near
the stability limit of plain gradient descent and the flow costs what plain descent at its best rate costs.
There `method="implicit"` follows the same flow by the linearly implicit ROS2 method (theory/stiff_flow.py): its
steps are bound by accuracy alone, each costing two evaluations and a few Hessian-vector products.

The trajectory is recorded at fixed flow times, three per doubling of t up to the horizon (every step is cut
to land on them), so that two runs are compared at the same times whatever their steps. `halved` replays a
run with every step split in two, by the same method: the check that the steps follow the flow.

Each step costs two products with E (a = E p, grad = E^T dL/da) and one fused pass over the corpus, all on
numba's threads. Two classes: v is one output vector; K > 2: V holds one per class, as columns.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from threadpoolctl import threadpool_limits

from toksel.models.fused import FusedBags
from toksel.models.threads import pass_threads
from toksel.runtime.errors import ToksError
from toksel.theory.flow_field import FlowField
from toksel.theory.mirror_step import MirrorStep
from toksel.theory.stiff_flow import FrozenRosenbrockStep, RosenbrockStep

# gradient steps with Heun's error estimate; ROS2 with a dense Gauss-Newton W kept over many steps, or with W the
# Hessian at every step by conjugate gradients (theory/stiff_flow.py)
METHODS = ("explicit", "implicit", "implicit-krylov")
RECORDS_PER_DOUBLING = 3
RECORDED_DOUBLINGS = 20  # the first record at horizon / 2^20 (about 1e-6 of it)
MAX_STEPS = 200_000  # a flow that needs more is too stiff for its horizon: the stage says so
Observer = Callable[[float, float, int], None]  # told (t, the step's length, steps so far) after each step kept
FIRST_STEP = 1e-3  # the first step's length, as a share of max(|p_0|, 1): the controller takes it from there


class StepCapReached(ToksError):
    """A flow that needs more than MAX_STEPS steps to reach its horizon; the caller names the key that sets it."""


def record_times(horizon: float) -> np.ndarray:
    """0, then horizon 2^(-k/3) for k = 60, ..., 0: three records per doubling of t, the last at the horizon."""
    exponents = np.arange(RECORDS_PER_DOUBLING * RECORDED_DOUBLINGS, -1, -1) / RECORDS_PER_DOUBLING
    return np.concatenate([[0.0], horizon * 2.0 ** -exponents])


@dataclass(frozen=True)
class Trajectory:
    times: np.ndarray  # (k,) the record times: 0, then record_times(horizon)
    loss: np.ndarray  # (k,) the loss (penalty included) at each record
    p: np.ndarray  # (k, d) p_t at each record
    step_sizes: np.ndarray  # every kept step's eta, in order: what `halved` replays
    rejected: int  # steps the controller refused and retried shorter
    first_step_change: float  # |p_1 - p_0| / |p_0|: a first step that throws p far from its start is too large
    method: str = "explicit"  # the integrator (METHODS): `halved` replays the run with the same one
    evaluations: int = 0  # evaluations of the loss and its gradient
    products: int = 0  # Hessian-vector products (implicit-krylov: each about one evaluation's cost)
    rebuilds: tuple[int, ...] = ()  # implicit: the kept steps at whose start its W was built (`halved` follows them)
    tolerance: float | None = None  # the controller's tolerance (None: a replay, which has no controller)
    potential: float = 2.0  # q of the l_q potential the flow's steps mirror through (2: gradient flow)

    @property
    def p_norm(self) -> np.ndarray:
        return np.linalg.norm(self.p, axis=1)

    @property
    def steps(self) -> int:
        return len(self.step_sizes)


class Stepper(Protocol):
    """One step of an integrator of the flow from p (gradient: grad L(p)) of length h: the new point, its loss and
    gradient, the estimate of the step's local error, and |p_new - p|."""

    field: FlowField

    def __call__(self, p: np.ndarray, gradient: np.ndarray, h: float) -> tuple[np.ndarray, float, np.ndarray,
                                                                                float, float]: ...


class GradientStep:
    """p <- p - h grad L(p); the local error estimated by the difference with the trapezoidal (Heun) step,
    (h / 2) |grad L(p_new) - grad L(p)|."""

    def __init__(self, field: FlowField) -> None:
        self.field = field

    def __call__(self, p: np.ndarray, gradient: np.ndarray, h: float) -> tuple[np.ndarray, float, np.ndarray,
                                                                                float, float]:
        candidate = p - h * gradient
        loss, new_gradient = self.field(candidate)
        error = h / 2 * float(np.linalg.norm(new_gradient - gradient))
        return candidate, loss, new_gradient, error, h * float(np.linalg.norm(gradient))


def _stepper(method: str, E: np.ndarray, v: np.ndarray, bags: FusedBags, penalty: float,
             rebuilds: tuple[int, ...] | None = None, tolerance: float | None = None,
             potential: float = 2.0) -> Stepper:
    if potential != 2.0:
        if method != "explicit":
            raise ToksError(f"gradient flow: the l_q potential (q = {potential:g}) takes explicit steps only, not "
                            f"{method!r}")
        return MirrorStep(FlowField(E, v, bags, penalty), potential)
    if method == "explicit":
        return GradientStep(FlowField(E, v, bags, penalty))
    if method == "implicit":
        return FrozenRosenbrockStep(E, v, bags, penalty, schedule=rebuilds, tolerance=tolerance)
    if method == "implicit-krylov":
        return RosenbrockStep(E, v, bags, penalty)
    raise ToksError(f"gradient flow: unknown method {method!r}: one of {', '.join(METHODS)}")


@dataclass(frozen=True)
class Integration:
    """How a flow is followed: up to flow time `horizon`, each step's local error at most `tolerance` relative to
    max(|p|, 1), by `method`: "explicit", gradient steps; "implicit", the linearly implicit ROS2 of
    theory/stiff_flow.py, whose steps are not bound by the stability limit of gradient descent (stiff flows).
    `potential` q other than 2: the mirror flow of the l_q potential (theory/mirror_step.py), explicit steps."""

    horizon: float
    tolerance: float
    method: str = "explicit"
    potential: float = 2.0
    stop_at_cap: bool = False  # True: a flow that needs more than MAX_STEPS steps ends there (its records so far);
    # False: StepCapReached


def run_gradient_flow(E: np.ndarray, p0: np.ndarray, v: np.ndarray, bags: FusedBags, integration: Integration,
                      penalty: float = 0.0, observe: Observer | None = None) -> Trajectory:
    """The flow from p0 with E and v frozen, followed as `integration` says; penalty: the flow of
    L + penalty/2 |p|^2, a loss with a finite minimiser; `observe` follows its progress (a bar, an estimate)."""
    stepper = _stepper(integration.method, E, v, bags, penalty, potential=integration.potential)
    with pass_threads(len(bags.tokens), E.size), _blas_threads(integration.method):
        run = _integrate(stepper, p0.astype(np.float64, copy=True), record_times(integration.horizon),
                         integration.tolerance, observe, integration.stop_at_cap)
    return replace(_counted(run, integration.method, stepper), tolerance=integration.tolerance,
                   potential=integration.potential)


def halved(E: np.ndarray, p0: np.ndarray, v: np.ndarray, bags: FusedBags, run: Trajectory,
           penalty: float = 0.0) -> Trajectory:
    """`run` again with every one of its steps split into two of half the length, by the same method: the same
    flow times (those it recorded: a run the step cap stopped is replayed as far as it went), twice the steps.
    Where the steps follow the flow, the two agree to the discretisation's error."""
    stepper = _stepper(run.method, E, v, bags, penalty, rebuilds=tuple(2 * step for step in run.rebuilds),
                       tolerance=run.tolerance, potential=run.potential)
    halves = np.repeat(run.step_sizes / 2, 2)
    with pass_threads(len(bags.tokens), E.size), _blas_threads(run.method):
        replay = _replay(stepper, p0.astype(np.float64, copy=True), run.times, halves)
    return replace(_counted(replay, run.method, stepper), potential=run.potential)


def _blas_threads(method: str) -> contextlib.AbstractContextManager:
    """The implicit methods' dense algebra (d x d products, eigendecompositions) on one BLAS thread: BLAS's threads
    spin between calls and slow the numba passes (and, where another process holds a core, themselves: an eigh of
    2048 x 2048 took 28 s on two threads against 1.6 s on one); one thread also gives the same numbers everywhere."""
    return contextlib.nullcontext() if method == "explicit" else threadpool_limits(limits=1)


def _counted(run: Trajectory, method: str, stepper: Stepper) -> Trajectory:
    return replace(run, method=method, evaluations=stepper.field.evaluations,
                   products=getattr(stepper, "products", 0), rebuilds=tuple(getattr(stepper, "rebuilds", ())))


def _integrate(stepper: Stepper, p: np.ndarray, times: np.ndarray, tolerance: float,
               observe: Observer | None, stop_at_cap: bool = False) -> Trajectory:
    loss, gradient = stepper.field(p)
    losses, snapshots, sizes, rejected = [loss], [p.copy()], [], 0
    start_norm = max(float(np.linalg.norm(p)), 1e-300)
    t, record, first_change = 0.0, 1, 0.0
    eta = FIRST_STEP * max(1.0, start_norm) / max(float(np.linalg.norm(gradient)), 1e-300)
    while record < len(times):
        if not np.any(gradient):  # at rest (or every exp underflowed): the flow stays where it is
            losses += [loss] * (len(times) - record)
            snapshots += [p.copy()] * (len(times) - record)
            break
        step = min(eta, times[record] - t)
        candidate, new_loss, new_gradient, error, moved = stepper(p, gradient, step)
        allowed = tolerance * max(1.0, float(np.linalg.norm(p)))
        growth = min(2.0, max(0.2, 0.9 * math.sqrt(allowed / max(error, 1e-300))))
        if not error <= allowed:  # NaN too: a failed step is retried shorter
            eta, rejected = step * growth, rejected + 1
            continue
        if not sizes:
            first_change = moved / start_norm
        p, loss, gradient, t = candidate, new_loss, new_gradient, t + step
        sizes.append(step)
        eta = max(eta, step) * growth  # a step cut to land on a record does not shrink the next one
        if observe is not None:
            observe(t, step, len(sizes))
        if len(sizes) > MAX_STEPS:
            if stop_at_cap:  # the records so far: the flow as far as the cap let it go
                times = times[:len(losses)]
                break
            raise StepCapReached(f"gradient flow: {MAX_STEPS:,} steps reached flow time {t:.3g} of the horizon "
                                 f"{times[-1]:.3g}: the problem is too stiff for it")
        if t >= times[record] * (1 - 1e-12):
            t = times[record]
            losses.append(loss)
            snapshots.append(p.copy())
            record += 1
    return Trajectory(times, np.array(losses), np.stack(snapshots), np.array(sizes), rejected, first_change)


def _replay(stepper: Stepper, p: np.ndarray, times: np.ndarray, sizes: np.ndarray) -> Trajectory:
    loss, gradient = stepper.field(p)
    losses, snapshots = [loss], [p.copy()]
    first_change = 0.0
    t, record = 0.0, 1
    for index, step in enumerate(sizes):
        p, loss, gradient, _, moved = stepper(p, gradient, step)
        if index == 0:
            first_change = moved / max(float(np.linalg.norm(snapshots[0])), 1e-300)
        t += step
        while record < len(times) and t >= times[record] * (1 - 1e-9):
            losses.append(loss)
            snapshots.append(p.copy())
            record += 1
    losses += [loss] * (len(times) - record)  # a run that came to rest before its horizon
    snapshots += [p.copy()] * (len(times) - record)
    return Trajectory(times, np.array(losses), np.stack(snapshots), sizes, 0, first_change)
