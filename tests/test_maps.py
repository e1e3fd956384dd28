"""Other attention maps on single-location regression: the risk by a rule over the scores (issue 12, first part).

Three independent routes: the closed form of the erf risk (docs/science.md section 3), Monte Carlo in
R^d (tokens sampled, the predictor evaluated on vectors with the given overlaps), and the Bayes risk
for softmax at the Bayes temperature (section 7).
"""

import math

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import quadrature, slr
from flowsim.tasks.slr import ATTENTION_MAPS, risk_by_rule
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
    np.testing.assert_allclose(risk_by_rule(problem, m, rule=rule), exact, rtol=tolerance)


def test_the_rule_is_slow_where_the_weights_are_steep():
    """The documented limit: at lam = 2, d = 80 (lam s kappa up to 13) the erf weights switch within a
    fraction of a standard deviation, and 24 Gauss-Hermite points per score still err by 0.6 %."""
    problem = slr.Problem(80, 2, 2.0, 1.0, 0.3)
    m = random_realizable_overlaps(np.random.default_rng(80), 4)
    exact = np.asarray(slr.population_risk(problem, m))
    error = np.abs(np.asarray(risk_by_rule(problem, m, rule=quadrature.gauss_hermite(2, 24))) / exact - 1)
    assert 1e-3 < error.max() < 1e-2


@pytest.mark.parametrize("attention", ATTENTION_MAPS)
def test_the_risk_is_the_monte_carlo_risk_in_rd(attention):
    """2^17 sequences at d = 20, L = 3: the rule's risk (order-16 product rule, error < 1e-7) is within
    4 standard errors of the empirical mean of (Y - T)^2 with vectors of the given overlaps."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, attention, quadrature.gauss_hermite(3, 16))
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(5), 1)[0])
    truth = slr.ground_truth(1, problem.d)
    k, v = slr.vectors_with_overlaps(m, truth, jax.random.key(2))
    np.testing.assert_allclose(slr.overlaps(k, v, truth), m, atol=1e-12)
    X, y, _ = slr.sample(problem, truth, jax.random.key(3), 2**17)
    squares = np.asarray((y - slr.predict(X, k, v, problem.lam, attention)) ** 2)
    mean, stderr = squares.mean(), squares.std() / math.sqrt(squares.size)
    risk = float(slr.population_risk(problem, m))
    assert abs(risk - mean) < 4 * stderr, (risk, mean, stderr)


def test_softmax_at_the_bayes_temperature_has_the_bayes_risk():
    """gamma = 1, (k, v) = (k*, v*), lam = s: softmax attention is the Bayes predictor (section 7). Its
    risk by the rule (0.045544; 2^16 Sobol' points and 32 Gauss-Hermite points per score agree to 5e-7)
    is within 3 standard errors of the Monte Carlo Bayes risk. Linear attention's is 132.01, larger by
    131.96 (its weights 1 + lam chi_l grow with every score: at lam = s the noise tokens' values are
    amplified, not suppressed); softplus's is 0.1294, larger by 0.084: neither reaches it."""
    d, L = 20, 3
    risks = {
        attention: float(
            slr.oracle_risk(slr.Problem(d, L, math.sqrt(d / 2), 1.0, 0.1, attention, quadrature.sobol(L, 2**16)))
        )
        for attention in ("softmax", "linear", "softplus")
    }
    bayes = slr.bayes_risk(slr.Problem(d, L, math.sqrt(d / 2), 1.0, 0.1), slr.ground_truth(0, d), 1, 200_000)
    assert abs(risks["softmax"] - bayes.mean) < 3 * bayes.stderr
    assert risks["linear"] - risks["softmax"] == pytest.approx(131.96, abs=0.01)
    assert risks["softplus"] - risks["softmax"] == pytest.approx(0.084, abs=0.001)


def test_the_risk_is_differentiable_and_refuses_bad_input():
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, "softmax", quadrature.gauss_hermite(3, 8))
    m = jnp.array([0.5, 0.5, 0.1, -0.1, 0.2])
    gradient = jax.grad(lambda x: problem.risk(0.0, x))(m)
    step = 1e-6 * np.eye(5)
    central = [
        (float(slr.population_risk(problem, m + h)) - float(slr.population_risk(problem, m - h))) / 2e-6 for h in step
    ]
    np.testing.assert_allclose(gradient, central, rtol=0, atol=1e-8)  # central differences: error ~ h^2 + 1e-16 / h
    with pytest.raises(ValueError, match=r"Problem\.attention must be one of"):
        slr.Problem(20, 3, 0.5, attention="relu")
    with pytest.raises(ValueError, match="rule must have dimension L = 3"):
        slr.Problem(20, 3, 0.5, attention="softmax", rule=quadrature.gauss_hermite(2, 8))
    with pytest.raises(ValueError, match="rule must have dimension L = 3"):
        risk_by_rule(problem, m, rule=quadrature.gauss_hermite(2, 8))
    with pytest.raises(ValueError, match=r"rule must be a flowsim\.quadrature\.GaussianRule"):
        slr.Problem(20, 3, 0.5, attention="softmax", rule="sobol")
    with pytest.raises(ValueError, match="has an entry outside"):
        slr.population_risk(problem, [2.0, 0, 0, 0, 0])


@pytest.mark.parametrize("attention", ATTENTION_MAPS)
def test_the_flow_is_the_projected_gradient_of_the_rd_risk_mapped_to_the_overlaps(attention):
    """In R^20: R(k, v) = the rule's risk at the overlaps of (k, v); its gradient on the spheres by
    autodiff, dk = -(I - k k^T) grad_k R (and dv), seen on the overlaps, is the task's vector field (to 1e-12)."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, attention, quadrature.gauss_hermite(3, 8))
    truth = slr.ground_truth(4, problem.d)
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(9), 1)[0])
    k, v = slr.vectors_with_overlaps(m, truth, jax.random.key(6))

    def risk(k, v):
        return problem.risk(0.0, slr.overlaps(k, v, truth))

    g_k, g_v = jax.grad(risk, (0, 1))(k, v)
    dk, dv = -(g_k - (g_k @ k) * k), -(g_v - (g_v @ v) * v)
    k_star, v_star = truth
    expected = jnp.array([dk @ k_star, dv @ v_star, dv @ k_star, dk @ v_star, dk @ v + k @ dv])
    np.testing.assert_allclose(problem.vector_field(0.0, m), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(slr.flow_by_rule(problem, m), expected, rtol=0, atol=1e-12)


def test_the_erf_flow_through_the_rule_is_the_generated_flow():
    """The erf risk's closed-form flow (the task's vector field) against the rule's, 16 points per
    score at lam = 0.5: measured 2e-8 relative, tolerance 1e-7."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1)
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(11), 3))
    by_rule = slr.flow_by_rule(problem, m, rule=quadrature.gauss_hermite(3, 16))
    closed = jax.vmap(lambda x: problem.vector_field(0.0, x))(m)
    np.testing.assert_allclose(by_rule, closed, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("attention", ATTENTION_MAPS)
def test_m_is_invariant_under_every_maps_flow(attention):
    """Measured, not assumed (docs/science.md section 7): from two starts on M = {theta = eta = rho = 0}
    the flow of each map (through the rule, erf included), integrated to t = 2 by the engine, keeps the
    distance to M at 0 exactly (the field has no component off M at points of M), and the restriction
    to M is the full flow's (kappa, nu) there."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, attention, quadrature.gauss_hermite(3, 6))
    starts = np.array([[0.3, 0.5, 0.0, 0.0, 0.0], [-0.7, 0.2, 0.0, 0.0, 0.0]])
    # Tsit5: on M at d = 20 the flow is not stiff, and it compiles faster than the task's Kvaerno3.
    solved = slr.solve_flow(problem, starts, np.linspace(0.0, 2.0, 5), solver=diffrax.Tsit5())
    assert not solved.failures()
    ys = np.asarray(solved.ys)
    assert slr.distance_to_manifold(ys).max() == 0.0 and np.abs(ys[:, -1, :2] - starts[:, :2]).max() > 1e-2
    on_m = problem.restriction()
    np.testing.assert_array_equal(on_m.vector_field(0.0, starts[:, :2]), problem.vector_field(0.0, starts)[:, :2])


def test_only_erf_has_the_sign_symmetry():
    """erf is odd, so (k, v) -> (-k, -v) leaves the risk unchanged; softmax, linear and softplus weights are
    not: the risk at -(k*, v*) differs, and the task declares the identity as its only symmetry."""
    flipped = -slr.ORACLE
    for attention in ATTENTION_MAPS:
        problem = slr.Problem(20, 3, 1.0, 1.0, 0.1, attention)
        same = float(slr.population_risk(problem, flipped)) == pytest.approx(float(slr.oracle_risk(problem)))
        assert same == (attention == "erf") == (len(problem.symmetries) == 2)


def test_the_fixed_points_on_m_of_each_map():
    """The engine's fixed points of each map's flow on M (d = 20, L = 3, lam = 1, gamma = 1, eps = 0.1),
    found by Newton from a lattice and classified by the Jacobian: what docs/science.md section 7 reports.
    erf: sinks +-(1, 1), saddle (0, 0). softmax and softplus: (1, 1) the only sink, (-1, -1) a saddle. linear:
    (k*, v*) is a saddle (risk 15.01); its sinks are (0, 1) and (-sqrt(0.4), -1), both at risk 5.01."""

    def found(attention):
        points = slr.fixed_points_on_manifold(slr.Problem(20, 3, 1.0, 1.0, 0.1, attention))
        return {tuple(np.round(point.point, 4)): (point.kind, round(point.value, 2)) for point in points}

    erf = found("erf")
    assert erf[1.0, 1.0][0] == erf[-1.0, -1.0][0] == "sink" and erf[0.0, 0.0][0] == "saddle"
    for attention in ("softmax", "softplus"):
        points = found(attention)
        assert [p for p, (kind, _) in points.items() if kind == "sink"] == [(1.0, 1.0)]
        assert points[-1.0, -1.0][0] == "saddle"
    linear = found("linear")
    assert linear[1.0, 1.0] == ("saddle", 15.01)
    assert linear[0.0, 1.0] == ("sink", 5.01) and linear[-0.6325, -1.0] == ("sink", 5.01)
