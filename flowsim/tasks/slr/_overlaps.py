"""The five overlaps (kappa, nu, theta, eta, rho) and their realizability."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from flowsim._checks import InvalidInput, as_floats, check_entries, wrong_shape

__all__ = ["OVERLAP_NAMES", "check_overlaps", "gram_matrix", "overlaps", "unrealizable", "validate_overlaps"]

#: The order of the overlaps everywhere in flowsim.
OVERLAP_NAMES = ("kappa", "nu", "theta", "eta", "rho")


def overlaps(k: Float[Array, "... d"], v: Float[Array, "... d"], truth) -> Float[Array, "... 5"]:
    """The overlaps of (k, v) with the hidden directions.

    **Arguments:**

    - `k`, `v`: key and value directions (unit vectors), shape (..., d) with any leading axes, finite.
    - `truth`: the hidden directions (k*, v*), each of shape (d,), e.g. from `ground_truth`.

    **Returns:** (kappa, nu, theta, eta, rho) = `(<k,k*>, <v,v*>, <v,k*>, <k,v*>, <k,v>)`
    on a last axis of size 5.
    """
    k_star, v_star = (check_entries(f"truth.{name}", x) for name, x in zip(("k_star", "v_star"), truth, strict=True))
    k, v = check_entries("k", k), check_entries("v", v)
    if k_star.ndim != 1 or v_star.shape != k_star.shape:
        raise wrong_shape("truth", "(d,) for both k_star and v_star", (k_star.shape, v_star.shape))
    for name, x in (("k", k), ("v", v)):
        if x.shape[-1:] != k_star.shape:
            raise wrong_shape(name, f"(..., d) with d = {k_star.shape[0]}, truth's dimension", x.shape)
    return jnp.stack([k @ k_star, v @ v_star, v @ k_star, k @ v_star, jnp.sum(k * v, axis=-1)], axis=-1)


def gram_matrix(m) -> np.ndarray:
    """The Gram matrix of (k*, v*, k, v) for overlaps m of shape (..., 5)."""
    kappa, nu, theta, eta, rho = np.moveaxis(np.asarray(m, dtype=np.float64), -1, 0)
    one, zero = np.ones_like(kappa), np.zeros_like(kappa)
    rows = [
        [one, zero, kappa, theta],
        [zero, one, eta, nu],
        [kappa, eta, one, rho],
        [theta, nu, rho, one],
    ]
    return np.stack([np.stack(row, axis=-1) for row in rows], axis=-2)


def check_overlaps(m, *, atol: float = 1e-10) -> np.ndarray:
    """Validate overlaps: every point must be realizable by unit vectors k, v.

    **Arguments:**

    - `m`: overlaps of shape (5,) or (..., 5), in the order of `OVERLAP_NAMES`.
    - `atol`: tolerance on |entry| <= 1 and on the Gram matrix's smallest eigenvalue.

    **Returns:** `m` as a float64 NumPy array.

    **Raises:** ValueError naming the first offending point and the reason: a wrong
    shape, a non-finite entry, an entry outside [-1, 1], or a Gram matrix of
    (k*, v*, k, v) that is not positive semidefinite.
    """
    array = as_floats("overlaps", m)
    _check_shape(array)
    problems = unrealizable(array.reshape(-1, 5), atol=atol)
    if problems:
        i, reason = next(iter(problems.items()))
        raise InvalidInput(f"overlaps point {_where(i, array.shape)} = {_show(array.reshape(-1, 5)[i])} {reason}")
    return array


def _check_shape(m) -> None:
    if np.ndim(m) == 0 or np.shape(m)[-1] != 5:
        raise InvalidInput(f"overlaps must have a last axis of size 5 {OVERLAP_NAMES}, got shape {np.shape(m)}")


def validate_overlaps(m, realizable: bool = True) -> None:
    """The check at a function's boundary: the shape always; with `realizable`, `check_overlaps` too,
    where m is concrete (inside `jax.jit` or `jax.grad` it was checked where it was)."""
    _check_shape(m)
    if realizable and not isinstance(m, jax.core.Tracer):
        check_overlaps(m)


def unrealizable(points, *, atol: float = 1e-10) -> dict[int, str]:
    """Which rows of `points` (shape (n, 5)) are not realizable, and why (one vectorised check).

    **Returns:** {row index: reason}, empty when every row is realizable; see `check_overlaps`.
    """
    points = np.asarray(points, dtype=np.float64)
    finite = np.isfinite(points).all(axis=-1)
    inside = (np.abs(np.where(finite[:, None], points, 0.0)) <= 1 + atol).all(axis=-1)
    smallest = np.full(len(points), -np.inf)
    if (finite & inside).any():
        smallest[finite & inside] = np.linalg.eigvalsh(gram_matrix(points[finite & inside]))[:, 0]
    problems = {}
    for i in np.flatnonzero(~finite | ~inside | (smallest < -atol)):
        if not finite[i]:
            problems[int(i)] = "has a non-finite entry"
        elif not inside[i]:
            problems[int(i)] = "has an entry outside [-1, 1]"
        else:
            problems[int(i)] = (
                f"is not realizable: the Gram matrix of (k*, v*, k, v) has eigenvalue {smallest[i]:.3g} < 0 "
                "(it must be positive semidefinite)"
            )
    return problems


def _where(flat_index: int, shape) -> str:
    return str(np.unravel_index(flat_index, shape[:-1])) if len(shape) > 1 else "(the only one)"


def _show(point) -> str:
    return "(" + ", ".join(f"{name}={value:.6g}" for name, value in zip(OVERLAP_NAMES, point, strict=True)) + ")"
