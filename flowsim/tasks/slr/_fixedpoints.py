"""Fixed points and attractors of the single-location regression flow."""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from flowsim.tasks.slr import _generated as generated
from flowsim.fixedpoints import FixedPoint, describe_fixed_point, find_fixed_points, newton_polish
from flowsim.integrate import traced
from flowsim.schedules import Constant
from flowsim.tasks.slr._dynamics import (
    _flow_field_on_manifold,
    _lam,
    _parameters,
    _risk,
    _risk_on_manifold,
    flow_field,
)
from flowsim.tasks.slr._init import initial_overlaps
from flowsim.tasks.slr._overlaps import check_overlaps
from flowsim.tasks.slr._problem import Problem

__all__ = ["Attractor", "attractors", "canonical_sign", "fixed_points", "fixed_points_on_manifold"]

#: The oracle's overlaps; (k, v) -> (-k, -v) gives the same predictor.
ORACLE = np.array([1.0, 1.0, 0.0, 0.0, 0.0])


def _jacobian(t, m, args):
    return generated.jacobian(*jnp.moveaxis(m, -1, 0), *_parameters(args[0], _lam(args, t)))


def _jacobian_on_manifold(t, m, args):
    return generated.jacobian_on_manifold(*jnp.moveaxis(m, -1, 0), *_parameters(args[0], _lam(args, t)))


def canonical_sign(m):
    """Representative of m under the symmetry (k, v) -> (-k, -v), i.e.
    (kappa, nu, theta, eta, rho) -> (-kappa, -nu, -theta, -eta, rho), which leaves the
    predictor unchanged: the first of (kappa, nu, theta, eta) farther than 1e-9 from 0 is made positive."""
    m = np.array(m, dtype=float)
    leading = m[..., :4]
    first = np.argmax(np.abs(leading) > 1e-9, axis=-1)
    sign = np.sign(np.take_along_axis(leading, first[..., None], axis=-1))
    sign[sign == 0] = 1
    m[..., :4] *= sign
    return m


def _mirror(m):
    """The image of m under (k, v) -> (-k, -v)."""
    return np.asarray(m) * np.array([-1.0, -1.0, -1.0, -1.0, 1.0])


def _distance_up_to_symmetry(a, b) -> float:
    return float(min(np.max(np.abs(a - b)), np.max(np.abs(a - _mirror(b)))))


def _realizable(m) -> bool:
    try:
        check_overlaps(m, atol=1e-9)
    except ValueError:
        return False
    return True


def fixed_points_on_manifold(problem: Problem, *, grid: int = 9, band: float = 1e-8) -> list[FixedPoint]:
    """Fixed points of the 2-D flow on M in the square [-1, 1]^2, classified.

    Newton runs from a grid x grid lattice of the square (corners included). Stability
    comes from the 2 x 2 Jacobian in (kappa, nu); at the corners kappa = +-1 is a
    quadratic chart of the sphere (kappa = cos phi), which doubles the eigenvalue but keeps its sign.

    **Returns:** the distinct fixed points, each with its kind, eigenvalues and risk.
    """
    axis = np.linspace(-1, 1, grid)
    starts = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    args = (problem, Constant(problem.lam))
    return find_fixed_points(
        _flow_field_on_manifold,
        _jacobian_on_manifold,
        starts,
        args,
        accept=lambda m: bool(np.all(np.abs(m) <= 1 + 1e-9)),
        observe=_risk_on_manifold,
        band=band,
    )


def fixed_points(
    problem: Problem, key, *, n_starts: int = 256, lam: float | None = None, band: float = 1e-8
) -> list[FixedPoint]:
    """Fixed points of the 5-D flow reached by Newton from random and structured starts.

    Starts: `n_starts` sphere initialisations, the same number on M, and the corners
    of M; only realizable roots are kept. Stability comes from the 5 x 5 Jacobian of
    the flow on the overlaps, which are coordinates of the dynamics modulo the
    rotations fixing k* and v*.

    **Arguments:**

    - `problem`: the task; `lam` overrides problem.lam (e.g. a schedule's final value).
    - `key`: a JAX PRNG key for the random starts.

    **Returns:** the distinct fixed points, sorted, each with kind, eigenvalues and risk.
    """
    key_sphere, key_manifold = jax.random.split(key)
    corners = np.array([[a, b, 0, 0, 0] for a in (-1, 0, 1) for b in (-1, 0, 1)], dtype=float)
    starts = np.concatenate(
        [
            np.asarray(initial_overlaps(key_sphere, problem.d, n_starts, "sphere")),
            np.asarray(initial_overlaps(key_manifold, problem.d, n_starts, "manifold")),
            corners,
        ]
    )
    args = (problem, Constant(problem.lam if lam is None else lam))
    return find_fixed_points(flow_field, _jacobian, starts, args, accept=_realizable, observe=_risk, band=band)


@dataclass(frozen=True)
class Attractor:
    """Where a share of trajectories ended.

    **Fields:** `point` (canonical sign, polished by Newton), `kind`, `eigenvalues`,
    `risk`, `count` (trajectories), `share` (of all trajectories), `is_oracle`
    (the point is +-(k*, v*)).
    """

    point: np.ndarray
    kind: str
    eigenvalues: np.ndarray
    risk: float
    count: int
    share: float
    is_oracle: bool


def attractors(
    problem: Problem,
    final_states,
    *,
    lam: float | None = None,
    residual_tol: float = 1e-6,
    merge_tol: float = 1e-4,
    band: float = 1e-8,
) -> tuple[list[Attractor], np.ndarray]:
    """Group the end points of trajectories by the fixed point they reached.

    Each end point is polished by Newton; it belongs to a fixed point if the
    polished root is within `merge_tol` of it (after the (k, v) -> (-k, -v) symmetry)
    and the field there is below `residual_tol`. End points that are not near a fixed
    point (still moving, e.g. a stalled kappa) are left unassigned.

    **Arguments:**

    - `problem`, `lam`: the field frozen at lam (default problem.lam).
    - `final_states`: end points, shape (batch, 5).

    **Returns:** (attractors sorted by share, label per end point: index into the list or -1).
    """
    # Polish the raw end points and compare before choosing a sign: an end point with
    # kappa = -1e-6 and its polished root with kappa = 0 would otherwise be mirrored apart.
    finals = np.asarray(final_states, dtype=float)
    args = (problem, Constant(problem.lam if lam is None else lam))
    finite = np.isfinite(finals).all(axis=-1)
    starts = jnp.asarray(np.where(finite[:, None], finals, 0.0))
    roots, converged = newton_polish(flow_field, starts, traced(args), jnp.asarray(0.0))
    roots, converged = np.asarray(roots), np.asarray(converged) & finite
    near = converged & (np.max(np.abs(roots - finals), axis=-1) <= merge_tol)
    roots = canonical_sign(roots)
    centres: list[np.ndarray] = []
    labels = np.full(len(finals), -1)
    for i in np.flatnonzero(near):
        if not _realizable(roots[i]):
            continue
        for j, centre in enumerate(centres):
            if _distance_up_to_symmetry(roots[i], centre) <= merge_tol:
                labels[i] = j
                break
        else:
            centres.append(roots[i])
            labels[i] = len(centres) - 1
    found = []
    for j, centre in enumerate(centres):
        # The centre is already a Newton root: only its residual and stability remain to compute.
        point = describe_fixed_point(
            flow_field, _jacobian, centre, args, observe=_risk, residual_tol=residual_tol, band=band
        )
        if point is None:
            labels[labels == j] = -1
            continue
        count = int(np.sum(labels == j))
        found.append(
            (
                Attractor(
                    point.point,
                    point.kind,
                    point.eigenvalues,
                    point.value,
                    count,
                    count / len(finals),
                    bool(np.max(np.abs(point.point - ORACLE)) <= merge_tol),
                ),
                j,
            )
        )
    found.sort(key=lambda item: -item[0].count)
    relabel = {old: new for new, (_, old) in enumerate(found)}
    labels = np.array([relabel.get(label, -1) for label in labels])
    return [attractor for attractor, _ in found], labels
