"""Finite-sample training: online SGD, (mini-)batch GD on a fixed dataset, population PGD.

Every mode takes the projected step of docs/science.md section 5 and renormalises:
k <- (k - lr (I - k k^T) g_k) / |.|, and the same for v, where (g_k, g_v) is the
gradient at the current iterate of the mini-batch squared loss (online), of the
loss on the batch drawn from the fixed dataset (dataset), or of the exact
population risk through the overlaps (population). Engine "rd" keeps k, v and the
samples in R^d; engine "overlaps" runs online SGD as the exact Markov chain on the five
overlaps (`Problem.sgd_step`, run by `flowsim.sgd.run_sgd`). Both use the engine's runner
(`flowsim.sgd.run_logged`): seeds in parallel (vmap), steps in `lax.scan` in compiled segments, logging
inside them; the closed-form risk of the logged overlaps is evaluated after it.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from flowsim._checks import InvalidInput, as_key, check_choice, check_count, wrong_shape
from flowsim._interrupt import ctrl_c_stops, run_interruptibly
from flowsim._memory import Need, check_fits
from flowsim.integrate import traced
from flowsim.sgd import (
    LoggedSteps,
    SGDRun,
    check_lengths,
    finish_run,
    init_states,
    logged_needs,
    logged_programs,
    make_run,
    run_logged,
)
from flowsim.sgd import run_sgd as run_chain
from flowsim.tasks.slr._data import GroundTruth, empirical_risk, ground_truth, sample
from flowsim.tasks.slr._overlap_sgd import frame
from flowsim.tasks.slr._overlaps import overlaps, validate_overlaps
from flowsim.tasks.slr._problem import Problem

__all__ = ["DTYPES", "ENGINES", "MODES", "projected_step", "run_sgd", "vectors_with_overlaps"]

MODES = ("online", "dataset", "population")
#: How online SGD is computed: with vectors and samples in R^d, or as the exact chain on the overlaps.
ENGINES = ("overlaps", "rd")
DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


def vectors_with_overlaps(m, truth: GroundTruth, key) -> tuple[Array, Array]:
    """Unit vectors k, v of R^d with overlaps m with truth, the rest in random directions.

    k = kappa k* + eta v* + a u1 and v = theta k* + nu v* + b u1 + c u2, with u1, u2 random
    orthonormal directions orthogonal to k* and v*, a = sqrt(1 - kappa^2 - eta^2),
    b = (rho - kappa theta - eta nu) / a (0 when a = 0), c = sqrt(1 - theta^2 - nu^2 - b^2).

    **Arguments:**

    - `m`: realizable overlaps (`check_overlaps`), shape (5,).
    - `truth`: the hidden directions, of dimension d >= 4.
    - `key`: a JAX PRNG key or an integer seed for the complementary directions.
    """
    if np.shape(m) != (5,):
        raise wrong_shape("m", "(5,), one point (kappa, nu, theta, eta, rho)", np.shape(m))
    validate_overlaps(m)
    shapes = (truth.k_star.shape, truth.v_star.shape)
    if len(shapes[0]) != 1 or shapes[0][0] < 4 or shapes[1] != shapes[0]:
        # Two directions orthogonal to k* and v* carry the rest of k and v.
        raise wrong_shape("truth", "(d,) with d >= 4 for both k_star and v_star", shapes)
    dtype = truth.k_star.dtype
    g = jax.random.normal(as_key(key), (2, truth.k_star.shape[0]), dtype)
    basis = [truth.k_star, truth.v_star]
    for vector in g:  # Gram-Schmidt of two Gaussian vectors against (k*, v*) and each other
        for b in basis:
            vector = vector - (vector @ b) * b
        basis.append(vector / jnp.linalg.norm(vector))
    # The frame coordinates of k and v on (k*, v*, u1, u2): the same construction as the overlap chain's.
    k_frame, v_frame = frame(jnp.asarray(m, dtype=float))
    basis = jnp.stack(basis)
    k, v = k_frame.astype(dtype) @ basis, v_frame.astype(dtype) @ basis
    return k / jnp.linalg.norm(k), v / jnp.linalg.norm(v)


def _initial_vectors(init, truth: GroundTruth, key, m0):
    g, h = jax.random.normal(key, (2, truth.k_star.shape[0]), truth.k_star.dtype)
    if init == "sphere":
        return g / jnp.linalg.norm(g), h / jnp.linalg.norm(h)
    if init == "manifold":
        k = g - (g @ truth.v_star) * truth.v_star
        k = k / jnp.linalg.norm(k)
        # v orthogonal to k* and to k: remove k* first, then the part of k orthogonal to k*.
        h = h - (h @ truth.k_star) * truth.k_star
        u = k - (k @ truth.k_star) * truth.k_star
        u = u / jnp.linalg.norm(u)
        h = h - (h @ u) * u
        return k, h / jnp.linalg.norm(h)
    return vectors_with_overlaps(m0, truth, key)


def projected_step(vector, gradient, lr):
    """One step of projected SGD on the unit sphere: along the tangent part of the gradient, renormalised.

    **Returns:** the new unit vector, or NaNs where the step overflowed (reported as a divergence).
    """
    tangent = gradient - (gradient @ vector) * vector
    new = vector - lr * tangent
    norm = jnp.linalg.norm(new)
    # An overflowing step would otherwise normalise to the zero vector, finite but meaningless.
    return jnp.where(jnp.isfinite(norm) & (norm > 0), new / norm, jnp.nan)


def run_sgd(
    problem: Problem,
    key,
    *,
    init="sphere",
    lr: float,
    steps: int,
    batch: int = 1,
    mode: str = "online",
    log_every: int = 1,
    seeds: int = 1,
    n: int | None = None,
    n_test: int = 10_000,
    dtype: str = "float64",
    engine: str = "rd",
) -> SGDRun:
    """Train (k, v) in R^d from many seeds at once.

    **Arguments:**

    - `problem`: the task (d, L, lam, gamma, eps); a schedule in `lam` is read at t = lr * step
      (e.g. `InverseTimeDecay(lam0, rate, lr)` for the paper's per-step schedule).
    - `key`: a JAX PRNG key or an integer seed; seed i uses `jax.random.split(key, seeds)[i]` for its hidden
      directions, initialisation and data, so the same key gives the same run.
    - `init`: "sphere", "manifold", or overlaps of shape (5,) or (seeds, 5) (vectors built by
      `vectors_with_overlaps`).
    - `lr`: the step size (> 0); the flow's clock is t = lr * step.
    - `steps`: the number of steps (>= 1), a multiple of `log_every`.
    - `batch`: samples per step (>= 1); in mode "dataset", batch = n is full-batch GD and a
      smaller batch runs epochs over a fresh permutation of the dataset.
    - `mode`: "online" (fresh samples each step), "dataset" (a fixed dataset of n samples),
      or "population" (exact gradient of the population risk through the overlaps).
    - `log_every`: log every `log_every` steps (and step 0).
    - `seeds`: the number of independent runs (>= 1).
    - `n`: the dataset size for mode "dataset" (a multiple of `batch`).
    - `n_test`: held-out samples for the test risk of mode "dataset".
    - `dtype`: "float64" (default) or "float32" for the vectors and the data.
    - `engine`: "rd" (vectors and samples in R^d) or "overlaps": online SGD as the exact Markov
      chain on the five overlaps, at a cost per step independent of d (`flowsim.tasks.slr._overlap_sgd`;
      mode "online", float64 and d >= 5 only). Its runs have the law of the R^d engine's, not its
      sample paths: seed i draws its initialisation and mini-batches from its own key.

    **Returns:** an `SGDRun` (`flowsim.sgd`) whose states are the overlaps. A seed whose iterate
    becomes non-finite has status DIVERGED and is reported by `failures()` with its first bad step;
    what it logged before stays.
    """
    check_choice("mode", mode, MODES)
    check_choice("dtype", dtype, tuple(DTYPES))
    check_choice("engine", engine, ENGINES)
    if engine == "overlaps":
        if mode != "online":
            raise InvalidInput(f"engine 'overlaps' runs online SGD only: mode must be 'online', got {mode!r}")
        if dtype != "float64":
            raise InvalidInput(f"engine 'overlaps' runs in float64 only, got dtype {dtype!r}")
        if problem.d < 5:
            raise InvalidInput(
                f"engine 'overlaps' needs d >= 5 (a 4-dimensional frame and its complement), got d = {problem.d}"
            )
        return run_chain(
            problem, as_key(key), init=init, lr=lr, steps=steps, batch=batch, log_every=log_every, seeds=seeds
        )
    lr, steps, batch, log_every, seeds = check_lengths(lr, steps, batch, log_every, seeds)
    if mode == "dataset":
        n = check_count("n", n, 1)
        if n % batch:
            raise InvalidInput(f"batch = {batch} must divide the dataset size n = {n}")
        n_test = check_count("n_test", n_test, 1)
    _check_memory(problem, mode, steps // log_every, batch, seeds, n, n_test, DTYPES[dtype])
    m0 = init_states(problem, init, seeds)
    if m0 is not None and problem.d < 4:
        raise InvalidInput(f"building vectors with given overlaps needs d >= 4, got d = {problem.d}")
    if m0 is None and init == "manifold" and problem.d < 3:  # init is a name only when m0 is None
        raise InvalidInput(f"init 'manifold' needs d >= 3, got d = {problem.d}")
    init = "given" if m0 is not None else init
    m0 = jnp.zeros((seeds, 5)) if m0 is None else m0
    config = (mode, init, batch, n, n_test, DTYPES[dtype], problem.d)  # d: the vectors' size (static)
    shared = (traced(problem), jnp.asarray(lr, dtype=float))
    per_seed = (jax.random.split(as_key(key), seeds), m0)
    with ctrl_c_stops():
        logged, interrupted = run_interruptibly(
            lambda: run_logged(_RD, shared, per_seed, config, logs=steps // log_every, log_every=log_every)
        )
    if mode == "dataset":
        m, train, test, first_bad, stopped_at = logged
        logged = (m, first_bad, stopped_at, train, test)
    return finish_run(make_run(problem, lr, steps, log_every, *logged), interrupted)


def _check_memory(problem, mode, logs, batch, seeds, n, n_test, dtype) -> None:
    """Refuse a run in R^d whose samples or logs would not fit in memory (`flowsim._memory`)."""
    token_bytes = problem.L * problem.d * np.dtype(dtype).itemsize  # one sequence X_i
    needs = [logged_needs(seeds, logs, 8)]  # overlaps, risk, train and test risk
    if mode == "online":
        # X of a step and the gradient's intermediates of the same size, for every seed at once.
        needs.append(
            Need(
                f"the samples of one step ({seeds} seeds x batch {batch} x L {problem.L} x d {problem.d})",
                3 * seeds * batch * token_bytes,
                "lower batch (--batch), seeds (--seeds) or d (--d), or use the overlap engine",
            )
        )
    elif mode == "dataset":
        needs.append(
            Need(
                f"the datasets ({seeds} seeds x (n {n} + {n_test} held out) x L {problem.L} x d {problem.d})",
                seeds * (n + n_test + 2 * batch) * token_bytes,
                "lower n (--n), seeds (--seeds) or d (--d)",
            )
        )
    check_fits("run_sgd", needs)


def _rd_seed(shared, seed, config) -> LoggedSteps:
    """One seed's training in R^d: its hidden directions, start, data, steps and logs."""
    problem, lr = shared
    seed_key, m0 = seed
    mode, init, batch, n, n_test, dtype, d = config
    key_truth, key_init, key_data, key_test = jax.random.split(seed_key, 4)
    truth64 = ground_truth(key_truth, d)
    truth = GroundTruth(truth64.k_star.astype(dtype), truth64.v_star.astype(dtype))
    k, v = _initial_vectors(init, truth, key_init, m0)
    dataset = sample(problem, truth, key_data, n, dtype)[:2] if mode == "dataset" else None
    held_out = sample(problem, truth, key_test, n_test, dtype)[:2] if mode == "dataset" else None

    def gradients(k, v, step, lam):
        if mode == "population":
            return jax.grad(lambda k, v: problem.risk(lr * step, overlaps(k, v, truth)), (0, 1))(k, v)
        if mode == "online":
            X, y, _ = sample(problem, truth, jax.random.fold_in(key_data, step), batch, dtype)
        else:
            X, y = dataset
            if batch < n:
                per_epoch = n // batch
                order = jax.random.permutation(jax.random.fold_in(key_data, step // per_epoch), n)
                rows = jax.lax.dynamic_slice(order, ((step % per_epoch) * batch,), (batch,))
                X, y = X[rows], y[rows]
        return jax.grad(empirical_risk, (2, 3))(X, y, k, v, lam, problem.attention)

    def step(state, index):
        k, v = state
        lam = problem.lam_at(lr * index).astype(dtype)
        g_k, g_v = gradients(k, v, index, lam)
        return projected_step(k, g_k, lr.astype(dtype)), projected_step(v, g_v, lr.astype(dtype))

    def record(state, index):
        k, v = state
        out = [overlaps(k.astype(float), v.astype(float), truth64)]
        if mode == "dataset":
            lam = problem.lam_at(lr * index).astype(dtype)
            out += [
                empirical_risk(*dataset, k, v, lam, problem.attention),
                empirical_risk(*held_out, k, v, lam, problem.attention),
            ]
        return out

    return LoggedSteps((k, v), step, record)


#: The compiled programs of training in R^d.
_RD = logged_programs(_rd_seed)
