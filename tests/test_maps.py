"""Other attention maps on single-location regression: the risk by a rule over the scores (issue 12, first part).

Three independent routes: the closed form of the erf risk (docs/science.md section 3), Monte Carlo in
R^d (tokens sampled, the predictor evaluated on vectors with the given overlaps), and the Bayes risk
for softmax at the Bayes temperature (section 7).
"""

import math
import re
import types

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import quadrature, slr
from flowsim.outcomes import classify_end_points
from flowsim.tasks.slr import ATTENTION_MAPS, risk_by_rule
from flowsim.tasks.slr import _generated_maps as generated_maps
from flowsim.tasks.slr._approach import edge_leads_to_sink
from flowsim.tasks.slr._attention import informative_weights, noise_statistics
from tests.reference import random_realizable_overlaps
from tests.shared import CAPPED

#: A realizable overlap point near the oracle (the Gram matrix's smallest eigenvalue 0.032).
NEAR_ORACLE = np.array([0.9, 0.8, 0.1, -0.1, 0.2])
#: An odd map of a researcher's: (k, v) -> (-k, -v) is a symmetry of its task.
TANH = slr.AttentionMap("tanh", jnp.tanh)
#: Every built-in map by name, and the capped softmax.
EVERY_MAP = (*ATTENTION_MAPS, CAPPED)


def _name(attention) -> str:
    return getattr(attention, "name", attention)


@jax.jit
def _field(problem, y):
    """A task's vector field at t = 0, compiled once per task (its map and static sizes) and shape: evaluated
    op by op, the generated expressions would compile each of their hundreds of operations."""
    return problem.vector_field(0.0, y)


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


@pytest.mark.parametrize("attention", EVERY_MAP, ids=_name)
def test_the_risk_is_the_monte_carlo_risk_in_rd(attention):
    """2^17 sequences at d = 20, L = 3, at two overlap points (a random one, and one near the oracle where
    the capped softmax's cap binds for most informative tokens: lam s kappa = 1.4 > 1): the rule's risk
    (order-16 product rule) is within 4 standard errors of the empirical mean of (Y - T)^2 with vectors of
    the given overlaps."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, attention, quadrature.gauss_hermite(3, 16))
    truth = slr.ground_truth(1, problem.d)
    X, y, _ = slr.sample(problem, truth, jax.random.key(3), 2**17)
    points = jnp.asarray([random_realizable_overlaps(np.random.default_rng(5), 1)[0], NEAR_ORACLE])
    for i, m in enumerate(points):
        k, v = slr.vectors_with_overlaps(m, truth, jax.random.key(2 + i))
        np.testing.assert_allclose(slr.overlaps(k, v, truth), m, atol=1e-12)
        squares = np.asarray((y - slr.predict(X, k, v, problem.lam, attention)) ** 2)
        mean, stderr = squares.mean(), squares.std() / math.sqrt(squares.size)
        risk = float(slr.population_risk(problem, m))
        assert abs(risk - mean) < 4 * stderr, (i, risk, mean, stderr)


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
    gradient = problem.risk_gradient(0.0, m)
    step = 1e-6 * np.eye(5)
    central = [
        (float(slr.population_risk(problem, m + h)) - float(slr.population_risk(problem, m - h))) / 2e-6 for h in step
    ]
    np.testing.assert_allclose(gradient, central, rtol=0, atol=1e-8)  # central differences: error ~ h^2 + 1e-16 / h
    with pytest.raises(ValueError, match=r"Problem\.attention must be one of .* or a flowsim\.slr\.AttentionMap"):
        slr.Problem(20, 3, 0.5, attention="tanh")
    with pytest.raises(ValueError, match="rule must have dimension L = 3"):
        slr.Problem(20, 3, 0.5, attention="softmax", rule=quadrature.gauss_hermite(2, 8))
    with pytest.raises(ValueError, match="rule must have dimension L = 3"):
        risk_by_rule(problem, m, rule=quadrature.gauss_hermite(2, 8))
    with pytest.raises(ValueError, match=r"rule must be a flowsim\.quadrature\.GaussianRule"):
        slr.Problem(20, 3, 0.5, attention="softmax", rule="sobol")
    with pytest.raises(ValueError, match="has an entry outside"):
        slr.population_risk(problem, [2.0, 0, 0, 0, 0])


@pytest.mark.parametrize("attention", EVERY_MAP, ids=_name)
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
    np.testing.assert_allclose(_field(problem, m), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(slr.flow_by_rule(problem, m), expected, rtol=0, atol=1e-12)


@jax.jit
def _per_point_route(problem, m):
    """The risk, flow and Jacobian of the rule's risk taken point by point: the mean over the rule's points of the
    generated conditional risk (no means of monomials), differentiated by autodiff (forward over reverse)."""
    rule = problem.rule

    def risk(point):
        u1, noise = rule.points[:, 0], rule.points[:, 1:]
        statistics = noise_statistics(problem.attention, problem.lam, noise, problem.L)
        score = problem.lam * (problem.s * point[0] + problem.gamma * u1)
        w1, S1, S2 = informative_weights(problem.attention, score, statistics, problem.L)
        values = generated_maps.conditional_risk(u1, w1, S1, S2, *point, problem.d, problem.gamma, problem.eps)
        return rule.weights @ values

    def flow(point):
        return generated_maps.projected_flow(*point, *jax.grad(risk)(point))

    return jax.vmap(risk)(m), jax.vmap(flow)(m), jax.vmap(jax.jacfwd(flow))(m)


@pytest.mark.parametrize("attention", ("softmax", "linear", "relu"), ids=_name)  # each normalisation
def test_the_means_of_monomials_give_the_per_point_risk_flow_and_jacobian(attention):
    """The task takes the rule's means of the conditional risk's monomials, and their derivatives in kappa only
    (derivations/slr_maps.py): its risk, vector field and Jacobian equal those of the rule's risk taken point by
    point and differentiated by autodiff, at 8 realizable points (measured <= 3e-14 relative; tolerance 1e-12).
    One map per normalisation ("tokens", "none", "length"): a researcher's map takes the same code as its kind."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, attention, quadrature.gauss_hermite(3, 8))
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(12), 8))
    risk, flow, jacobian = _per_point_route(problem, m)
    scale = lambda x: np.abs(x).max()  # noqa: E731
    np.testing.assert_allclose(problem.risk(0.0, m), risk, rtol=0, atol=1e-12 * scale(risk))
    np.testing.assert_allclose(_field(problem, m), flow, rtol=0, atol=1e-12 * scale(flow))
    np.testing.assert_allclose(problem.jacobian(0.0, m), jacobian, rtol=0, atol=1e-12 * scale(jacobian))


def test_the_erf_flow_through_the_rule_is_the_generated_flow():
    """The erf risk's closed-form flow (the task's vector field) against the rule's, 16 points per
    score at lam = 0.5: measured 2e-8 relative, tolerance 1e-7."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1)
    m = jnp.asarray(random_realizable_overlaps(np.random.default_rng(11), 3))
    by_rule = slr.flow_by_rule(problem, m, rule=quadrature.gauss_hermite(3, 16))
    closed = _field(problem, m)
    np.testing.assert_allclose(by_rule, closed, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("attention", ("erf", "softmax"))
def test_m_is_invariant_under_the_flow(attention):
    """Measured, not assumed (docs/science.md section 7): from two starts on M = {theta = eta = rho = 0}
    the flow of erf (its closed form) and of softmax (through the rule), integrated to t = 2 by the engine,
    keeps the distance to M at 0 exactly (the field has no component off M at points of M, and an explicit
    solver's stages only combine field values), and the restriction to M is the full flow's (kappa, nu) there.
    Every other map's field is checked on M below (each integration costs a compilation per map)."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, attention, quadrature.gauss_hermite(3, 6))
    starts = np.array([[0.3, 0.5, 0.0, 0.0, 0.0], [-0.7, 0.2, 0.0, 0.0, 0.0]])
    # Tsit5: on M at d = 20 the flow is not stiff, and it compiles faster than the task's Kvaerno3.
    solved = slr.solve_flow(problem, starts, np.linspace(0.0, 2.0, 5), solver=diffrax.Tsit5())
    assert not solved.failures()
    ys = np.asarray(solved.ys)
    assert slr.distance_to_manifold(ys).max() == 0.0 and np.abs(ys[:, -1, :2] - starts[:, :2]).max() > 1e-2
    on_m = problem.restriction()
    np.testing.assert_array_equal(on_m.vector_field(0.0, starts[:, :2]), problem.vector_field(0.0, starts)[:, :2])


@pytest.mark.parametrize("attention", ("linear", "softplus", "sigmoid", "relu", CAPPED), ids=_name)
def test_m_is_invariant_under_every_other_maps_flow(attention):
    """The same for linear, softplus, sigmoid, relu and the capped softmax, on the field (no integration, which
    costs a compilation per map; the test above integrates the rule's flow): at three points of M its components
    off M are 0 exactly, so that a solve from M stays on M, and the restriction's field is its (kappa, nu) part."""
    problem = slr.Problem(20, 3, 0.5, 0.7, 0.1, attention, quadrature.gauss_hermite(3, 6))
    points = np.array([[0.3, 0.5, 0.0, 0.0, 0.0], [-0.7, 0.2, 0.0, 0.0, 0.0], [0.9, -0.95, 0.0, 0.0, 0.0]])
    field = np.asarray(problem.vector_field(0.0, points))
    assert np.abs(field[:, 2:]).max() == 0.0 and np.abs(field[:, :2]).max() > 1e-2
    np.testing.assert_array_equal(problem.restriction().vector_field(0.0, points[:, :2]), field[:, :2])


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


def test_the_built_in_maps_pass_the_checks_a_researchers_map_gets():
    """The built-in maps are made unchecked when flowsim is imported; made again with the checks on the grid,
    each is equal to the built-in one (equality covers odd: only erf's weights are odd)."""
    for name, attention in ATTENTION_MAPS.items():
        remade = slr.AttentionMap(name, attention.f, attention.normalisation, attention.log_f)
        assert remade == attention and hash(remade) == hash(attention)
        assert remade.odd == (name == "erf")
    # Jitted functions see the map as static: equal maps share a compilation, a new function is a new map.
    assert slr.Problem(20, 3, 1.0, attention=CAPPED) == slr.Problem(20, 3, 1.0, attention=CAPPED)
    assert slr.AttentionMap("capped softmax", log_f=lambda x: jnp.minimum(x, 1.0), normalisation="tokens") != CAPPED
    scores = jnp.array([3.0, 0.5, -1.0])
    capped = np.array([np.e, np.exp(0.5), np.exp(-1.0)])  # min(e^x, e): the cap binds for the first token
    np.testing.assert_allclose(CAPPED.weights(scores), capped / capped.sum(), rtol=1e-14)
    np.testing.assert_allclose(slr.attention_weights("relu", scores), np.array([3.0, 0.5, 0.0]) / 3, rtol=1e-15)
    np.testing.assert_allclose(slr.attention_weights("sigmoid", scores), 1 / (1 + np.exp(-scores)), rtol=1e-14)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"f": jnp.log}, "f is not finite at x = -100 (nan)"),
        ({"f": lambda x: x, "normalisation": "tokens"}, "need f > 0 at every score, but f(-100) = -100"),
        ({"log_f": lambda x: jnp.log(x), "normalisation": "tokens"}, "log f is not finite at x = -100"),
        ({"f": lambda x: jnp.sqrt(jnp.abs(x))}, "the derivative of f is not finite at x = 0"),
        ({"f": jnp.sum}, "f must act elementwise"),
        ({"f": math.exp}, "f must be an elementwise function written with jax.numpy"),
        ({"f": jnp.tanh, "normalisation": "softmax"}, "normalisation must be one of ('none', 'tokens', 'length')"),
        ({"f": jnp.tanh, "log_f": jnp.tanh}, "normalisation 'none' needs f and takes no log_f"),
        ({"normalisation": "tokens"}, "give f or log_f"),
        ({"f": jnp.exp, "log_f": lambda x: 2 * x, "normalisation": "tokens"}, "log_f is not log f"),
        ({"f": jnp.tanh, "odd": False}, "declared odd = False, but its weight map is odd"),
        ({"f": 3.0}, "f must be a function of the scores"),
        # An indicator in integers (no derivative: used to be numpy's TypeError) and a complex f (used to be
        # taken, its imaginary part dropped with a warning).
        ({"f": lambda x: (x > 0).astype(int)}, "f must return real floating-point values, but it returned int64"),
        ({"f": lambda x: x + 1j}, "f must return real floating-point values, but it returned complex128"),
    ],
)
def test_a_bad_map_is_refused_with_what_is_wrong(arguments, message):
    with pytest.raises(ValueError, match=r"AttentionMap 'mine': .*" + re.escape(message)):
        slr.AttentionMap("mine", **arguments)


def test_an_end_point_on_the_edge_approaches_the_oracle_where_the_edge_leads_there():
    """Under a map other than erf, an end point on M's edge nu = 1 counts as approaching (k*, v*) where the flow's
    rates -R_kappa and -R_nu are positive on a grid between it and the sink (flowsim/tasks/slr/_approach.py).

    Positive control, softmax at d = 100, L = 3, lam = 1.5: from (0.3, 0.5) on M the flow is on the edge by t = 20
    and creeps along it (kappa 0.788, 0.874, 0.965 at t = 20, 100, 1000, measured): each end point counts as
    approaching, and at t = 10^4 the flow has reached (k*, v*) within 1e-3. Negative control, ReLU at d = 20, L = 3,
    lam = 1: kappa' changes sign on the edge between kappa = 0.94 and 0.96 (measured: the flow from (0.3, 0.5) stops
    at 0.94806), so a point at kappa = 0.9 there, rising (erf's criterion, which erf's proof allows, would count
    it), is not on its way to the sink, and is not counted."""
    ts = jnp.array([0.0, 20.0, 100.0, 1000.0, 10_000.0])
    softmax = slr.Problem(100, 3, 1.5, 1.0, 0.1, "softmax")
    ends = np.asarray(slr.solve_flow(softmax, jnp.array([[0.3, 0.5, 0.0, 0.0, 0.0]]), ts).ys)[0, 1:]
    outcomes = classify_end_points(softmax, ends, tol=1e-3)
    assert outcomes.approaching.tolist() == [True, True, True, False] and outcomes.reached[-1]
    assert np.all(np.diff(ends[:, 0]) > 0) and np.all(ends[:3, 0] < 0.97)  # creeping, not yet there

    relu = slr.Problem(20, 3, 1.0, 1.0, 0.1, "relu")
    edge = np.array([[0.9, 1.0, 0.0, 0.0, 0.0], [0.94, 1.0, 0.0, 0.0, 0.0], [0.96, 1.0, 0.0, 0.0, 0.0]])
    velocity = np.asarray(relu.vector_field(0.0, edge))
    assert velocity[0, 0] > 0 and velocity[1, 0] > 0 > velocity[2, 0]  # a fixed point on the edge, past 0.94
    assert relu.approaching(edge[:1], velocity[:1], 1e-3).tolist() == [False]


def test_the_edge_check_reads_the_rectangle_between_a_point_and_the_sink():
    """`edge_leads_to_sink` on a field of chosen signs: -R_kappa < 0 for kappa in [0.6, 0.65] and -R_nu < 0 on the
    row nu = 1 - tol, positive elsewhere. A point passes when its rectangle, from the grid values at or below it to
    (1, 1), avoids both: kappa above 0.65's grid cell and nu above the row 1 - tol (nu = 1 and above included)."""

    def risk_gradient(t, grid):
        kappa, nu = grid[..., 0], grid[..., 1]
        r_kappa = np.where((kappa >= 0.6) & (kappa <= 0.65), 1.0, -1.0)
        r_nu = np.where(nu == nu.min(), 1.0, -1.0)
        return np.stack([r_kappa, r_nu, *np.zeros((3, *kappa.shape))], axis=-1)

    tol = 1e-3
    field = types.SimpleNamespace(risk_gradient=risk_gradient)
    points = {
        (0.5, 1.0): False,  # the band of kappa lies ahead
        (0.65, 1.0): False,  # 0.65's grid cell starts at 0.6484, inside the band
        (0.66, 1.0): True,  # its cell starts at 0.65625, past the band
        (0.66, 1 - tol): False,  # the row nu = 1 - tol, where nu would fall
        (0.66, 1 - tol / 10): True,
        (0.66, 1 + 1e-12): True,  # nu past 1 by rounding: the row nu = 1
        (1 - 1e-9, 1.0): True,  # past the grid's last kappa
        (0.0, 1.0): False,  # kappa = 0 is not on the way
        (0.66, 1 - 2 * tol): False,  # below the edge
    }
    found = edge_leads_to_sink(field, np.array(list(points)), 0.0, tol)
    assert dict(zip(points, found.tolist(), strict=True)) == points


def test_a_start_and_its_mirror_approach_alike_under_an_odd_map_only():
    """(k, v) -> (-k, -v) is a symmetry of the task under an odd map (here tanh, a researcher's), so an edge point
    and its mirror image on nu = -1 approach the targets alike; under softmax the mirror image is not on its way to
    (k*, v*), the only target (d = 20, L = 3, lam = 1, gamma = 1, eps = 0.1)."""
    point = np.array([[0.5, 1.0, 0.0, 0.0, 0.0]])
    for attention, mirrored in ((TANH, True), ("softmax", False)):
        problem = slr.Problem(20, 3, 1.0, 1.0, 0.1, attention)
        velocity = np.asarray(problem.vector_field(0.0, point))
        assert problem.approaching(point, velocity, 1e-3).tolist() == [True]
        assert problem.approaching(-point, -velocity, 1e-3).tolist() == [mirrored]


def test_the_edge_check_trusts_no_rate_lost_in_rounding():
    """erf's rates on the edge nu = 1 (d = 400, L = 10): at lam = 0.1 they are at least 8.5e-3 and the grid check
    passes every edge point, as erf's proof does. At lam = 0.9 they are below 1e-39 in exact arithmetic
    (docs/science.md section 5): the closed form gives them as tiny numbers or 0, and the default rule as rounding
    (at most 1.4e-16), and the check passes no point from either."""
    points = np.stack([np.linspace(0.05, 0.985, 12), np.ones(12)], axis=-1)
    small = slr.Problem(400, 10, 0.1, eps=0.1)
    assert edge_leads_to_sink(small, points, 0.0, 1e-3).all()
    for rule in (None, quadrature.default_rule(10)):
        large = slr.Problem(400, 10, 0.9, eps=0.1, rule=rule)
        assert not edge_leads_to_sink(large, points, 0.0, 1e-3).any()
