"""Hidden directions, the sampler and the attention predictor in R^d (any weight map of `_attention`)."""

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from flowsim._checks import SCALE, InvalidInput, as_key, check_count, check_entries, wrong_shape
from flowsim.tasks.slr._attention import AttentionMap, attention_weights
from flowsim.tasks.slr._parameters import Parameters

__all__ = ["Batch", "GroundTruth", "attend", "empirical_risk", "ground_truth", "predict", "sample"]


class GroundTruth(NamedTuple):
    """The hidden directions: unit vectors k* and v* with `<k*, v*> = 0`."""

    k_star: Float[Array, " d"]
    v_star: Float[Array, " d"]


class Batch(NamedTuple):
    """Samples of the task: tokens X (n, L, d), labels y (n,), informative positions J0 (n,)."""

    X: Float[Array, "n L d"]
    y: Float[Array, " n"]
    J0: Int[Array, " n"]


def ground_truth(key: PRNGKeyArray, d: int) -> GroundTruth:
    """Draw k* uniformly on the sphere, then v* by Gram-Schmidt of a Gaussian vector against k*.

    **Arguments:**

    - `key`: a JAX PRNG key or an integer seed.
    - `d`: the dimension, an integer >= 2.

    **Returns:** a `GroundTruth` of orthonormal float64 vectors.
    """
    d = check_count("d", d, 2)
    return _ground_truth(as_key(key), d)


@partial(jax.jit, static_argnums=1)
def _ground_truth(key, d):
    g_k, g_v = jax.random.normal(key, (2, d))
    k_star = g_k / jnp.linalg.norm(g_k)
    v_star = g_v - (g_v @ k_star) * k_star
    return GroundTruth(k_star, v_star / jnp.linalg.norm(v_star))


def sample(problem: Parameters, truth: GroundTruth, key: PRNGKeyArray, n: int, dtype=jnp.float64) -> Batch:
    """Draw n sequences of single-location regression (docs/science.md section 1).

    J0 is uniform on the L positions; the informative token is N(s k*, gamma^2 I),
    the others N(0, I); `y = <X_J0, v*> + eps xi`.

    **Arguments:**

    - `problem`: the task parameters.
    - `truth`: the hidden directions, of dimension `problem.d`.
    - `key`: a JAX PRNG key or an integer seed; the same key gives the same samples.
    - `n`: number of sequences, an integer >= 1.
    - `dtype`: the floating type of X and y (float32 halves the memory of SGD in R^d).

    **Returns:** a `Batch` (X of shape (n, L, d), y of shape (n,), J0 of shape (n,)).
    Traceable (the checks are on shapes), so SGD's scans draw their batches with it.
    """
    n = check_count("n", n, 1)
    shapes = (truth.k_star.shape, truth.v_star.shape)
    if isinstance(problem.d, int) and shapes != ((problem.d,), (problem.d,)):  # else d is traced, in SGD's program
        raise InvalidInput(
            f"truth must hold two vectors of dimension problem.d = {problem.d}, "
            f"got shapes {truth.k_star.shape} and {truth.v_star.shape}"
        )
    return _sample(problem, truth, as_key(key), n, dtype)


@partial(jax.jit, static_argnums=(3, 4))
def _sample(problem, truth, key, n, dtype=jnp.float64):
    key_position, key_tokens, key_noise = jax.random.split(key, 3)
    J0 = jax.random.randint(key_position, (n,), 0, problem.L)
    Z = jax.random.normal(key_tokens, (n, problem.L, truth.k_star.shape[0]), dtype)  # d: traced in SGD
    informative = jax.nn.one_hot(J0, problem.L, dtype=Z.dtype)[..., None]
    X = Z * (1 + informative * (problem.gamma - 1)) + informative * problem.s * truth.k_star.astype(dtype)
    xi = jax.random.normal(key_noise, (n,), dtype)
    y = jnp.take_along_axis(X, J0[:, None, None], axis=1)[:, 0] @ truth.v_star.astype(dtype) + problem.eps * xi
    return Batch(X, y, J0)


def predict(
    X: Float[Array, "... L d"], k: Float[Array, " d"], v: Float[Array, " d"], lam, attention: AttentionMap | str = "erf"
) -> Float[Array, "..."]:
    """The simplified attention layer `T(X) = sum_l w_l(lam chi) <X_l, v>` with chi_l = <X_l, k>.

    **Arguments:**

    - `X`: tokens, shape (..., L, d), L >= 1, finite.
    - `k`, `v`: key and value directions, shape (d,), finite.
    - `lam`: the inverse temperature, in [1e-50, 1e50] as `Problem.lam`.
    - `attention`: the weight map, an `AttentionMap` or a built-in one's name (default the paper's erf).

    **Returns:** T(X), shape (...).
    """
    X, k, v, lam = _check_predictor(X, k, v, lam)
    return attend(X @ k, X @ v, lam, attention)


def _check_predictor(X, k, v, lam):
    """The arguments of `predict` as arrays, else InvalidInput naming the first that is not allowed."""
    X, k, v = check_entries("X", X), check_entries("k", k), check_entries("v", v)
    if k.ndim != 1:
        raise wrong_shape("k", "(d,)", k.shape)
    if v.shape != k.shape:
        raise wrong_shape("v", f"(d,) = {k.shape}, k's", v.shape)
    if X.ndim < 2 or X.shape[-2] < 1 or X.shape[-1:] != k.shape:
        raise wrong_shape("X", f"(..., L, d) with L >= 1 tokens and d = {k.shape[0]}, k's size", X.shape)
    return X, k, v, SCALE.check("lam", lam)


def attend(key_projections, value_projections, lam, attention: AttentionMap | str = "erf"):
    """T from the tokens' projections `<X_l, k>` and `<X_l, v>`, shapes (..., L): all T depends on."""
    return jnp.sum(attention_weights(attention, lam * key_projections) * value_projections, axis=-1)


def squared_loss(key_projections, value_projections, y, lam, attention: AttentionMap | str = "erf") -> Float[Array, ""]:
    """Mean squared error of the predictor from the tokens' projections (..., L) on k and v."""
    return jnp.mean((y - attend(key_projections, value_projections, lam, attention)) ** 2)


def empirical_risk(X, y, k, v, lam, attention: AttentionMap | str = "erf") -> Float[Array, ""]:
    """Mean squared error of the attention predictor on samples (X, y): X (..., L, d) and y (...), at least one
    sample; k, v, lam and attention as in `predict`."""
    X, k, v, lam = _check_predictor(X, k, v, lam)
    y = check_entries("y", y)
    if y.shape != X.shape[:-2] or y.size < 1:
        raise wrong_shape("y", f"{X.shape[:-2]}, one label per sequence of X (at least one)", y.shape)
    return squared_loss(X @ k, X @ v, y, lam, attention)
