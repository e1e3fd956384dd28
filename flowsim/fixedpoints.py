"""Fixed points of a vector field: batched Newton root finding, deduplication, stability, attractors.

Task-independent: `find_fixed_points` takes a field `field(t, y, args)`, its Jacobian and a
predicate saying which roots lie in the state space; `fixed_points` and `attractors` take a task
(`AbstractTask`), whose field, Jacobian, state space and symmetries they use.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from flowsim._compile import filter_jit
from flowsim._task import (
    canonical,
    distance_to_targets,
    distance_up_to_symmetry,
    task_jacobian,
    task_risk,
    task_vector_field,
)
from flowsim.integrate import evaluate, traced

__all__ = [
    "KINDS",
    "Attractor",
    "FixedPoint",
    "attractors",
    "classify",
    "describe_fixed_point",
    "find_fixed_points",
    "fixed_points",
    "newton_polish",
]

KINDS = ("sink", "source", "saddle", "non-hyperbolic")


class FixedPoint(eqx.Module):
    """A fixed point with its stability.

    **Fields:**

    - `point`: the state, shape (n,).
    - `kind`: one of `KINDS`.
    - `eigenvalues`: eigenvalues of the Jacobian there, sorted by real part.
    - `residual`: |field(point)|.
    - `value`: an observable there (e.g. the risk), or NaN.
    """

    point: np.ndarray
    kind: str
    eigenvalues: np.ndarray
    residual: float
    value: float = float("nan")


def classify(eigenvalues, band: float) -> str:
    """Stability from the Jacobian's eigenvalues: real parts within `band` of zero count as zero.

    **Returns:** "sink" (all real parts < -band), "source" (all > band), "saddle"
    (both signs, none within the band) or "non-hyperbolic".
    """
    real = np.real(np.asarray(eigenvalues))
    if np.any(np.abs(real) <= band):
        return "non-hyperbolic"
    if np.all(real < 0):
        return "sink"
    if np.all(real > 0):
        return "source"
    return "saddle"


@filter_jit
def newton_polish(field, starts, args, t, rtol=1e-13, atol=1e-13, max_steps=64):
    """Newton's method (optimistix) on field(t, y, args) = 0 from each row of `starts`.

    **Returns:** (roots, converged), of shapes (batch, n) and (batch,).
    """
    solver = optx.Newton(rtol=rtol, atol=atol)

    def one(y0):
        solution = optx.root_find(lambda y, a: field(t, y, a), solver, y0, args, max_steps=max_steps, throw=False)
        return solution.value, solution.result == optx.RESULTS.successful

    return jax.vmap(one)(starts)


def find_fixed_points(
    field: Callable,
    jacobian: Callable,
    starts,
    args,
    *,
    t: float = 0.0,
    accept: Callable[[np.ndarray], bool] = lambda y: True,
    observe: Callable | None = None,
    residual_tol: float = 1e-10,
    merge_tol: float = 1e-6,
    band: float = 1e-8,
) -> list[FixedPoint]:
    """Fixed points of `field` reached by Newton from many starts, deduplicated and classified.

    **Arguments:**

    - `field`: the vector field `field(t, y, args)`.
    - `jacobian`: its Jacobian `jacobian(t, y, args)`, shape (n, n).
    - `starts`: initial guesses, shape (batch, n).
    - `args`: passed to both.
    - `t`: the time at which a time-dependent field is frozen.
    - `accept`: keeps a root only if it lies in the state space (e.g. realizable overlaps).
    - `observe`: an optional scalar observable recorded at each fixed point.
    - `residual_tol`: a root must satisfy |field| <= residual_tol.
    - `merge_tol`: roots closer than this (max norm) are the same fixed point.
    - `band`: eigenvalues with |real part| <= band count as zero (see `classify`).

    **Returns:** the distinct fixed points, sorted by their coordinates.
    """
    roots, converged = newton_polish(field, jnp.asarray(starts, dtype=float), traced(args), jnp.asarray(t, float))
    roots, converged = np.asarray(roots), np.asarray(converged)
    distinct: list[np.ndarray] = []
    for root in roots[converged & np.isfinite(roots).all(axis=-1)]:
        if accept(root) and not any(np.max(np.abs(root - other)) <= merge_tol for other in distinct):
            distinct.append(root)
    points = [
        describe_fixed_point(field, jacobian, root, args, t=t, observe=observe, residual_tol=residual_tol, band=band)
        for root in sorted(distinct, key=tuple)
    ]
    return [point for point in points if point is not None]


def describe_fixed_point(
    field: Callable,
    jacobian: Callable,
    root,
    args,
    *,
    t: float = 0.0,
    observe: Callable | None = None,
    residual_tol: float = 1e-10,
    band: float = 1e-8,
) -> FixedPoint | None:
    """Residual, eigenvalues, kind and observable at an already found root.

    **Returns:** a `FixedPoint`, or None if |field(root)| > residual_tol.
    """
    residual = float(jnp.linalg.norm(evaluate(field, t, root, args)))
    if residual > residual_tol:
        return None
    eigenvalues = np.linalg.eigvals(np.asarray(evaluate(jacobian, t, root, args)))
    eigenvalues = eigenvalues[np.argsort(np.real(eigenvalues))]
    value = float(evaluate(observe, t, root, args)) if observe is not None else float("nan")
    return FixedPoint(np.asarray(root), classify(eigenvalues, band), eigenvalues, residual, value)


def _in_state_space(task, atol: float) -> Callable[[np.ndarray], bool]:
    return lambda y: not task.unrealizable(np.asarray(y)[None], atol=atol)


def fixed_points(task, starts, *, t: float = 0.0, band: float = 1e-8, **options) -> list[FixedPoint]:
    """Fixed points of a task's flow reached by Newton from `starts`, in its state space, classified.

    **Arguments:**

    - `task`: an `AbstractTask`; a scheduled parameter is frozen at time `t`.
    - `starts`: initial guesses, shape (batch, n).
    - `band`: eigenvalues with |real part| <= band count as zero.
    - `options`: `residual_tol` and `merge_tol` of `find_fixed_points`.

    **Returns:** the distinct fixed points, sorted, each with its kind, eigenvalues and risk.
    """
    starts = np.asarray(starts, dtype=float)
    return find_fixed_points(
        task_vector_field,
        task_jacobian,
        starts,
        task,
        t=t,
        accept=_in_state_space(task, 1e-9),
        observe=task_risk,
        band=band,
        **options,
    )


class Attractor(eqx.Module):
    """Where a share of trajectories ended.

    **Fields:** `point` (the canonical image under the task's symmetries, polished by Newton),
    `kind`, `eigenvalues`, `risk`, `count` (trajectories), `share` (of all trajectories),
    `is_target` (the point is one of the task's targets, up to its symmetries).
    """

    point: np.ndarray
    kind: str
    eigenvalues: np.ndarray
    risk: float
    count: int
    share: float
    is_target: bool


def attractors(
    task,
    final_states,
    *,
    t: float = 0.0,
    residual_tol: float = 1e-6,
    merge_tol: float = 1e-4,
    band: float = 1e-8,
) -> tuple[list[Attractor], np.ndarray]:
    """Group the end points of trajectories by the fixed point they reached.

    Each end point is polished by Newton; it belongs to a fixed point if the polished root is
    within `merge_tol` of it (up to the task's symmetries) and the field there is below
    `residual_tol`. End points that are not near a fixed point (still moving) are left unassigned,
    and so are non-finite ones.

    **Arguments:**

    - `task`: an `AbstractTask`; its field is frozen at time `t` (e.g. the end of a schedule).
    - `final_states`: end points, shape (batch, n).

    **Returns:** (attractors sorted by share, label per end point: index into the list or -1).
    """
    # Polish the raw end points and compare before choosing a representative: an end point with
    # kappa = -1e-6 and its polished root with kappa = 0 would otherwise be mirrored apart.
    finals = np.asarray(final_states, dtype=float)
    finite = np.isfinite(finals).all(axis=-1)
    starts = jnp.asarray(np.where(finite[:, None], finals, 0.0))
    roots, converged = newton_polish(task_vector_field, starts, traced(task), jnp.asarray(t, float))
    roots, converged = np.array(roots), np.asarray(converged) & finite
    near = converged & (np.max(np.abs(roots - np.where(finite[:, None], finals, 0.0)), axis=-1) <= merge_tol)
    # Only the roots used below: Newton from a far end point can diverge to inf, which canonical cannot compare.
    roots[near] = canonical(task, roots[near])
    in_space = _in_state_space(task, 1e-9)
    centres: list[np.ndarray] = []
    labels = np.full(len(finals), -1)
    for i in np.flatnonzero(near):
        if not in_space(roots[i]):
            continue
        for j, centre in enumerate(centres):
            if distance_up_to_symmetry(task, roots[i], centre) <= merge_tol:
                labels[i] = j
                break
        else:
            centres.append(roots[i])
            labels[i] = len(centres) - 1
    found = []
    for j, centre in enumerate(centres):
        # The centre is already a Newton root: only its residual and stability remain to compute.
        point = describe_fixed_point(
            task_vector_field, task_jacobian, centre, task, t=t, observe=task_risk, residual_tol=residual_tol, band=band
        )
        if point is None:
            labels[labels == j] = -1
            continue
        count = int(np.sum(labels == j))
        is_target = bool(distance_to_targets(task, point.point) <= merge_tol)
        attractor = Attractor(
            point.point, point.kind, point.eigenvalues, point.value, count, count / len(finals), is_target
        )
        found.append((attractor, j))
    found.sort(key=lambda item: -item[0].count)
    relabel = {old: new for new, (_, old) in enumerate(found)}
    labels = np.array([relabel.get(label, -1) for label in labels])
    return [attractor for attractor, _ in found], labels
