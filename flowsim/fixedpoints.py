"""Fixed points of a vector field: batched Newton root finding, deduplication, stability.

Task-independent: it takes a field `field(t, y, args)`, its Jacobian, and a
predicate saying which roots lie in the state space.
"""

from collections.abc import Callable
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from flowsim.integrate import evaluate, traced

__all__ = ["KINDS", "FixedPoint", "classify", "describe_fixed_point", "find_fixed_points", "newton_polish"]

KINDS = ("sink", "source", "saddle", "non-hyperbolic")


@dataclass(frozen=True)
class FixedPoint:
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


@eqx.filter_jit
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
