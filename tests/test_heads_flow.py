"""Several heads, several locations (docs/heads.md): the risk in the order parameters, the flow, its invariant
sets and fixed points, against Monte Carlo in R^d, slr.Problem, and automatic differentiation through vectors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import erf as scipy_erf

from flowsim.quadrature import gauss_hermite
from flowsim.schedules import InverseTimeDecay
from flowsim.tasks import slr
from flowsim.tasks.slr import _generated_heads as generated
from flowsim.tasks.slr._erf_pair import erf_pair
from flowsim.tasks.slr._heads_fixedpoints import heads_fixed_points, invariant_sets

#: The explicit vectors' dimension: d >= 2S + 2H = 8 realises every valid state.
D, L, GAMMA, EPS = 12, 4, 0.8, 0.1


def _data(d: int, length: int, gamma: float, eps: float, locations: int) -> slr.DataModel:
    return slr.marion_slr(d, length, gamma, eps, locations=locations)


@pytest.fixture(scope="module")
def problems():
    data = _data(D, L, GAMMA, EPS, 2)
    return {
        "erf": slr.HeadsProblem(data, heads=2, lam=0.9),
        "softmax": slr.HeadsProblem(data, heads=2, lam=0.9, attention="softmax"),
        # A cheap rule for the identities that hold for any rule (LH = 8 scores, 2 points each).
        "softmax small": slr.HeadsProblem(data, heads=2, lam=0.9, attention="softmax", rule=gauss_hermite(8, 2)),
    }


def _unit_heads(seed: int, heads: int = 2, d: int = D):
    """Unit keys and values leaning toward the targets (the first four coordinates), at random."""
    rng = np.random.default_rng(seed)
    k, v = rng.normal(size=(2, heads, d))
    k[:, :4] += 2 * rng.normal(size=(heads, 4))
    v[:, :4] += 2 * rng.normal(size=(heads, 4))
    return (jnp.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True)) for x in (k, v))


def _sample(key, n: int, locations: int, d: int = D, length: int = L, gamma: float = GAMMA, eps: float = EPS):
    """n sequences: S distinct uniform positions, token J_j ~ N(sqrt(d/2) e_{2j-1}, gamma^2 I), the others N(0, I);
    y = sum_j <x_{J_j}, e_{2j}> + eps xi."""
    positions_key, tokens_key, noise_key = jax.random.split(key, 3)
    # The first S of a uniformly random order of the positions: distinct and uniform.
    positions = jnp.argsort(jax.random.uniform(positions_key, (n, length)), axis=-1)[:, :locations]
    rows = jnp.arange(n)[:, None]
    eye = jnp.eye(d)
    scale = jnp.ones((n, length)).at[rows, positions].set(gamma)
    mean = jnp.zeros((n, length, d)).at[rows, positions].set(math.sqrt(d / 2) * eye[0 : 2 * locations : 2])
    x = mean + scale[..., None] * jax.random.normal(tokens_key, (n, length, d))
    y = jnp.einsum("njd,jd->n", x[rows, positions], eye[1 : 2 * locations : 2])
    return x, y + eps * jax.random.normal(noise_key, (n,))


def test_risk_matches_monte_carlo_in_R_d(problems):
    """H = S = 2, erf and softmax: the risk at two random unit heads against 4e5 sequences drawn in R^12: |z| < 4.
    The softmax rule's error (2^14 Sobol' points in 8 dimensions: ~1e-4 relative, docs) is far below the Monte Carlo
    standard error (~2e-3 relative); erf's closed form is exact but for its one-dimensional rule (< 1e-13)."""
    lam = problems["erf"].lam

    @jax.jit
    def losses(key, k, v):
        x, y = _sample(key, 100_000, 2)
        scores, values = jnp.einsum("nld,hd->nhl", x, k), jnp.einsum("nld,hd->nhl", x, v)
        return [
            (y - jnp.sum(slr.ATTENTION_MAPS[name].weights(lam * scores) * values, axis=(1, 2))) ** 2
            for name in ("erf", "softmax")
        ]

    for seed in range(2):
        k, v = _unit_heads(seed)
        drawn = [np.asarray(losses(jax.random.key(10 * seed + i), k, v)) for i in range(4)]
        for index, name in enumerate(("erf", "softmax")):
            problem = problems[name]
            risk = float(problem.risk(0.0, problem.states_from_vectors(k, v)))
            sample = np.concatenate([batch[index] for batch in drawn])
            z = (risk - sample.mean()) / (sample.std() / math.sqrt(sample.size))
            assert abs(z) < 4, (name, seed, risk, sample.mean(), z)


def test_one_head_one_location_is_slr_problem():
    """H = S = 1 with Marion et al.'s data: the same five overlaps, in slr.Problem's order, and its risk and flow
    to 1e-10 (two derivations of the same integrals: one head's Gaussian blocks, and the heads' multivariate Stein)."""
    d, length, lam, gamma, eps = 30, 3, 1.3, 0.8, 0.1
    heads = slr.HeadsProblem(slr.marion_slr(d, length, gamma, eps), heads=1, lam=lam)
    problem = slr.Problem(d, length, lam, gamma, eps)
    assert heads.state_names == problem.state_names and heads.d == d
    ys = problem.initial_states(jax.random.key(1), 4, "sphere")
    np.testing.assert_allclose(heads.risk(0.0, ys), problem.risk(0.0, ys), rtol=1e-10)
    np.testing.assert_allclose(heads.vector_field(0.0, ys), problem.vector_field(0.0, ys), atol=1e-10)


@pytest.mark.parametrize("attention", ["erf", "softmax small"])
def test_flow_is_the_projected_gradient_flow_of_explicit_vectors(problems, attention):
    """The field on the 22 order parameters equals d/dt of those of explicit heads in R^12 moving by
    dk_h/dt = -(I - k_h k_h^T) grad_{k_h} R (automatic differentiation of the risk through the vectors), to 1e-10;
    erf's Jacobian (the chain rule through the projection, from the Hessian) against central differences, to 1e-6."""
    problem = problems[attention]
    k, v = _unit_heads(7)

    def risk(k, v):
        return problem.risk(0.0, problem.states_from_vectors(k, v))

    g_k, g_v = jax.grad(risk, (0, 1))(k, v)
    tangent_k = -(g_k - jnp.sum(g_k * k, -1, keepdims=True) * k)
    tangent_v = -(g_v - jnp.sum(g_v * v, -1, keepdims=True) * v)
    y, expected = jax.jvp(problem.states_from_vectors, (k, v), (tangent_k, tangent_v))
    # The field there and, for erf, at y +- 1e-5 along each coordinate (one batch). (A rule's Jacobian comes from the
    # same chain rule, its Hessian by forward over reverse: checked on erf's, which also passes the moments.)
    n = problem.dimension
    step = 1e-5 * jnp.eye(n)
    points = jnp.concatenate([y[None], y + step, y - step]) if problem.closed_form else y[None]
    fields = problem.vector_field(0.0, points)
    np.testing.assert_allclose(fields[0], expected, atol=1e-10 * max(1.0, float(jnp.abs(expected).max())))
    if not problem.closed_form:
        return
    # Central differences: truncation ~1e-10 |f'''|, round-off ~1e-11 |f| (at 1e-6 relative, a wrong term of the chain
    # rule, of the size of the Jacobian, would show).
    by_differences = (fields[1 : n + 1] - fields[n + 1 :]).T / 2e-5
    scale = float(jnp.abs(by_differences).max())
    np.testing.assert_allclose(problem.jacobian(0.0, y), by_differences, atol=1e-6 * scale)


def test_discrete_map_is_projected_gradient_descent_of_explicit_vectors(problems):
    """One exact PGD step on the state equals the order parameters of the explicit heads after the renormalised
    step k_h -> (k_h - alpha P grad) / |.| (all heads at once), to 1e-12."""
    problem, alpha = problems["erf"], 0.05
    k, v = _unit_heads(8)
    g_k, g_v = jax.grad(lambda k, v: problem.risk(0.0, problem.states_from_vectors(k, v)), (0, 1))(k, v)

    def stepped(x, g):
        x = x - alpha * (g - jnp.sum(g * x, -1, keepdims=True) * x)
        return x / jnp.linalg.norm(x, axis=-1, keepdims=True)

    expected = problem.states_from_vectors(stepped(k, g_k), stepped(v, g_v))
    stepped_state = problem.discrete_map(0.0, problem.states_from_vectors(k, v), alpha)
    np.testing.assert_allclose(stepped_state, expected, atol=1e-12)


def _zeroed(y, *indices):
    y = np.array(y)
    for index in indices:
        y[np.ravel(index)] = 0.0
    return y


@pytest.mark.parametrize("attention", ["erf", "softmax small"])
def test_invariant_sets(problems, attention):
    """For every map, M = {theta = eta = rho = kv = vk = 0} (the fixed set of the reflection v*_j -> -v*_j with
    v_h -> -v_h): the field's components off M vanish on it. For erf (odd) also the fixed sets of its head and
    location flips: the specialised set (head 1 orthogonal to location 2 and head 2 to location 1, the heads to
    each other) and the collapsed set (both heads orthogonal to location 2); and the heads-equal set (the heads
    exchange's fixed set with k_1 = k_2, v_1 = v_2). Off them the same components do not vanish."""
    problem = problems[attention]
    layout = problem.layout
    y = np.asarray(problem.states_from_vectors(*_unit_heads(3)))
    off_m = (layout.theta, layout.eta, layout.rho, layout.kv, layout.vk)
    checks = {"M": off_m}
    if attention == "erf":
        per_location = (layout.kappa, layout.nu, layout.theta, layout.eta)
        cross = [index[h, j] for h, j in ((0, 1), (1, 0)) for index in per_location]
        pairs = (layout.kk, layout.kv, layout.vk, layout.vv)
        location_2 = tuple(index[:, 1] for index in (layout.kappa, layout.nu, layout.theta, layout.eta))
        checks |= {"specialised (1, 2)": (np.array(cross), *pairs), "collapsed 1": location_2}
    for name, indices in checks.items():
        point = _zeroed(y, *indices)
        assert name in invariant_sets(layout, point)
        flat = np.concatenate([np.ravel(index) for index in indices])
        np.testing.assert_allclose(np.asarray(problem.vector_field(0.0, point))[flat], 0.0, atol=1e-12)
        assert np.abs(np.asarray(problem.vector_field(0.0, y))[flat]).max() > 1e-3
    if attention == "erf":
        k, v = _unit_heads(4, heads=1)
        equal = problem.states_from_vectors(jnp.concatenate([k, k]), jnp.concatenate([v, v]))
        assert "symmetric" in invariant_sets(layout, equal)
        field = np.asarray(problem.vector_field(0.0, equal))
        np.testing.assert_allclose(field, problem.exchange_heads(field, [1, 0]), atol=1e-12)
        np.testing.assert_allclose(field[np.concatenate([layout.kk, layout.vv])], 0.0, atol=1e-12)


@pytest.mark.parametrize("attention", ["erf", "softmax small"])
def test_symmetries_leave_risk_and_flow_unchanged(problems, attention):
    """Every sign flip of `symmetries` (erf: 2^(H + S) = 16 of them; softmax: the reflection alone) and the
    exchanges of heads and of locations leave the risk unchanged and map the field as they map the state. (A rule
    over the scores keeps the heads exchange only to its error: the keys' Cholesky factor, which maps its points to
    scores, depends on the heads' order; so the exchanges are checked on erf's closed form.)"""
    problem = problems[attention]
    y = problem.states_from_vectors(*_unit_heads(5))
    risk, field = problem.risk(0.0, y), problem.vector_field(0.0, y)
    assert len(problem.symmetries) == (16 if attention == "erf" else 2)
    for sign in problem.symmetries:
        np.testing.assert_allclose(problem.risk(0.0, sign * y), risk, rtol=1e-12)
        np.testing.assert_allclose(problem.vector_field(0.0, sign * y), sign * field, atol=1e-11)
    for exchange in (problem.exchange_heads, problem.exchange_locations) if attention == "erf" else ():
        moved = exchange(y, [1, 0])
        np.testing.assert_allclose(problem.risk(0.0, moved), risk, rtol=1e-12)
        np.testing.assert_allclose(problem.vector_field(0.0, moved), exchange(field, [1, 0]), atol=1e-11)


def test_sphere_starts_have_the_law_of_uniform_vectors():
    """States drawn without vectors (Bartlett), 5 000 of them at d = 12, have the law of independent uniform unit
    vectors: every coordinate mean 0, mean square 1/d (z < 4 each), and every draw is realizable."""
    problem = slr.HeadsProblem(_data(D, L, GAMMA, EPS, 2), heads=2, lam=1.0)
    states = np.asarray(problem.initial_states(jax.random.key(11), 5_000))
    assert not problem.unrealizable(states)
    z_mean = states.mean(0) / (states.std(0) / math.sqrt(len(states)))
    squares = states**2
    z_square = (squares.mean(0) - 1 / D) / (squares.std(0) / math.sqrt(len(states)))
    assert np.abs(z_mean).max() < 4 and np.abs(z_square).max() < 4


def _erf_pair_by_scipy(a1, a2, b11, b12, b22):
    """E[erf(Y_1) erf(Y_2)] from scipy's bivariate normal CDF: erf(Y) = E[sign(sqrt(2) Y - N)], N ~ N(0, 1)."""
    mean = np.sqrt(2) * np.array([a1, a2])
    covariance = 2 * np.array([[b11, b12], [b12, b22]]) + np.eye(2)
    both = stats.multivariate_normal(-mean, covariance).cdf([0.0, 0.0])
    first, second = (stats.norm.cdf(mean[i] / np.sqrt(covariance[i, i])) for i in (0, 1))
    return 4 * both - 2 * first - 2 * second + 1


def _erf_pair_by_quad(a1, a2, b11, b12, b22):
    """The angle integral of `erf_pair` by scipy's adaptive quadrature (to 1e-15)."""
    p1, p2 = 1 + 2 * b11, 1 + 2 * b22
    alpha1, alpha2 = a1 / np.sqrt(p1), a2 / np.sqrt(p2)

    def integrand(phi):
        return np.exp(-(alpha1**2 + alpha2**2 - 2 * alpha1 * alpha2 * np.sin(phi)) / np.cos(phi) ** 2)

    value, _ = integrate.quad(integrand, 0, np.arcsin(2 * b12 / np.sqrt(p1 * p2)), epsabs=1e-15, epsrel=1e-14)
    return scipy_erf(alpha1) * scipy_erf(alpha2) + 2 / np.pi * value


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # quad's 1e-15 target: at round-off
def test_erf_pair_rule_and_its_derivatives():
    """The bivariate normal probability E[erf(Y_1) erf(Y_2)]: the angle formula against scipy's bivariate normal
    CDF (Genz, ~1e-8); the 20-point Gauss-Legendre rule against adaptive quadrature of the same integral: below
    1e-13 for |sin phi*| <= 0.95 and 1e-9 at 0.99 (means up to 8, b = sin / (2 (1 - sin)): measured 1e-14 and
    4e-10); its closed-form derivatives (custom JVP) against autodiff of the rule (second derivatives: through the
    field's Jacobian, in the flow's tests)."""
    rng = np.random.default_rng(0)
    for _ in range(3):
        a1, a2 = 2 * rng.normal(size=2)
        b11, b22 = rng.uniform(0.1, 3, 2)
        b12 = rng.uniform(-1, 1) * math.sqrt(b11 * b22)
        assert abs(float(erf_pair(a1, a2, b11, b12, b22)) - _erf_pair_by_scipy(a1, a2, b11, b12, b22)) < 1e-7
    for sine, bound in ((0.95, 1e-13), (0.99, 1e-9)):
        b = sine / (2 * (1 - sine))
        grid = np.stack(np.meshgrid(np.linspace(-8, 8, 4), np.linspace(-8, 7, 4), [-sine, 0.3 * sine, sine]), -1)
        a1, a2, s = grid.reshape(-1, 3).T
        rule = np.asarray(erf_pair(a1, a2, b, s * (1 + 2 * b) / 2, b))
        exact = [_erf_pair_by_quad(x1, x2, b, t * (1 + 2 * b) / 2, b) for x1, x2, t in zip(a1, a2, s, strict=True)]
        assert np.abs(rule - exact).max() < bound, (sine, np.abs(rule - exact).max())
    points = jnp.asarray([[*rng.normal(size=2), 1.2, 0.4, 0.7] for _ in range(3)])
    closed_form = jax.jit(jax.vmap(jax.grad(lambda x: erf_pair(*x))))(points)
    by_the_rule = jax.jit(jax.vmap(jax.grad(lambda x: erf_pair.fun(*x))))(points)  # no custom JVP
    np.testing.assert_allclose(closed_form, by_the_rule, atol=1e-12)


def test_generated_moments_stay_finite_at_large_d():
    """Every exponential of the generated moments has a non-positive exponent (derivations/slr_heads.py merges
    them): at d = 1e8 (spike 7071) and lam = 5 the moments are finite."""
    mu, lam, c = math.sqrt(1e8 / 2), 5.0, math.sqrt(0.5)
    overlaps = (0.6, 0.3, 0.2, -0.5, 0.1, 0.4, 0.9, 0.05, -0.1, 0.3)
    values = [
        generated.informative_pair(*overlaps, lam, mu, c),
        generated.informative_square(0.6, 0.3, 0.2, lam, mu, c),
        generated.informative_label(0.6, 0.1, 0.3, 0.2, 0.2, lam, mu, c),
        generated.informative_mean(0.6, 0.3, 0.2, lam, mu, c),
    ]
    assert all(np.isfinite(np.asarray(value)) for value in values)


def test_fixed_points_are_classified_in_their_invariant_sets():
    """At the authors' frozen lam = 1/3 (d = 80, L = 10): the specialised oracle is a fixed point (a saddle, risk
    1.936: every head's unnormalised weights pick up eight noise tokens), Newton from the structured states also
    finds the collapsed (0.840: the two values nearly opposite) and the heads-equal fixed points; each fixed point's
    kind agrees with its Jacobian's eigenvalues and it lies in the invariant sets it is named by."""
    problem = slr.HeadsProblem(_data(80, 10, math.sqrt(0.5), 0.1, 2), heads=2, lam=1 / 3)
    found = heads_fixed_points(problem)
    named = {sets: point for point, sets in found}
    assert named[("M", "specialised (1, 2)")].kind == "saddle"
    np.testing.assert_allclose(named[("M", "specialised (1, 2)")].value, 1.9362, atol=1e-4)
    np.testing.assert_allclose(named[("M", "collapsed 1")].value, 0.8402, atol=1e-4)
    assert any("symmetric" in sets for sets in named)
    for point, sets in found:
        assert np.abs(np.asarray(problem.vector_field(0.0, point.point))).max() < 1e-10
        real = np.real(point.eigenvalues)
        assert point.kind == ("saddle" if real.min() < 0 < real.max() else point.kind)
        assert sets == invariant_sets(problem.layout, point.point)


def test_frozen_schedule():
    """The authors' schedule: lam_t = 2 / (1 + 2e-4 t) for steps t <= 25 000, then 1/3; on the flow's clock (step
    1e-3) lam(25) = lam(100) = 1/3."""
    schedule = InverseTimeDecay(2.0, 2e-4, 1e-3, until=25_000)
    np.testing.assert_allclose(schedule(jnp.array([0.0, 5.0, 25.0, 100.0])), [2.0, 1.0, 1 / 3, 1 / 3], rtol=1e-15)
    assert "frozen after step 25000" in schedule.describe()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: slr.HeadsProblem(_data(D, L, GAMMA, EPS, 2), heads=0), "HeadsProblem.heads"),
        (lambda: slr.HeadsProblem(_data(D, 1, GAMMA, EPS, 2), heads=1), "at most"),
        (lambda: slr.HeadsProblem(_data(6, L, GAMMA, EPS, 2), heads=2), "at least 2S \\+ 2H = 8"),
        (lambda: slr.HeadsProblem(slr.spiked_slr(3.3, 3), heads=1), "HeadsProblem.d is required"),
        (lambda: slr.HeadsProblem(slr.max_slr(2.0, 3), heads=1), "SpikedTokens"),
        (
            lambda: slr.HeadsProblem(slr.DataModel(slr.SpikedTokens(2.0, 0.7, 2, shared_noise=True), 4), heads=2, d=12),
            "shared_noise",
        ),
        (lambda: slr.HeadsProblem(_data(D, L, GAMMA, EPS, 2), rule=gauss_hermite(3, 2)), "dimension L H = 8"),
    ],
)
def test_bad_input_names_the_field(make, match):
    with pytest.raises(ValueError, match=match):
        make()
