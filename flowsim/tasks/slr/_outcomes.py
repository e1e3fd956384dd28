"""Where trajectories ended: at +-(k*, v*), on their way to it, at another attractor, or elsewhere."""

from dataclasses import dataclass

import jax
import numpy as np

from flowsim.integrate import evaluate
from flowsim.schedules import Constant
from flowsim.tasks.slr._dynamics import flow_field
from flowsim.tasks.slr._fixedpoints import ORACLE, Attractor, attractors, canonical_sign
from flowsim.tasks.slr._problem import Problem

__all__ = ["Outcomes", "classify_end_points", "distance_to_oracle"]

_flow_batch = jax.vmap(flow_field, (None, 0, None))


def distance_to_oracle(m):
    """Max-norm distance of overlaps m (..., 5) to +-(k*, v*), up to (k, v) -> (-k, -v)."""
    return np.max(np.abs(canonical_sign(m) - ORACLE), axis=-1)


@dataclass(frozen=True)
class Outcomes:
    """The classes of n end points.

    **Fields:**

    - `reached`: (n,) bool, within `tol` (max norm, up to (k, v) -> (-k, -v)) of +-(k*, v*).
    - `approaching`: (n,) bool, not yet within tol but on M (to tol) with |nu| >= 1 - tol,
      sign(kappa) = sign(nu) and kappa still moving towards +-1: on M this implies convergence.
    - `others`: the other attractors reached, shares relative to all n end points.
    - `unassigned`: end points near no fixed point (still moving, e.g. a stalled kappa).
    - `failed`: non-finite end points or failed solves.
    """

    reached: np.ndarray
    approaching: np.ndarray
    others: list[Attractor]
    unassigned: int
    failed: int

    @property
    def n(self) -> int:
        return len(self.reached)

    @property
    def oracle_share(self) -> float:
        """Share of end points that reached or are approaching +-(k*, v*)."""
        return float(np.sum(self.reached | self.approaching)) / self.n


def classify_end_points(
    problem: Problem, finals, *, lam: float, tol: float, merge_tol: float = 1e-4, ok=None
) -> Outcomes:
    """Classify end points of the flow (or of an algorithm following it) at the final lam.

    **Arguments:**

    - `problem`: the task; the field is frozen at `lam` (the schedule's final value).
    - `finals`: end points, shape (n, 5).
    - `tol`: distance to +-(k*, v*) counted as reached.
    - `merge_tol`: how close an end point must be to a fixed point to be assigned to it
      (small for exact dynamics, about `tol` for noisy SGD iterates).
    - `ok`: optional (n,) bool, False for trajectories whose solve failed.

    **Returns:** an `Outcomes`.
    """
    finals = np.asarray(finals, dtype=float)
    finite = np.isfinite(finals).all(axis=-1) & (np.ones(len(finals), bool) if ok is None else np.asarray(ok))
    safe = np.where(finite[:, None], finals, 0.0)
    reached = finite & (distance_to_oracle(safe) <= tol)
    velocity = np.asarray(evaluate(_flow_batch, 0.0, safe, (problem, Constant(lam))))
    kappa, nu = safe[:, 0], safe[:, 1]
    approaching = (
        finite
        & ~reached
        & (np.linalg.norm(safe[:, 2:], axis=-1) <= tol)
        & (np.abs(nu) >= 1 - tol)
        & (kappa * nu > 0)
        & (velocity[:, 0] * np.sign(kappa) > 0)
    )
    rest = finite & ~reached & ~approaching
    others: list[Attractor] = []
    if rest.any():
        # All rows (the others as NaN, which attractors() skips): one compiled Newton polish per shape.
        found, _ = attractors(problem, np.where(rest[:, None], finals, np.nan), lam=lam, merge_tol=merge_tol)
        others = [Attractor(**{**a.__dict__, "share": a.count / len(finals)}) for a in found if not a.is_oracle]
    return Outcomes(reached, approaching, others, int(rest.sum()) - sum(a.count for a in others), int((~finite).sum()))
