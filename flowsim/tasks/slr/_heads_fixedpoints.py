"""Fixed points of the heads' flow (docs/heads.md): Newton from the structured states, classified.

The structured states: the specialised oracles (head h on location pi(h), `HeadsProblem.targets`), collapsed
states (every key on one location's k*_j, the values sharing v*_j) and symmetric ones (every head equal, on the
mean of the targets); any further starts (a flow's end states) may be added. Each root is classified by
`flowsim.fixedpoints` (its Jacobian's eigenvalues) and named by the invariant sets it lies in (`invariant_sets`),
which say what it is without thresholds.
"""

import math

import numpy as np

from flowsim.fixedpoints import FixedPoint, fixed_points
from flowsim.tasks.slr._heads_problem import HeadsProblem
from flowsim.tasks.slr._heads_state import HeadsLayout, injective_assignments, specialised_state

__all__ = ["heads_fixed_points", "invariant_sets", "structured_states"]


def structured_states(problem: HeadsProblem) -> np.ndarray:
    """The specialised oracles, two collapsed states per location (keys k*_j, values v*_j / H plus parts orthogonal
    to the targets, orthonormal or cancelling) and one symmetric state (every head k = sum_j k*_j / sqrt(S), v
    likewise)."""
    layout = problem.layout
    H, S = layout.heads, layout.locations
    states = [specialised_state(layout, pi) for pi in injective_assignments(layout)]
    if H > 1:
        # The values v_h = v*_j / H + b u_h share v*_j: with u_h orthonormal (<v_h, v_h'> = 1/H^2), or cancelling
        # (the u_h on a simplex, sum_h u_h = 0: <v_h, v_h'> = 1/H^2 - (1 - 1/H^2) / (H - 1)).
        for shared in (1 / H**2, 1 / H**2 - (1 - 1 / H**2) / (H - 1)):
            for j in range(S):
                y = np.zeros(layout.dimension)
                y[layout.kappa[:, j]], y[layout.nu[:, j]] = 1.0, 1.0 / H
                y[layout.kk], y[layout.vv] = 1.0, shared
                states.append(y)
    y = np.zeros(layout.dimension)
    y[layout.kappa], y[layout.nu] = 1 / math.sqrt(S), 1 / math.sqrt(S)
    y[layout.kk], y[layout.vv] = 1.0, 1.0
    states.append(y)
    return np.array(states)


def invariant_sets(layout: HeadsLayout, y, atol: float = 1e-9) -> tuple[str, ...]:
    """The invariant sets state y lies in (to atol), by name (docs/heads.md; every one invariant for erf, "M"
    for every map):

    - "M": every key orthogonal to every value and to every v*_j (theta = eta = rho = kv = vk = 0);
    - "specialised pi": head h orthogonal to every location but pi(h), heads orthogonal to each other;
    - "collapsed j": every head orthogonal to every location but j;
    - "symmetric": every head equal (kk = vv = 1).
    """
    y = np.asarray(y, dtype=float)
    zero = np.abs(y) <= atol
    names = []
    if all(zero[np.ravel(index)].all() for index in (layout.theta, layout.eta, layout.rho, layout.kv, layout.vk)):
        names.append("M")
    by_location = np.stack([layout.kappa, layout.nu, layout.theta, layout.eta], -1)  # (H, S, 4)
    per_location = [by_location[:, j] for j in range(layout.locations)]
    pairs = np.concatenate([layout.kk, layout.kv, layout.vk, layout.vv])
    for pi in injective_assignments(layout):
        off = [per_location[j][h] for h, own in enumerate(pi) for j in range(layout.locations) if j != own]
        if all(zero[index].all() for index in off) and zero[pairs].all():
            names.append(f"specialised {tuple(j + 1 if j is not None else None for j in pi)}")
    if layout.heads > 1:
        for j in range(layout.locations):
            if all(zero[per_location[other]].all() for other in range(layout.locations) if other != j):
                names.append(f"collapsed {j + 1}")
        if np.allclose(y[layout.kk], 1.0, atol=atol) and np.allclose(y[layout.vv], 1.0, atol=atol):
            names.append("symmetric")
    return tuple(names)


def heads_fixed_points(
    problem: HeadsProblem, *, t: float = 0.0, starts=None, band: float = 1e-8
) -> list[tuple[FixedPoint, tuple[str, ...]]]:
    """Fixed points of the flow (its schedule frozen at time t) reached by Newton from `structured_states` and
    `starts` (e.g. a flow's end states, (batch, n)), classified, each with the invariant sets it lies in.

    **Returns:** [(FixedPoint, invariant sets)], sorted by the risk there.
    """
    guesses = structured_states(problem)
    if starts is not None:
        guesses = np.concatenate([guesses, np.asarray(starts, dtype=float).reshape(-1, problem.dimension)])
    found = fixed_points(problem, guesses, t=t, band=band)
    return sorted(((point, invariant_sets(problem.layout, point.point)) for point in found), key=lambda x: x[0].value)
