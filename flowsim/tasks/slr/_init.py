"""Initial overlaps drawn exactly as the R^d initialisations would, without d-dimensional vectors."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from flowsim._checks import InvalidInput, as_key, check_count, concrete, python_scalar

__all__ = ["INITIALISATIONS", "chi_square", "initial_overlaps"]

INITIALISATIONS = ("sphere", "manifold")


def chi_square(key, dof: int, shape, dtype=float):
    """chi-square draws with dof degrees of freedom (zero when dof = 0), of this float dtype; dof may be traced."""
    draws = 2 * jax.random.gamma(key, jnp.maximum(dof, 1) / 2, shape, dtype)
    return jnp.where(dof == 0, jnp.zeros((), dtype), draws)


def initial_overlaps(key: PRNGKeyArray, d: int, n: int, kind: str = "sphere") -> Float[Array, "n 5"]:
    """Draw n initial overlaps with the exact law of the R^d initialisations (docs/science.md section 6).

    Write Gaussian vectors g, h of R^d by their coordinates on (k*, v*) and their parts
    g', h' in the orthogonal complement (dimension d - 2). Only (g1, g2, h1, h2) and the
    Gram matrix of (g', h') enter the overlaps, and that Gram matrix is Wishart with
    d - 2 degrees of freedom, drawn by the Bartlett decomposition:
    |g'|^2 = c1^2, <g', h'> = c1 z, |h'|^2 = z^2 + c2^2 with c1^2 ~ chi2(d - 2),
    c2^2 ~ chi2(d - 3), z ~ N(0, 1).

    - "sphere": k = g/|g|, v = h/|h| independent and uniform on the sphere.
    - "manifold": k is g made orthogonal to v*, v is h made orthogonal to k* and k, both
      normalised: kappa = g1 / sqrt(g1^2 + chi2(d-2)), nu = h2 / sqrt(h2^2 + chi2(d-3)),
      theta = eta = rho = 0.

    **Arguments:**

    - `key`: a JAX PRNG key or an integer seed.
    - `d`: the dimension (>= 3 for "manifold", >= 2 for "sphere").
    - `n`: the number of draws (>= 1).
    - `kind`: "sphere" or "manifold".

    **Returns:** overlaps of shape (n, 5).
    """
    if kind not in INITIALISATIONS:
        raise InvalidInput(f"kind must be one of {INITIALISATIONS}, got {kind!r}")
    n = check_count("n", n, 1)
    if concrete(d):  # a traced d (a chain's start in its compiled program) is its problem's, checked
        d = check_count("d", python_scalar(d), 3 if kind == "manifold" else 2)
    key_normal, key_c1, key_c2 = jax.random.split(as_key(key), 3)
    g1, g2, h1, h2, z = jax.random.normal(key_normal, (5, n))
    c1_squared = chi_square(key_c1, d - 2, (n,))
    c2_squared = chi_square(key_c2, jnp.maximum(d - 3, 0), (n,))
    if kind == "manifold":
        zeros = jnp.zeros(n)
        kappa = g1 / jnp.sqrt(g1**2 + c1_squared)
        nu = h2 / jnp.sqrt(h2**2 + c2_squared)
        return jnp.stack([kappa, nu, zeros, zeros, zeros], axis=-1)
    norm_g = jnp.sqrt(g1**2 + g2**2 + c1_squared)
    norm_h = jnp.sqrt(h1**2 + h2**2 + z**2 + c2_squared)
    inner = g1 * h1 + g2 * h2 + jnp.sqrt(c1_squared) * z
    return jnp.stack([g1 / norm_g, h2 / norm_h, h1 / norm_h, g2 / norm_g, inner / (norm_g * norm_h)], axis=-1)
