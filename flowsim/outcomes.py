"""Where trajectories ended: at a target, on their way to one, at another attractor, or elsewhere."""

import dataclasses

import equinox as eqx
import jax
import numpy as np

from flowsim._task import distance_to_targets, task_vector_field
from flowsim.fixedpoints import Attractor, attractors
from flowsim.integrate import evaluate

__all__ = ["Outcomes", "classify_end_points"]

_field_batch = jax.vmap(task_vector_field, (None, 0, None))


class Outcomes(eqx.Module):
    """The classes of n end points.

    **Fields:**

    - `reached`: (n,) bool, within `tol` (max norm, up to the task's symmetries) of a target.
    - `approaching`: (n,) bool, not yet within tol but shown to be on the way to a target
      (`AbstractTask.approaching`).
    - `others`: the other attractors reached, shares relative to all n end points.
    - `unassigned`: end points near no fixed point (still moving).
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
    def target_share(self) -> float:
        """Share of end points that reached or are approaching a target."""
        return float(np.sum(self.reached | self.approaching)) / self.n


def classify_end_points(task, finals, *, t: float = 0.0, tol: float, merge_tol: float = 1e-4, ok=None) -> Outcomes:
    """Classify end points of the flow (or of an algorithm following it), with the field frozen at time t.

    **Arguments:**

    - `task`: an `AbstractTask`; its scheduled parameter is taken at time `t` (the end of a schedule).
    - `finals`: end points, shape (n, dimension).
    - `tol`: distance to a target counted as reached (a task's `approaching`, asked only where some end point is
      neither reached nor failed, may bound it: the attention task's is below 1).
    - `merge_tol`: how close an end point must be to a fixed point to be assigned to it
      (small for exact dynamics, about `tol` for noisy SGD iterates).
    - `ok`: optional (n,) bool, False for trajectories whose computation failed.

    **Returns:** an `Outcomes`.
    """
    finals = np.asarray(finals, dtype=float)
    finite = np.isfinite(finals).all(axis=-1) & (np.ones(len(finals), bool) if ok is None else np.asarray(ok))
    safe = np.where(finite[:, None], finals, 0.0)
    reached = finite & (distance_to_targets(task, safe) <= tol)
    pending = finite & ~reached
    approaching = pending.copy()
    if pending.any():  # (all rows: one compiled field per shape)
        velocity = np.asarray(evaluate(_field_batch, float(t), safe, task))
        approaching &= task.approaching(safe, velocity, tol, t)
    rest = pending & ~approaching
    others: list[Attractor] = []
    if rest.any():
        # All rows (the others as NaN, which attractors() skips): one compiled Newton polish per shape.
        found, _ = attractors(task, np.where(rest[:, None], finals, np.nan), t=t, merge_tol=merge_tol)
        others = [dataclasses.replace(a, share=a.count / len(finals)) for a in found if not a.is_target]
    return Outcomes(reached, approaching, others, int(rest.sum()) - sum(a.count for a in others), int((~finite).sum()))
