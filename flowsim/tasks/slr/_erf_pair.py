"""E[erf(Y_1) erf(Y_2)] for a bivariate normal Y: what the generated two-head moments call (derivations/slr_heads.py).

P(a_1, a_2, b_11, b_12, b_22) = E[erf(Y_1) erf(Y_2)], Y ~ N((a_1, a_2), [[b_11, b_12], [b_12, b_22]]), is a
bivariate normal probability, with no elementary closed form unless a = 0 (the arcsine law). Price's theorem
(dP/db_12 = E[erf'(Y_1) erf'(Y_2)], a Gaussian integral) integrated from b_12 = 0, in the angle phi with
b_12 = sqrt(p_1 p_2) sin(phi) / 2 (p_h = 1 + 2 b_hh), gives the one-dimensional integral

    P = erf(alpha_1) erf(alpha_2) + (2/pi) int_0^phi* exp(-(alpha_1^2 + alpha_2^2 - 2 alpha_1 alpha_2 sin phi)
        / cos^2 phi) dphi,   alpha_h = a_h / sqrt(p_h),  sin phi* = 2 b_12 / sqrt(p_1 p_2),

Sheppard's form of the bivariate normal orthant probability (the one Genz's algorithm integrates). Its exponent is
minus a non-negative number (|sin phi| <= 1), so nothing overflows, and the integrand is analytic on the interval;
a Gauss-Legendre rule of `NODES` points takes it. Its error against scipy's adaptive quadrature of the same
integral, with b_11 = b_22 = sin / (2 (1 - sin)) and means on grids of [-8, 8]^2 (up to 0.95) and [-40, 40]^2
(beyond): 3e-16 for |sin phi*| <= 0.9, 1e-14 at 0.95, 4e-10 at 0.99, 1e-8 at 0.995, 1e-6 at 0.999
(tests/test_heads_flow.py asserts 0.95 and 0.99). The informative tokens have |sin phi*| <= 2 lam^2 gamma^2 /
(1 + 2 lam^2 gamma^2): 0.8 at the authors' lam = 2, gamma^2 = 1/2; 0.99 needs lam^2 gamma^2 ~ 50. The derivatives
are closed forms (`jax.custom_jvp`): the flow is the exact gradient of the risk up to the rule's error in P alone.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf

__all__ = ["NODES", "erf_pair"]

#: Gauss-Legendre nodes of the angle integral (Genz uses 20 for |sin phi*| < 0.925).
NODES = 20
_X, _W = np.polynomial.legendre.leggauss(NODES)
_X, _W = (_X + 1) / 2, _W / 2


@jax.custom_jvp
def erf_pair(a1, a2, b11, b12, b22):
    """E[erf(Y_1) erf(Y_2)] for Y ~ N((a_1, a_2), [[b_11, b_12], [b_12, b_22]]) (module docstring).

    **Arguments:** `a1, a2` the means; `b11, b12, b22` the covariance (positive semidefinite); broadcast.

    **Returns:** the expectation, in [-1, 1].
    """
    a1, a2, b11, b12, b22 = jnp.broadcast_arrays(*(jnp.asarray(x, float) for x in (a1, a2, b11, b12, b22)))
    p1, p2 = 1 + 2 * b11, 1 + 2 * b22
    alpha1, alpha2 = a1 / jnp.sqrt(p1), a2 / jnp.sqrt(p2)
    end = jnp.arcsin(jnp.clip(2 * b12 / jnp.sqrt(p1 * p2), -1.0, 1.0))
    sine = jnp.sin(end[..., None] * _X)
    exponent = (alpha1[..., None] ** 2 + alpha2[..., None] ** 2 - 2 * (alpha1 * alpha2)[..., None] * sine) / (
        1 - sine**2
    )
    return erf(alpha1) * erf(alpha2) + 2 / jnp.pi * end * jnp.sum(_W * jnp.exp(-exponent), axis=-1)


def _mean_slope(a1, a2, b11, b12, b22):
    """dP/da_1 = E[erf'(Y_1) erf(Y_2)] (derivations/slr_heads.py, `_mean_slope`)."""
    p1 = 1 + 2 * b11
    determinant = p1 * (1 + 2 * b22) - 4 * b12**2
    argument = (a2 * p1 - 2 * b12 * a1) / jnp.sqrt(p1 * determinant)
    return 2 / jnp.sqrt(jnp.pi * p1) * jnp.exp(-(a1**2) / p1) * erf(argument)


def _variance_slope(a1, a2, b11, b12, b22):
    """dP/db_11 = (1/2) d^2 P / da_1^2 (the heat equation), the a_1-derivative of `_mean_slope` in closed form."""
    p1 = 1 + 2 * b11
    determinant = p1 * (1 + 2 * b22) - 4 * b12**2
    root = jnp.sqrt(p1 * determinant)
    argument = (a2 * p1 - 2 * b12 * a1) / root
    gauss = 2 / jnp.sqrt(jnp.pi * p1) * jnp.exp(-(a1**2) / p1)
    return gauss * (-a1 / p1 * erf(argument) - 2 * b12 / (jnp.sqrt(jnp.pi) * root) * jnp.exp(-(argument**2)))


def _cross_slope(a1, a2, b11, b12, b22):
    """dP/db_12 = E[erf'(Y_1) erf'(Y_2)] = (4/pi) det(I + 2B)^(-1/2) exp(-a^T (I + 2B)^-1 a) (Price's theorem)."""
    p1, p2 = 1 + 2 * b11, 1 + 2 * b22
    determinant = p1 * p2 - 4 * b12**2
    quadratic = (a1**2 * p2 - 4 * b12 * a1 * a2 + a2**2 * p1) / determinant
    return 4 / (jnp.pi * jnp.sqrt(determinant)) * jnp.exp(-quadratic)


@erf_pair.defjvp
def _erf_pair_jvp(primals, tangents):
    a1, a2, b11, b12, b22 = (jnp.asarray(x, float) for x in primals)
    da1, da2, db11, db12, db22 = tangents
    value = erf_pair(a1, a2, b11, b12, b22)
    slope = (
        _mean_slope(a1, a2, b11, b12, b22) * da1
        + _mean_slope(a2, a1, b22, b12, b11) * da2
        + _variance_slope(a1, a2, b11, b12, b22) * db11
        + _cross_slope(a1, a2, b11, b12, b22) * db12
        + _variance_slope(a2, a1, b22, b12, b11) * db22
    )
    return value, jnp.broadcast_to(slope, value.shape)
