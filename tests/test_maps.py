"""Other attention maps on single-location regression: the risk by a rule over the scores (issue 12, first part).

Three independent routes: the closed form of the erf risk (docs/science.md section 3), Monte Carlo in
R^d (tokens sampled, the predictor evaluated on vectors with the given overlaps), and the Bayes risk
for softmax at the Bayes temperature (section 7).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowsim
from flowsim import quadrature, slr
from flowsim.tasks.slr._maps import ATTENTION_MAPS, attention_weights, risk_by_rule
from tests.reference import random_realizable_overlaps


@pytest.mark.parametrize(
    ("d", "L", "lam", "gamma", "eps", "rule", "tolerance"),
    [
        # Measured relative errors: 1.7e-8, 1e-12 and 7.4e-5; the tolerances are 10x those.
        (20, 3, 0.5, 0.7, 0.1, quadrature.gauss_hermite(3, 16), 2e-7),
        (400, 3, 0.1, math.sqrt(0.5), 0.0, quadrature.gauss_hermite(3, 16), 1e-11),
        (80, 10, 0.5, 0.7, 0.1, None, 1e-3),  # the default rule for L = 10: 2^14 Sobol' points
    ],
)
def test_erf_through_the_rule_is_the_closed_form(d, L, lam, gamma, eps, rule, tolerance):
    problem = slr.Problem(d, L, lam, gamma, eps)
    m = random_realizable_overlaps(np.random.default_rng(d), 4)
    exact = np.asarray(slr.population_risk(problem, m))
    np.testing.assert_allclose(risk_by_rule(problem, m, "erf", rule=rule), exact, rtol=tolerance)


def test_the_rule_is_slow_where_the_weights_are_steep():
    """The documented limit: at lam = 2, d = 80 (lam s kappa up to 13) the erf weights switch within a
    fraction of a standard deviation, and 24 Gauss-Hermite points per score still err by 0.6 %."""
    problem = slr.Problem(80, 2, 2.0, 1.0, 0.3)
    m = random_realizable_overlaps(np.random.default_rng(80), 4)
    exact = np.asarray(slr.population_risk(problem, m))
    error = np.abs(np.asarray(risk_by_rule(problem, m, "erf", rule=quadrature.gauss_hermite(2, 24))) / exact - 1)
    assert 1e-3 < error.max() < 1e-2


@pytest.mark.parametrize("attention", ATTENTION_MAPS)
def test_the_risk_is_the_monte_carlo_risk_in_rd(attention):
    """2^17 sequences at d = 20, L = 3: the rule's risk (order-16 product rule, error < 1e-7) is within
    4 standard errors of the empirical mean of (Y - T)^2 with vectors of the given overlaps."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1)
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(5), 1)[0])
    truth = slr.ground_truth(1, problem.d)
    k, v = slr.vectors_with_overlaps(m, truth, jax.random.key(2))
    np.testing.assert_allclose(slr.overlaps(k, v, truth), m, atol=1e-12)
    X, y, _ = slr.sample(problem, truth, jax.random.key(3), 2**17)
    T = jnp.sum(attention_weights(attention, problem.lam * (X @ k)) * (X @ v), axis=-1)
    squares = np.asarray((y - T) ** 2)
    mean, stderr = squares.mean(), squares.std() / math.sqrt(squares.size)
    risk = float(risk_by_rule(problem, m, attention, rule=quadrature.gauss_hermite(3, 16)))
    assert abs(risk - mean) < 4 * stderr, (risk, mean, stderr)


def test_softmax_at_the_bayes_temperature_has_the_bayes_risk():
    """gamma = 1, (k, v) = (k*, v*), lam = s: softmax attention is the Bayes predictor (section 7). Its
    risk by the rule (0.045544; 2^16 Sobol' points and 32 Gauss-Hermite points per score agree to 5e-7)
    is within 3 standard errors of the Monte Carlo Bayes risk; linear attention's is 132.01, softplus's
    0.1294: neither reaches it."""
    d, L = 20, 3
    problem = slr.Problem(d, L, math.sqrt(d / 2), 1.0, 0.1)
    rule = quadrature.sobol(L, 2**16)
    softmax = float(risk_by_rule(problem, slr.ORACLE, "softmax", rule=rule))
    bayes = slr.bayes_risk(problem, slr.ground_truth(0, d), 1, 200_000)
    assert abs(softmax - bayes.mean) < 3 * bayes.stderr
    assert float(risk_by_rule(problem, slr.ORACLE, "linear", rule=rule)) == pytest.approx(132.01, rel=1e-4)
    assert float(risk_by_rule(problem, slr.ORACLE, "softplus", rule=rule)) > softmax + 0.08


def test_the_risk_is_differentiable_and_refuses_bad_input():
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1)
    rule = quadrature.gauss_hermite(3, 8)
    m = jnp.array([0.5, 0.5, 0.1, -0.1, 0.2])
    gradient = jax.grad(lambda x: risk_by_rule(problem, x, "softmax", rule=rule))(m)
    step = 1e-6 * np.eye(5)
    central = [
        (
            float(risk_by_rule(problem, m + h, "softmax", rule=rule))
            - float(risk_by_rule(problem, m - h, "softmax", rule=rule))
        )
        / 2e-6
        for h in step
    ]
    np.testing.assert_allclose(gradient, central, rtol=0, atol=1e-8)  # central differences: error ~ h^2 + 1e-16 / h
    with pytest.raises(ValueError, match="attention must be one of"):
        risk_by_rule(problem, m, "relu")
    with pytest.raises(ValueError, match="rule must have dimension L = 3"):
        risk_by_rule(problem, m, rule=quadrature.gauss_hermite(2, 8))
    with pytest.raises(ValueError, match="has an entry outside"):
        risk_by_rule(problem, [2.0, 0, 0, 0, 0])


def test_the_flow_is_the_projected_gradient_of_the_rd_risk_mapped_to_the_overlaps():
    """In R^20: R(k, v) = the rule's risk at the overlaps of (k, v); its gradient on the spheres by
    autodiff, dk = -(I - k k^T) grad_k R (and dv), seen on the overlaps, is `flow_by_rule` (to 1e-12)."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1)
    rule = quadrature.gauss_hermite(3, 8)
    truth = slr.ground_truth(4, problem.d)
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(9), 1)[0])
    k, v = slr.vectors_with_overlaps(m, truth, jax.random.key(6))

    def risk(k, v):
        return risk_by_rule(problem, slr.overlaps(k, v, truth), "softmax", rule=rule, check=False)

    g_k, g_v = jax.grad(risk, (0, 1))(k, v)
    dk, dv = -(g_k - (g_k @ k) * k), -(g_v - (g_v @ v) * v)
    k_star, v_star = truth
    expected = jnp.array([dk @ k_star, dv @ v_star, dv @ k_star, dk @ v_star, dk @ v + k @ dv])
    np.testing.assert_allclose(slr.flow_by_rule(problem, m, "softmax", rule=rule), expected, rtol=0, atol=1e-12)


def test_the_erf_flow_through_the_rule_is_the_generated_flow():
    """The erf risk's closed-form flow (the task's vector field) against the rule's, 16 points per
    score at lam = 0.5: measured 2e-8 relative, tolerance 1e-7."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1)
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(11), 3))
    by_rule = slr.flow_by_rule(problem, m, "erf", rule=quadrature.gauss_hermite(3, 16))
    closed = jax.vmap(lambda x: problem.vector_field(0.0, x))(m)
    np.testing.assert_allclose(by_rule, closed, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("attention", ATTENTION_MAPS)
def test_m_is_invariant_under_every_maps_flow(attention):
    """Measured, not assumed (docs/science.md section 7): from two starts on M = {theta = eta = rho = 0}
    the flow of each map, integrated to t = 2, keeps theta, eta and rho at 0 (they stay exactly 0:
    the field has no component off M at points of M)."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1)
    rule = quadrature.gauss_hermite(3, 6)
    starts = np.array([[0.3, 0.5, 0.0, 0.0, 0.0], [-0.7, 0.2, 0.0, 0.0, 0.0]])

    def field(t, y, args):
        return slr.flow_by_rule(problem, y, attention, rule=rule)

    solved = flowsim.integrate(field, starts, np.linspace(0.0, 2.0, 5))
    assert not solved.failures()
    ys = np.asarray(solved.ys)
    assert np.abs(ys[..., 2:]).max() == 0.0 and np.abs(ys[:, -1, :2] - starts[:, :2]).max() > 1e-2  # it moved
