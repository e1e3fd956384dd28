"""The task module: sampler, validation, overlaps and baselines."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from flowsim import schedules, slr
from tests.reference import published_oracle_risk


def test_ground_truth_is_orthonormal(key):
    truth = slr.ground_truth(key, 300)
    assert truth.k_star.shape == (300,) and truth.k_star.dtype == jnp.float64
    np.testing.assert_allclose([truth.k_star @ truth.k_star, truth.v_star @ truth.v_star], 1.0, rtol=1e-14)
    assert abs(float(truth.k_star @ truth.v_star)) < 1e-15


#: The sampler's tests share one compiled draw: d = 4, L = 10, N sequences (d, L and n are static).
D, L, N = 4, 10, 50_000


def test_sample_shapes_dtypes_and_reproducibility(key):
    problem = slr.Problem(D, L, 0.5, eps=0.1)
    truth = slr.ground_truth(key, D)
    X, y, J0 = slr.sample(problem, truth, jax.random.key(3), N)
    assert (X.shape, y.shape, J0.shape) == ((N, L, D), (N,), (N,))
    assert X.dtype == y.dtype == jnp.float64 and jnp.issubdtype(J0.dtype, jnp.integer)
    again = slr.sample(problem, truth, jax.random.key(3), N)
    assert all(bool(jnp.array_equal(a, b)) for a, b in zip((X, y, J0), again, strict=True))


def test_positions_are_uniform(key):
    """Chi-square goodness of fit of J0 to the uniform law on L = 10 positions (n = 50 000)."""
    problem = slr.Problem(D, L, 0.5)
    _, _, J0 = slr.sample(problem, slr.ground_truth(key, D), jax.random.key(1), N)
    counts = np.bincount(np.asarray(J0), minlength=L)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_sample_moments(key):
    """Informative token: mean s k*, variance gamma^2 along v*; noise tokens: mean 0; y = <X_J0, v*>."""
    problem = slr.Problem(D, L, 0.5, gamma=0.8)
    truth = slr.ground_truth(key, D)
    n = N
    X, y, J0 = slr.sample(problem, truth, jax.random.key(2), n)
    informative = X[jnp.arange(n), J0]
    along_k = informative @ truth.k_star
    assert abs(float(jnp.mean(along_k)) - problem.s) < 4 * 0.8 / math.sqrt(n)
    assert abs(float(jnp.var(informative @ truth.v_star)) - 0.64) < 4 * 0.64 * math.sqrt(2 / n)
    np.testing.assert_allclose(y, informative @ truth.v_star, atol=1e-14)  # eps = 0


def test_predict_matches_its_definition():
    X = jnp.asarray(np.random.default_rng(4).normal(size=(4, 3, 5)))  # NumPy's draw: no sampler to compile
    k, v = jnp.eye(5)[0], jnp.eye(5)[1]
    expected = sum(jax.scipy.special.erf(0.7 * X[:, l, 0]) * X[:, l, 1] for l in range(3))
    np.testing.assert_allclose(slr.predict(X, k, v, 0.7), expected, rtol=1e-14)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("d", 1, "Problem.d must be an integer in [2, 2**53], got 1"),
        ("d", 4.0, "Problem.d must be an integer in [2, 2**53], got 4.0"),
        ("d", True, "Problem.d must be an integer in [2, 2**53], got True"),
        ("d", np.array([10, 20]), "Problem.d must be an integer in [2, 2**53], got array([10, 20])"),
        ("L", 0, "Problem.L must be an integer in [1, 2**31 - 1], got 0"),
        ("lam", 0.0, "Problem.lam must be a number in [1e-50, 1e50], got 0.0"),
        ("lam", float("nan"), "Problem.lam must be a number in [1e-50, 1e50], got nan"),
        ("lam", "big", "Problem.lam must be a number in [1e-50, 1e50], got 'big'"),
        ("gamma", -1.0, "Problem.gamma must be a number in [1e-50, 1e50], got -1.0"),
        ("gamma", float("inf"), "Problem.gamma must be a number in [1e-50, 1e50], got inf"),
        ("eps", -0.1, "Problem.eps must be a number in [0, 1e50], got -0.1"),
        # Above these bounds the risk's powers overflow (Python's float ** raises), or L^2 in int64, or d in float64.
        ("d", 2**53 + 1, "Problem.d must be an integer in [2, 2**53], got 9007199254740993"),
        ("L", 2**31, "Problem.L must be an integer in [1, 2**31 - 1], got 2147483648"),
        ("lam", 1e51, "Problem.lam must be a number in [1e-50, 1e50], got 1e+51"),
        ("gamma", 1e308, "Problem.gamma must be a number in [1e-50, 1e50], got 1e+308"),
        ("eps", 1e51, "Problem.eps must be a number in [0, 1e50], got 1e+51"),
        # A subnormal number is 0 in XLA's programs: refused, where 0 itself is allowed.
        ("eps", 1e-320, "Problem.eps must be a number in [0, 1e50], got 1e-320: a subnormal number, which flowsim's"),
    ],
)
def test_problem_validation(field, value, message):
    arguments = {"d": 10, "L": 3, "lam": 0.5} | {field: value}
    with pytest.raises(ValueError, match=re.escape(message)):
        slr.Problem(**arguments)


def test_a_schedules_start_is_within_the_parameters_bounds():
    """A schedule of lam starts where a fixed lam may be (the command line checks --lam before it makes one)."""
    with pytest.raises(ValueError, match=re.escape("Problem.lam at t = 0 (its schedule's start) must be a number in")):
        slr.Problem(10, 3, schedules.InverseTimeDecay(1e308, 1e-3, 1e-3))
    assert slr.Problem(10, 3, schedules.InverseTimeDecay(2.0, 1e-4, 1e-3)).lam_at(0.0) == 2.0


@pytest.mark.parametrize("n", [0, -5, 2.5, None])
def test_sample_size_validation(n, key):
    problem = slr.Problem(4, 2, 0.5)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        slr.sample(problem, slr.ground_truth(key, 4), key, n)


def test_sample_rejects_truth_of_wrong_dimension(key):
    with pytest.raises(ValueError, match=r"dimension problem\.d = 4"):
        slr.sample(slr.Problem(4, 2, 0.5), slr.ground_truth(key, 5), key, 3)


def test_overlaps_order(key):
    truth = slr.ground_truth(key, 5)
    k = (truth.k_star + truth.v_star) / math.sqrt(2)
    v = truth.k_star
    np.testing.assert_allclose(
        slr.overlaps(k, v, truth), [1 / math.sqrt(2), 0, 1, 1 / math.sqrt(2), 1 / math.sqrt(2)], atol=1e-15
    )


@pytest.mark.parametrize(
    ("m", "message"),
    [
        ([1.2, 0, 0, 0, 0], "outside \\[-1, 1\\]"),
        ([0.9, 0, 0, 0.9, 0], "not realizable"),  # |k|^2 >= kappa^2 + eta^2 = 1.62
        ([0.0, 0.0, 0.0, 0.0, float("nan")], "non-finite"),
        ([0.1, 0.2, 0.3], "last axis of size 5"),
    ],
)
def test_check_overlaps_rejects(m, message):
    with pytest.raises(ValueError, match=message):
        slr.check_overlaps(m)


def test_check_overlaps_accepts_the_oracle_and_names_the_bad_point():
    slr.check_overlaps([1.0, 1.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"point \(np.int64\(1\),\)|point \(1,\)"):
        slr.check_overlaps([[0.1, 0.1, 0, 0, 0], [0.8, 0.1, 0.0, 0.8, 0.0]])


@pytest.mark.parametrize(
    ("d", "L", "lam", "gamma", "eps"),
    [(400, 10, 0.1, 0.5**0.5, 0.0), (80, 10, 2.0, 0.5**0.5, 0.1), (30, 3, 0.6, 1.1, 0.4)],
)
def test_oracle_risk_equals_spec_formula(d, L, lam, gamma, eps):
    """oracle_risk (generated formula at (1,1,0,0,0)) vs docs/science.md section 4 by quadrature, 1e-10 relative."""
    problem = slr.Problem(d, L, lam, gamma, eps)
    assert float(slr.oracle_risk(problem)) == pytest.approx(published_oracle_risk(d, L, lam, gamma, eps), rel=1e-10)


def _least_squares_data(key):
    """d = 5, L = 4, eps = 0.1: the task, its hidden directions, and 1090 training sequences (X, y)."""
    problem = slr.Problem(5, 4, 0.5, eps=0.1)
    truth = slr.ground_truth(key, problem.d)
    X, y, _ = slr.sample(problem, truth, jax.random.key(20), 1090)
    return problem, truth, (X, y)


def test_least_squares_approaches_linear_risk(key):
    """The held-out risk of the least-squares fit decreases towards the closed form as n grows.

    With p = L d + 1 features, ordinary least squares has expected excess risk about
    sigma^2 p / (n - p); at n = 40 p that is ~2.5 % of the risk, asserted within 6 %.
    """
    problem, truth, (X_all, y_all) = _least_squares_data(key)
    test = slr.sample(problem, truth, jax.random.key(10), 100_000)
    gaps = []
    # Three independent training sets: disjoint slices of one draw (one compiled draw).
    for n, (first, last) in zip([50, 200, 840], [(0, 50), (50, 250), (250, 1090)], strict=True):
        X, y = X_all[first:last], y_all[first:last]
        assert len(y) == n
        weights = slr.fit_linear(X, y)
        held_out = float(jnp.mean((test.y - slr.linear_predict(weights, test.X)) ** 2))
        gaps.append(held_out - slr.linear_risk(problem))
    assert gaps[0] > gaps[1] > gaps[2] > -0.01
    assert gaps[2] < 0.06 * slr.linear_risk(problem)


def test_fit_linear_needs_enough_samples(key):
    _, _, (X, y) = _least_squares_data(key)
    with pytest.raises(ValueError, match="at least L\\*d \\+ 1 = 21 samples"):
        slr.fit_linear(X[:10], y[:10])


def test_bayes_risk_between_noise_and_oracle(key):
    """eps^2 <= Bayes risk <= oracle risk (each bound up to 4 standard errors); with
    gamma = 1 and small d the posterior is uncertain, so the Bayes risk is clearly above eps^2."""
    for problem in (slr.Problem(400, 10, 0.1, eps=0.1), slr.Problem(4, 6, 0.7, gamma=1.0, eps=0.2)):
        truth = slr.ground_truth(key, problem.d)
        estimate = slr.bayes_risk(problem, truth, jax.random.key(5), 20_000)
        assert estimate.mean > problem.eps**2 - 4 * estimate.stderr
        assert estimate.mean < float(slr.oracle_risk(problem)) + 4 * estimate.stderr
    assert estimate.mean > problem.eps**2 + 10 * estimate.stderr


def test_linear_risk_closed_form():
    problem = slr.Problem(400, 10, 0.1)
    assert slr.linear_risk(problem) == pytest.approx(0.5 - 0.25 / 9.5, rel=1e-15)
