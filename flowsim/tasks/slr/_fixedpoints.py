"""Fixed points of the single-location regression flow, from its structured and random starts."""

import jax
import numpy as np

from flowsim._checks import as_key
from flowsim.fixedpoints import FixedPoint
from flowsim.fixedpoints import fixed_points as find_fixed_points
from flowsim.tasks.slr._init import initial_overlaps
from flowsim.tasks.slr._problem import Problem

__all__ = ["fixed_points", "fixed_points_on_manifold"]


def fixed_points_on_manifold(problem: Problem, *, grid: int = 9, band: float = 1e-8) -> list[FixedPoint]:
    """Fixed points of the 2-D flow on M in the square [-1, 1]^2, classified.

    Newton runs from a grid x grid lattice of the square (corners included). Stability
    comes from the 2 x 2 Jacobian in (kappa, nu); at the corners kappa = +-1 is a
    quadratic chart of the sphere (kappa = cos phi), which doubles the eigenvalue but keeps its sign.

    **Returns:** the distinct fixed points, each with its kind, eigenvalues and risk.
    """
    axis = np.linspace(-1, 1, grid)
    starts = np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)
    return find_fixed_points(problem.restriction(), starts, band=band)


def fixed_points(problem: Problem, key, *, n_starts: int = 256, band: float = 1e-8) -> list[FixedPoint]:
    """Fixed points of the 5-D flow reached by Newton from random and structured starts.

    Starts: `n_starts` sphere initialisations, the same number on M, and the corners
    of M; only realizable roots are kept. Stability comes from the 5 x 5 Jacobian of
    the flow on the overlaps, which are coordinates of the dynamics modulo the
    rotations fixing k* and v*.

    **Arguments:**

    - `problem`: the task (a scheduled lam is taken at t = 0: give the lam of interest).
    - `key`: a JAX PRNG key or an integer seed for the random starts.

    **Returns:** the distinct fixed points, sorted, each with kind, eigenvalues and risk.
    """
    key_sphere, key_manifold = jax.random.split(as_key(key))
    corners = np.array([[a, b, 0, 0, 0] for a in (-1, 0, 1) for b in (-1, 0, 1)], dtype=float)
    starts = np.concatenate(
        [
            np.asarray(initial_overlaps(key_sphere, problem.d, n_starts, "sphere")),
            np.asarray(initial_overlaps(key_manifold, problem.d, n_starts, "manifold")),
            corners,
        ]
    )
    return find_fixed_points(problem, starts, band=band)
