"""Owen's T and zeta in JAX against scipy, and their derivatives against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special

from flowsim._special import owens_t, zeta


def test_owens_t_matches_scipy():
    """<= 1e-12 absolute over h in [-10, 10], a in [0, 1] (and a > 1, a < 0 through the reflections)."""
    h, a = np.meshgrid(np.linspace(-10, 10, 401), np.linspace(0, 1, 101))
    assert np.abs(np.asarray(owens_t(h, a)) - special.owens_t(h, a)).max() <= 1e-12
    h, a = np.meshgrid(np.linspace(-10, 10, 101), np.concatenate([np.linspace(1, 30, 30), -np.linspace(0, 5, 11)]))
    assert np.abs(np.asarray(owens_t(h, a)) - special.owens_t(h, a)).max() <= 1e-12


def test_the_quadrature_of_t_is_exact_to_rounding_where_zeta_uses_it():
    """zeta's T(h, a) has a = 1 / sqrt(1 + 4 b^2) in (0, 1]: there the Gauss-Legendre rule alone is within
    1e-15 of scipy over h in [-40, 40] (measured 7e-17, rounding; 10 nodes would give 1.2e-14 and fail)."""
    h, a = np.meshgrid(np.linspace(-40, 40, 801), np.linspace(0.0, 1.0, 101))
    assert np.abs(np.asarray(owens_t(h, a)) - special.owens_t(h, a)).max() <= 1e-15


def test_owens_t_dtype_and_broadcast():
    value = owens_t(jnp.ones((3, 1)), jnp.linspace(0, 1, 4))
    assert value.shape == (3, 4) and value.dtype == jnp.float64


@pytest.mark.parametrize(("h", "a"), [(0.3, 0.2), (-1.7, 0.9), (4.0, 0.5), (0.0, 1.0), (2.0, 3.5)])
def test_owens_t_gradient_matches_finite_differences(h, a):
    """Central differences with step 1e-5 have truncation error ~1e-10 here; asserted to 1e-8."""
    grad = jax.grad(owens_t, argnums=(0, 1))(h, a)
    step = 1e-5
    fd_h = (special.owens_t(h + step, a) - special.owens_t(h - step, a)) / (2 * step)
    fd_a = (special.owens_t(h, a + step) - special.owens_t(h, a - step)) / (2 * step)
    assert float(grad[0]) == pytest.approx(fd_h, abs=1e-8)
    assert float(grad[1]) == pytest.approx(fd_a, abs=1e-8)


def _zeta_quadrature(a, b):
    f = lambda z: special.erf(a + b * z) ** 2 * np.exp(-(z**2) / 2) / np.sqrt(2 * np.pi)  # noqa: E731
    return integrate.quad(f, -np.inf, np.inf, epsabs=1e-13, epsrel=1e-13, limit=200)[0]


@pytest.mark.parametrize(("a", "b"), [(0.0, 0.1), (0.5, 0.3), (-2.0, 1.5), (3.0, 0.7), (14.1, 0.07)])
def test_zeta_matches_quadrature_and_finite_differences(a, b):
    assert float(zeta(a, b)) == pytest.approx(_zeta_quadrature(a, b), abs=1e-12)
    grad = jax.grad(zeta, argnums=(0, 1))(a, b)
    step = 1e-5
    fd_a = (zeta(a + step, b) - zeta(a - step, b)) / (2 * step)
    fd_b = (zeta(a, b + step) - zeta(a, b - step)) / (2 * step)
    assert float(grad[0]) == pytest.approx(float(fd_a), abs=1e-8)
    assert float(grad[1]) == pytest.approx(float(fd_b), abs=1e-8)


def test_zeta_batched_at_a_traced_parameter_computes_one_quadrature():
    """zeta's Owen's T argument 1 / sqrt(1 + 4 b^2) is at most 1: with b a traced parameter (as the engine's solves
    pass it) and a batched, zeta computes the small-argument quadrature alone, not also `owens_t`'s branch for
    arguments above 1 (normal CDFs and a second quadrature, which XLA could not prove dead: the field 1.6 times
    slower). Large b (argument near 0) still matches the quadrature."""
    jaxpr = str(jax.make_jaxpr(lambda a, b: jax.vmap(lambda a: zeta(a, b))(a))(jnp.linspace(-3, 3, 8), 0.5))
    assert "erfc" not in jaxpr and jaxpr.count(" exp ") == 1
    assert float(zeta(1.3, 40.0)) == pytest.approx(_zeta_quadrature(1.3, 40.0), abs=1e-12)
