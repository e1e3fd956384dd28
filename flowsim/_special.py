"""What the generated equations call: Owen's T, zeta(a, b) = E[erf(a + bZ)^2], and `assemble`."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

__all__ = ["assemble", "owens_t", "zeta"]

# Gauss-Legendre rule on [0, 1]. For |a| <= 1 the integrand of T in t = x / a is
# exp(-h^2 (1 + a^2 t^2) / 2) / (1 + a^2 t^2): entire in t, and wherever it is narrow
# (|h a| large) the factor exp(-h^2 / 2) makes T negligible in absolute terms. 12 nodes
# reach 7e-17 absolute against scipy over h in [-40, 40], a in [0, 1] (a grid of 8001 x 201
# points; 10 nodes 1.2e-14, 20 nodes 8e-17: no better); each node is an exponential of every
# element (the flow's field 5 % cheaper than with 20); tests/test_special.py asserts 1e-12.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(12)
_NODES = (_NODES + 1) / 2
_WEIGHTS = _WEIGHTS / 2


def _owens_t_small_a(h, a):
    """T(h, a) for 0 <= a <= 1 by quadrature of its defining integral."""
    x2 = (a[..., None] * _NODES) ** 2
    integrand = jnp.exp(-0.5 * h[..., None] ** 2 * (1 + x2)) / (1 + x2)
    return a * jnp.sum(_WEIGHTS * integrand, axis=-1) / (2 * jnp.pi)


@jax.custom_jvp
def owens_t(h, a):
    """Owen's T function T(h, a) = (1/2pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx.

    Differentiable in both arguments (the derivatives are closed forms).

    **Arguments:**

    - `h`, `a`: real arrays, broadcast against each other.

    **Returns:** T(h, a), with the broadcast shape, in the inputs' float dtype.
    """
    h, a = jnp.broadcast_arrays(*_as_float(h, a))
    sign = jnp.sign(a)
    h, a = jnp.abs(h), jnp.abs(a)
    small = a <= 1
    direct = _owens_t_small_a(h, jnp.where(small, a, 1.0))
    # For a > 1 reflect to 1/a: T(h, a) = (Phi(h) + Phi(ah)) / 2 - Phi(h) Phi(ah) - T(ah, 1/a) (h >= 0).
    inv_a = jnp.where(small, 1.0, 1 / jnp.where(small, 1.0, a))
    ah = a * h
    reflected = 0.5 * (ndtr(h) + ndtr(ah)) - ndtr(h) * ndtr(ah) - _owens_t_small_a(ah, inv_a)
    return sign * jnp.where(small, direct, reflected)


def _as_float(h, a):
    dtype = jnp.result_type(h, a, float)
    return jnp.asarray(h, dtype), jnp.asarray(a, dtype)


@owens_t.defjvp
def _owens_t_jvp(primals, tangents):
    h, a = _as_float(*primals)
    dh, da = tangents
    value = owens_t(h, a)
    d_dh = -jnp.exp(-0.5 * h**2) * jax.scipy.special.erf(a * h / jnp.sqrt(2.0)) / (2 * jnp.sqrt(2 * jnp.pi))
    d_da = jnp.exp(-0.5 * h**2 * (1 + a**2)) / (2 * jnp.pi * (1 + a**2))
    # Tangents take the primal's dtype: float32 arguments may meet float64 parameters.
    return value, (d_dh * dh + d_da * da).astype(value.dtype)


@jax.custom_jvp
def zeta(a, b):
    """zeta(a, b) = E[erf(a + bZ)^2] for Z ~ N(0, 1), through Owen's T.

    zeta(a, b) = 1 - 8 T(sqrt(2) a / sqrt(1 + 2b^2), 1 / sqrt(1 + 4b^2)).

    **Arguments:**

    - `a`, `b`: real arrays, broadcast against each other.

    **Returns:** zeta(a, b), in [0, 1].
    """
    a, b = _as_float(a, b)
    q = 1 + 2 * b**2
    # T's second argument 1 / sqrt(1 + 4 b^2) lies in (0, 1]: the quadrature alone, without `owens_t`'s branch for
    # arguments above 1. Where b is a traced parameter and a batched, XLA cannot prove that branch dead and would
    # compute it for every element (two more quadratures and normal CDFs: the flow's field 1.6 times slower).
    return 1 - 8 * _owens_t_small_a(jnp.sqrt(2.0) * a / jnp.sqrt(q), 1 / jnp.sqrt(1 + 4 * b**2))


@zeta.defjvp
def _zeta_jvp(primals, tangents):
    # d zeta/da = 2 E[erf erf'] (lemma 3); d zeta/db = b d^2 zeta/da^2 (heat equation in (a, b^2/2)).
    a, b = _as_float(*primals)
    da, db = tangents
    q, q4 = 1 + 2 * b**2, 1 + 4 * b**2
    gauss = jnp.exp(-(a**2) / q)
    erf_part = jax.scipy.special.erf(a / jnp.sqrt(q * q4))
    d_da = 4 / jnp.sqrt(jnp.pi * q) * gauss * erf_part
    d2_da2 = (
        4
        / jnp.sqrt(jnp.pi * q)
        * gauss
        * (-2 * a / q * erf_part + 2 / jnp.sqrt(jnp.pi * q * q4) * jnp.exp(-(a**2) / (q * q4)))
    )
    value = zeta(a, b)
    return value, (d_da * da + b * d2_da2 * db).astype(value.dtype)


def assemble(shape: tuple[int, ...], *entries):
    """Stack scalar expressions (arrays of a common broadcast shape, or constants) into
    trailing axes of the given shape: the result has shape (*broadcast, *shape)."""
    entries = jnp.broadcast_arrays(*(jnp.asarray(e, dtype=float) for e in entries))
    return jnp.stack(entries, axis=-1).reshape(*entries[0].shape, *shape)
