"""The derived population risk against the published closed form, Monte Carlo in R^d, and its gradient."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import slr
from flowsim.tasks.slr import _generated as generated
from tests.reference import published_risk, random_realizable_overlaps

ROOT = Path(__file__).resolve().parent.parent


def _parameter_sets(rng, n):
    """Parameter sets spanning d in [2, 2000], L in [1, 100], lam in [0.01, 3], gamma in [0.2, 2],
    eps in [0, 1]: the corners, the paper's defaults, then log-uniform draws."""
    corners = [
        (2, 1, 0.01, 0.2, 0.0),
        (2000, 100, 3.0, 2.0, 1.0),
        (400, 10, 0.1, 0.5**0.5, 0.0),
        (80, 10, 2.0, 0.5**0.5, 0.1),
    ]
    for d, L, lam, gamma, eps in corners:
        yield slr.Problem(d, L, lam, gamma, eps)
    for _ in range(n - len(corners)):
        yield slr.Problem(
            int(np.exp(rng.uniform(np.log(2), np.log(2000)))),
            int(np.exp(rng.uniform(0, np.log(100)))),
            float(np.exp(rng.uniform(np.log(0.01), np.log(3)))),
            float(np.exp(rng.uniform(np.log(0.2), np.log(2)))),
            float(rng.uniform(0, 1)),
        )


@jax.jit
def _generated_risk(m, parameters):
    """The generated risk with every parameter traced, d and L too: one compiled program for every parameter set
    (`population_risk` takes d and L from the task, where they are static: a program per (d, L))."""
    return generated.risk(*jnp.moveaxis(m, -1, 0), *parameters)


def test_risk_equals_published_closed_form():
    """<= 1e-10 relative at 60 realizable points x 12 parameter sets (both sides float64): the generated risk at
    every set, and `population_risk`, which evaluates it, at the two extreme corners."""
    rng = np.random.default_rng(0)
    points = random_realizable_overlaps(rng, 60)
    slr.check_overlaps(points)
    for i, problem in enumerate(_parameter_sets(rng, 12)):
        theirs = published_risk(points, problem.d, problem.L, problem.lam, problem.gamma, problem.eps)
        parameters = jnp.array([problem.d, problem.L, problem.lam, problem.gamma, problem.eps], dtype=float)
        np.testing.assert_allclose(_generated_risk(points, parameters), theirs, rtol=1e-10, err_msg=str(problem))
        if i < 2:
            ours = np.asarray(slr.population_risk(problem, points))
            np.testing.assert_allclose(ours, theirs, rtol=1e-10, err_msg=str(problem))


def _unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize(
    "problem", [slr.Problem(16, 4, 0.6, 0.5**0.5, 0.1), slr.Problem(30, 3, 0.25, 1.2, 0.3)], ids=str
)
def test_risk_equals_monte_carlo_in_Rd(problem, key):
    """At 10 off-manifold (k, v) in R^d, the formula lies within 4 standard errors of E[(y - T)^2]
    estimated from `sample` and `predict` only (n = 40 000 per point, fixed keys)."""
    key_truth, key_directions, key_samples = jax.random.split(key, 3)
    truth = slr.ground_truth(key_truth, problem.d)
    n = 40_000
    for point_key, sample_key in zip(
        jax.random.split(key_directions, 10), jax.random.split(key_samples, 10), strict=True
    ):
        mix_key, noise_key = jax.random.split(point_key)
        weights = jax.random.uniform(mix_key, (2, 3), minval=-1.0, maxval=1.0)
        noise = _unit(jax.random.normal(noise_key, (2, problem.d)))
        basis = jnp.stack([truth.k_star, truth.v_star])
        k, v = _unit(weights[:, :2] @ basis + weights[:, 2:] * noise)
        m = slr.overlaps(k, v, truth)
        assert float(jnp.sqrt(m[2] ** 2 + m[3] ** 2 + m[4] ** 2)) > 0.05  # off the manifold M
        X, y, _ = slr.sample(problem, truth, sample_key, n)
        losses = (y - slr.predict(X, k, v, problem.lam)) ** 2
        mean, stderr = float(jnp.mean(losses)), float(jnp.std(losses) / np.sqrt(n))
        assert abs(float(slr.population_risk(problem, m)) - mean) < 4 * stderr, (m, mean, stderr)


def test_gradient_in_Rd_equals_finite_differences(key):
    """jax.grad through `overlaps` vs central differences (step 1e-6, error ~1e-9) of the same formula."""
    problem = slr.Problem(12, 5, 0.8, 0.6, 0.2)
    key_truth, key_k, key_v = jax.random.split(key, 3)
    truth = slr.ground_truth(key_truth, problem.d)
    k = _unit(jax.random.normal(key_k, (problem.d,)) + 2 * truth.k_star)
    v = _unit(jax.random.normal(key_v, (problem.d,)) - truth.v_star)

    def risk(k, v):
        return slr.population_risk(problem, slr.overlaps(k, v, truth))

    grad_k, grad_v = jax.grad(risk, argnums=(0, 1))(k, v)
    step = 1e-6
    eye = jnp.eye(problem.d)
    fd_k = jnp.array([(risk(k + step * e, v) - risk(k - step * e, v)) / (2 * step) for e in eye])
    fd_v = jnp.array([(risk(k, v + step * e) - risk(k, v - step * e)) / (2 * step) for e in eye])
    np.testing.assert_allclose(grad_k, fd_k, atol=1e-7)
    np.testing.assert_allclose(grad_v, fd_v, atol=1e-7)
    assert float(jnp.linalg.norm(grad_k)) > 0.1  # a non-trivial point


def test_risk_is_vectorised_and_float64():
    problem = slr.Problem(50, 5, 0.5)
    points = jnp.asarray(random_realizable_overlaps(np.random.default_rng(1), 12)).reshape(3, 4, 5)
    risks = slr.population_risk(problem, points)
    assert risks.shape == (3, 4) and risks.dtype == jnp.float64
    np.testing.assert_allclose(risks[1, 2], slr.population_risk(problem, points[1, 2]), rtol=1e-15)


def test_risk_finite_at_large_arguments():
    """lam s kappa ~ 95 (d = 2000, lam = 3): no exp overflow, the risk stays finite."""
    problem = slr.Problem(2000, 100, 3.0, 2.0, 1.0)
    assert np.isfinite(float(slr.population_risk(problem, jnp.array([1.0, 1.0, 0.0, 0.0, 0.0]))))
    assert np.all(
        np.isfinite(jax.grad(lambda m: slr.population_risk(problem, m))(jnp.array([0.9, 0.1, 0.1, 0.2, 0.1])))
    )
