"""Reference predictors: Bayes (posterior mean over J0) and the best linear predictor."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from flowsim._checks import InvalidInput, as_key, check_count
from flowsim._memory import check_work
from flowsim.tasks.slr._data import GroundTruth, sample
from flowsim.tasks.slr._estimates import bayes_work
from flowsim.tasks.slr._problem import Problem

__all__ = [
    "Estimate",
    "bayes_predict",
    "bayes_risk",
    "fit_linear",
    "linear_predict",
    "linear_risk",
]


class Estimate(NamedTuple):
    """A Monte Carlo estimate: its mean, standard error and number of samples."""

    mean: float
    stderr: float
    n: int


def bayes_predict(problem: Problem, truth: GroundTruth, X: Float[Array, "... L d"]) -> Float[Array, "..."]:
    """The Bayes predictor `E[Y | X] = sum_j pi_j(X) <X_j, v*>`.

    pi_j is the posterior probability that token j is the informative one: a
    softmax over tokens of the log-likelihood ratio of N(s k*, gamma^2 I) to N(0, I),
    |x|^2/2 - |x - s k*|^2 / (2 gamma^2) - d log(gamma); the norm term vanishes
    only when gamma = 1.

    **Arguments:**

    - `problem`, `truth`: the task.
    - `X`: tokens, shape (..., L, d).

    **Returns:** the posterior mean of Y, shape (...).
    """
    g = problem.gamma**2
    squared_norm = jnp.sum(X**2, axis=-1)
    along_k = X @ truth.k_star
    distance_to_mean = squared_norm - 2 * problem.s * along_k + problem.s**2
    log_ratio = squared_norm / 2 - distance_to_mean / (2 * g)  # the d log(gamma) term is common to all j
    return jnp.sum(jax.nn.softmax(log_ratio, axis=-1) * (X @ truth.v_star), axis=-1)


def bayes_risk(problem: Problem, truth: GroundTruth, key: PRNGKeyArray, n: int, *, batch_size: int = 4096) -> Estimate:
    """Monte Carlo estimate of the Bayes risk E[(Y - E[Y|X])^2].

    **Arguments:**

    - `problem`, `truth`: the task.
    - `key`: a JAX PRNG key or an integer seed.
    - `n`: number of samples, an integer >= 2 (rounded up to whole batches).
    - `batch_size`: samples drawn at once (memory: batch_size * L * d floats).

    **Returns:** an `Estimate` (mean, standard error, samples used).
    """
    n = check_count("n", n, 2)
    batch_size = check_count("batch_size", batch_size, 1)
    check_work("bayes_risk", *bayes_work(problem.d, problem.L, n, batch=batch_size))
    batches = -(-n // batch_size)
    losses = []
    for batch_key in jax.random.split(as_key(key), batches):
        X, y, _ = sample(problem, truth, batch_key, batch_size)
        losses.append((y - bayes_predict(problem, truth, X)) ** 2)
    losses = jnp.concatenate(losses)
    return Estimate(float(jnp.mean(losses)), float(jnp.std(losses, ddof=1) / jnp.sqrt(losses.size)), losses.size)


def linear_risk(problem: Problem) -> float:
    """Risk of the best linear predictor on the concatenated tokens (docs/science.md section 4).

    With J0 uniform the best linear predictor is `c sum_l <X_l, v*>` with
    c = g / (g + L - 1), g = gamma^2, and its risk is eps^2 + g - g^2 / (g + L - 1).
    """
    g = problem.gamma**2
    return problem.eps**2 + g - g**2 / (g + problem.L - 1)


def fit_linear(X: Float[Array, "n L d"], y: Float[Array, " n"]) -> Float[Array, " p"]:
    """Least-squares linear predictor (with intercept) on the flattened tokens.

    **Returns:** the weights, intercept last; use with `linear_predict`.
    """
    features = _features(X)
    if features.shape[0] < features.shape[1]:
        raise InvalidInput(
            f"least squares needs at least L*d + 1 = {features.shape[1]} samples, got {features.shape[0]}"
        )
    weights, *_ = jnp.linalg.lstsq(features, y)
    return weights


def linear_predict(weights: Float[Array, " p"], X: Float[Array, "n L d"]) -> Float[Array, " n"]:
    """Predictions of a linear predictor from `fit_linear`."""
    return _features(X) @ weights


def _features(X):
    flat = X.reshape(X.shape[0], -1)
    return jnp.concatenate([flat, jnp.ones((flat.shape[0], 1), flat.dtype)], axis=1)
