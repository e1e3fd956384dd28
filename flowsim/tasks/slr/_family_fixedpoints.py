"""Fixed points of the SLR family's free-norm flow on its invariant plane, classified in all seven directions."""

import numpy as np

from flowsim.fixedpoints import FixedPoint, fixed_points
from flowsim.tasks.slr._family_problem import FamilyProblem

__all__ = ["family_fixed_points"]


def family_fixed_points(problem: FamilyProblem, *, grid: tuple[int, int] = (13, 7), reach: float = 3.0):
    """The fixed points of the flow on the plane k || k*, v || v* (`FamilyProblem.restriction`), classified by the
    Jacobian of the flow on the seven.

    Newton runs from a lattice of the plane's box (`FamilyProblem.bounds`, `grid` points per axis); a root
    further than `reach` times the box from the origin is dropped: there the weights are saturated and the field
    vanishes only in the limit (Newton walks to |a| ~ 1e3 ... 1e30 along such an asymptote, "non-hyperbolic").
    Each root is then polished and classified on the seven, so "sink" means stable in every direction, M' and
    the plane's transverse ones included.

    **Arguments:** a `FamilyProblem` with free norms; `grid`, lattice points along a and e; `reach`.

    **Returns:** the distinct fixed points (seven coordinates), sorted, each with kind, eigenvalues and risk.
    """
    plane = problem.restriction()
    (a_low, a_high), (e_low, e_high) = plane.bounds
    axes = np.linspace(a_low, a_high, grid[0]), np.linspace(e_low, e_high, grid[1])
    starts = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2)
    roots = [point.point for point in fixed_points(plane, starts, merge_tol=1e-5)]
    box = reach * np.array([max(abs(a_low), abs(a_high)), max(abs(e_low), abs(e_high))])
    kept = [root for root in roots if np.all(np.abs(root) <= box)]
    if not kept:
        return []
    found: list[FixedPoint] = fixed_points(problem, plane.lift(np.array(kept)), merge_tol=1e-5)
    return found
