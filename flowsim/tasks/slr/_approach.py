"""Whether an end point on M's edge is on its way to (k*, v*) under a map other than erf: a check of the flow's rates.

For erf, docs/science.md section 5 proves that a start on M near the edge nu = 1 with kappa > 0 and kappa rising
reaches the sink (1, 1), however slowly. For another map no such proof is at hand, and the edge need not lead to
the sink: ReLU's holds a fixed point at kappa = 0.948 (d = 20, L = 3, lam = 1, gamma = 1, eps = 0.1) and near 0.8
(d = 400, L = 10, lam = 0.9). The check here is numerical. On M the flow is kappa' = -(1 - kappa^2) R_kappa and
nu' = -(1 - nu^2) R_nu. If -R_kappa > 0 on [kappa0, 1) x [nu0, 1] and -R_nu > 0 on [kappa0, 1] x [nu0, 1), a start
(kappa0, nu0) stays in that rectangle, kappa and nu only rise, and the one fixed point they can end at is (1, 1).
`edge_leads_to_sink` checks those signs at the points of a grid of the rectangle. It is a check on a grid, not a
proof, and it asks each rate to exceed a floor, so that a rate lost in rounding is not taken for a positive one.
"""

import numpy as np

from flowsim._checks import Allowed

__all__ = ["RATE_FLOOR", "TOLERANCE", "edge_leads_to_sink"]

#: The distances to the target (max norm) that count an end point as converged, and its edge nu >= 1 - tol:
#: below 1. The overlaps are cosines, so a distance of 2 holds every state, and from 1 on the edge would reach
#: nu = 0, across which an odd map's target changes sign. The command line's distances between two end points
#: (`compare --attractor-tol`) are bounded alike.
TOLERANCE = Allowed("a number in (0, 1)", lambda x: 0 < x < 1)

#: The smallest rate -R_kappa or -R_nu taken as positive, relative to the largest rate on the grid where that is
#: above 1 (rounding grows with the size of the terms the rule sums). Erf's -R_kappa on the edge at lam = 0.9
#: (d = 400, L = 10) is below 1e-39 in exact arithmetic, and the default rule gives it as 1.4e-16 at most: float64's
#: rounding of the rule's sum. The floor is 7 000 times that. Softmax's smallest rate there is 7.5e-8 and sigmoid's
#: 2.5e-10; five independent Sobol rules (seeds 0-2, 2^14 to 2^18 points) agree on both to 0.5 % (BENCHMARKS.md,
#: "The rates on M's edge").
RATE_FLOOR = 1e-12

#: The grid's values of kappa: 128 equal steps over [0, 1), and 13 more closing in on 1 (1 - 1e-2 to 1 - 1e-8),
#: where the rates of the maps measured are smallest.
KAPPAS = np.unique(np.concatenate([np.linspace(0.0, 1.0, 129)[:-1], 1.0 - np.logspace(-2.0, -8.0, 13)]))


def edge_rows(tol: float) -> np.ndarray:
    """The grid's values of nu for an edge nu >= 1 - tol: 1 - tol 10^-j (j = 0 ... 14), and 1.

    A fixed count for every tol, so the grid has one shape and the rates one compiled program (for a small tol
    the last few round to 1, which repeats the row nu = 1 and changes no result).
    """
    return np.append(1.0 - tol * 10.0 ** -np.arange(15.0), 1.0)


def edge_leads_to_sink(problem, points: np.ndarray, t: float, tol: float) -> np.ndarray:
    """Whether the flow on M takes each point to (1, 1), by the signs of its rates on a grid.

    **Arguments:**

    - `problem`: a `Problem`; its scheduled lam is taken at time `t`.
    - `points`: (n, 2) values of (kappa, nu); only those with kappa > 0 and nu >= 1 - tol can pass.
    - `t`: the flow time at which the field is frozen.
    - `tol`: how far below 1 the edge's nu reaches.

    **Returns:** (n,) bool: True where -R_kappa and -R_nu (-R_nu below nu = 1 only, where nu' has the factor
    1 - nu^2) exceed the floor at every grid point (kappa, nu) with kappa at least the grid value at or below
    the point's kappa, and nu at least the grid value at or below its nu.
    """
    nus = edge_rows(tol)
    grid = np.zeros((len(KAPPAS), len(nus), 5))
    grid[..., 0], grid[..., 1] = KAPPAS[:, None], nus[None, :]
    rates = -np.asarray(problem.risk_gradient(t, grid))[..., :2]
    floor = RATE_FLOOR * max(1.0, float(np.abs(rates).max()))
    good = (rates[..., 0] > floor) & ((rates[..., 1] > floor) | (nus == 1.0))
    # good[i:, j:].all() for each (i, j): the logical "and" accumulated from the grid's corner (1, 1).
    from_corner = np.flip(np.logical_and.accumulate(np.logical_and.accumulate(np.flip(good), axis=0), axis=1))
    i = np.searchsorted(KAPPAS, points[:, 0], side="right") - 1
    j = np.searchsorted(nus, points[:, 1], side="right") - 1
    inside = (points[:, 0] > 0) & (j >= 0)
    return inside & from_corner[np.maximum(i, 0), np.maximum(j, 0)]
