"""The Gaussian rules of flowsim.quadrature against closed forms: exactness, measured errors, gradients."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import quadrature

#: A smooth test integrand with a closed form: E[exp(<a, Z>)] = exp(|a|^2 / 2).
A3 = jnp.array([0.3, -0.5, 0.2])
A10 = jnp.linspace(-0.3, 0.3, 10)


def _exponential(z, a):
    return jnp.exp(z @ a)


def _moment_generating(a) -> float:
    return math.exp(float(a @ a) / 2)


def test_gauss_hermite_is_exact_for_polynomials_up_to_its_degree():
    rule = quadrature.gauss_hermite(2, 3)  # exact up to degree 5 in each coordinate
    assert rule.size == 9 and rule.dimension == 2 and float(rule.weights.sum()) == pytest.approx(1.0, abs=1e-15)
    # E[Z1^4 Z2^2] = 3 * 1, E[Z1^5 Z2] = 0: to rounding.
    assert float(rule.expectation(lambda z: z[0] ** 4 * z[1] ** 2)) == pytest.approx(3.0, abs=1e-13)
    assert abs(float(rule.expectation(lambda z: z[0] ** 5 * z[1]))) < 1e-13
    # Degree 6 is beyond 3 points: E[Z^6] = 15, the rule gives 9.
    assert float(rule.expectation(lambda z: z[0] ** 6)) == pytest.approx(9.0, abs=1e-12)
    assert float(quadrature.gauss_hermite(2, 4).expectation(lambda z: z[0] ** 6)) == pytest.approx(15.0, abs=1e-12)


def test_gauss_hermite_of_order_8_on_a_smooth_integrand():
    """Measured relative error 3e-14 for E[exp(<a, Z>)], |a| = 0.62, in 3 dimensions (512 points)."""
    rule = quadrature.gauss_hermite(3, 8)
    value = float(rule.expectation(_exponential, A3))
    assert value == pytest.approx(_moment_generating(A3), rel=1e-12)


def test_a_sobol_set_beats_monte_carlo_by_two_orders_in_ten_dimensions():
    """2^14 points, E[exp(<a, Z>)], |a| = 0.6: the Sobol' set errs by 5e-5 (relative), where Monte
    Carlo with as many points has a standard error of 5.2e-3."""
    rule = quadrature.sobol(10, 2**14)
    exact = _moment_generating(A10)
    assert abs(float(rule.expectation(_exponential, A10)) / exact - 1) < 2e-4
    draws = np.exp(np.random.default_rng(0).standard_normal((2**14, 10)) @ np.asarray(A10))
    assert draws.std() / np.sqrt(draws.size) / exact > 4e-3


def test_rules_are_fixed_and_differentiable():
    """The same seed gives the same points; the gradient of a rule's expectation is the rule applied to
    the integrand's gradient (here d/da E[exp(<a, Z>)] = a exp(|a|^2 / 2), to 1e-11)."""
    np.testing.assert_array_equal(quadrature.sobol(3, 64, seed=1).points, quadrature.sobol(3, 64, seed=1).points)
    assert not np.array_equal(quadrature.sobol(3, 64, seed=1).points, quadrature.sobol(3, 64, seed=2).points)
    rule = quadrature.gauss_hermite(3, 8)
    gradient = jax.grad(lambda a: rule.expectation(_exponential, a))(A3)
    np.testing.assert_allclose(gradient, np.asarray(A3) * _moment_generating(A3), rtol=0, atol=1e-11)


def test_softmax_weights_average_to_one_over_m():
    """E[softmax(lam Z)_1] = 1/m for i.i.d. scores: exact for the permutation-symmetric product rule,
    within 1e-5 for a Sobol' set (measured 9e-7 at 2^14 points)."""
    weight = lambda z: jax.nn.softmax(2.0 * z)[0]  # noqa: E731
    assert float(quadrature.gauss_hermite(3, 8).expectation(weight)) == pytest.approx(1 / 3, abs=1e-15)
    assert float(quadrature.sobol(3, 2**14).expectation(weight)) == pytest.approx(1 / 3, abs=1e-5)


def test_the_default_rule_is_a_product_rule_while_it_is_small():
    assert quadrature.default_rule(3).name == "gauss-hermite(3, order 16)"  # the 4096-point budget spent
    assert quadrature.default_rule(4).name == "gauss-hermite(4, order 8)"
    assert quadrature.default_rule(5).name == "sobol(5, 16384 points, seed 0)"
    assert quadrature.default_rule(5, points=1024).name == "sobol(5, 1024 points, seed 0)"  # its cache takes keywords


def test_a_rule_first_asked_for_inside_a_trace_is_kept_concrete():
    """A cached rule made for the first time inside jax.jit holds arrays, not the trace's tracers (which the cache
    would hand, leaked, to every later call): the jitted call and a later plain one use the same rule."""
    made = quadrature.cached_rule(lambda order: quadrature.gauss_hermite(2, order))
    inside = jax.jit(lambda a: made(6).expectation(_exponential, a))(A3[:2])
    rule = made(6)
    assert not isinstance(rule.points, jax.core.Tracer) and not isinstance(rule.weights, jax.core.Tracer)
    assert float(rule.expectation(_exponential, A3[:2])) == pytest.approx(float(inside), rel=1e-14)
    assert float(inside) == pytest.approx(_moment_generating(A3[:2]), rel=1e-9)  # order 6: 3.4e-10


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: quadrature.gauss_hermite(0, 3), "m must be an integer >= 1, got 0"),
        (lambda: quadrature.gauss_hermite(10, 8), "a product rule of order 8 in m = 10 dimensions has 8^10"),
        (lambda: quadrature.sobol(3, 1000), "points must be a power of 2 (a Sobol' set's balance needs it), got 1000"),
        (lambda: quadrature.sobol(3, 1), "points must be an integer >= 2, got 1"),
    ],
)
def test_bad_sizes_are_refused(make, message):
    with pytest.raises(ValueError) as raised:
        make()
    assert str(raised.value).startswith(message)
