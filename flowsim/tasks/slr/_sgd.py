"""Finite-sample training: online SGD, (mini-)batch GD on a fixed dataset, population PGD.

Every mode takes the projected step of SPEC.md section 5 and renormalises:
k <- (k - lr (I - k k^T) g_k) / |.|, and the same for v, where (g_k, g_v) is the
gradient at the current iterate of the mini-batch squared loss (online), of the
loss on the batch drawn from the fixed dataset (dataset), or of the exact
population risk through the overlaps (population). Engine "Rd" keeps k, v and the
samples in R^d; engine "overlaps" runs online SGD as the exact Markov chain on the five
overlaps (`flowsim.tasks.slr._overlap_sgd`). Seeds run in parallel (vmap), steps in `lax.scan`,
logging inside the scan; the closed-form risk of the logged overlaps is evaluated after it.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from flowsim.tasks.slr import _generated as generated
from flowsim.integrate import evaluate, traced
from flowsim.schedules import Constant
from flowsim.tasks.slr._data import GroundTruth, _check_count, _check_positive, _ground_truth, _sample, predict
from flowsim.tasks.slr._dynamics import _risk_along
from flowsim.tasks.slr._init import initial_overlaps
from flowsim.tasks.slr._overlap_sgd import draw_step_noise, sgd_step
from flowsim.tasks.slr._overlaps import check_overlaps, overlaps
from flowsim.tasks.slr._problem import Problem

__all__ = ["ENGINES", "MODES", "SGDRun", "run_sgd", "vectors_with_overlaps"]

MODES = ("online", "dataset", "population")
ENGINES = ("Rd", "overlaps")
INITS = ("sphere", "manifold")
DTYPES = {"float64": jnp.float64, "float32": jnp.float32}


class SGDRun(NamedTuple):
    """Logged trajectories of many seeds.

    **Fields:**

    - `steps`: the logged steps 0, log_every, ..., steps, shape (logs,).
    - `times`: the same on the flow's clock t = lr * step.
    - `overlaps`: (seeds, logs, 5); NaN after a divergence.
    - `risk`: the exact population risk at each logged iterate (closed form), (seeds, logs).
    - `train_risk`, `test_risk`: for mode "dataset", the risk on the training set and on a
      held-out sample, (seeds, logs); None otherwise.
    - `lam`: lam at each logged step, (logs,).
    - `diverged`: {seed: first step whose iterate was not finite}.
    """

    steps: np.ndarray
    times: np.ndarray
    overlaps: Float[Array, "seeds logs 5"]
    risk: Float[Array, "seeds logs"]
    train_risk: Float[Array, "seeds logs"] | None
    test_risk: Float[Array, "seeds logs"] | None
    lam: Float[Array, " logs"]
    diverged: dict[int, int]


def vectors_with_overlaps(m, truth: GroundTruth, key) -> tuple[Array, Array]:
    """Unit vectors k, v of R^d with overlaps m with truth, the rest in random directions.

    k = kappa k* + eta v* + a u1 and v = theta k* + nu v* + b u1 + c u2, with u1, u2 random
    orthonormal directions orthogonal to k* and v*, a = sqrt(1 - kappa^2 - eta^2),
    b = (rho - kappa theta - eta nu) / a (0 when a = 0), c = sqrt(1 - theta^2 - nu^2 - b^2).

    **Arguments:**

    - `m`: realizable overlaps, shape (5,); d must be >= 4.
    - `truth`: the hidden directions.
    - `key`: a JAX PRNG key for the complementary directions.
    """
    kappa, nu, theta, eta, rho = (jnp.asarray(x, dtype=truth.k_star.dtype) for x in m)
    g = jax.random.normal(key, (2, truth.k_star.shape[0]), truth.k_star.dtype)
    basis = [truth.k_star, truth.v_star]
    for vector in g:  # Gram-Schmidt of two Gaussian vectors against (k*, v*) and each other
        for b in basis:
            vector = vector - (vector @ b) * b
        basis.append(vector / jnp.linalg.norm(vector))
    u1, u2 = basis[2], basis[3]
    a = jnp.sqrt(jnp.maximum(1 - kappa**2 - eta**2, 0.0))
    b = jnp.where(a > 1e-12, (rho - kappa * theta - eta * nu) / jnp.where(a > 1e-12, a, 1.0), 0.0)
    c = jnp.sqrt(jnp.maximum(1 - theta**2 - nu**2 - b**2, 0.0))
    k = kappa * truth.k_star + eta * truth.v_star + a * u1
    v = theta * truth.k_star + nu * truth.v_star + b * u1 + c * u2
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


def _risk_at(problem: Problem, lam, m):
    return generated.risk(*jnp.moveaxis(m, -1, 0), problem.d, problem.L, lam, problem.gamma, problem.eps)


def _projected_step(vector, gradient, lr):
    tangent = gradient - (gradient @ vector) * vector
    new = vector - lr * tangent
    norm = jnp.linalg.norm(new)
    # An overflowing step would otherwise normalise to the zero vector, finite but meaningless.
    return jnp.where(jnp.isfinite(norm) & (norm > 0), new / norm, jnp.nan)


def _squared_loss(k, v, X, y, lam):
    return jnp.mean((y - predict(X, k, v, lam)) ** 2)


def _logged_scan(step, record, state, logs: int, log_every: int, draw=None):
    """Run `step` for logs * log_every steps in `lax.scan`, logging as it goes.

    `step(state, n) -> state`, or `step(state, n, draw(n))` when `draw` is given: the random
    numbers of step n are then drawn in bulk for a chunk of steps before they run (fewer,
    larger operations per step), and depend on n only, not on the chunking or `log_every`.

    **Returns:** `record(state, n)` (a list of arrays) at n = 0, log_every, ..., stacked on a
    first axis, then the first step whose state was not finite (-1 if none). From that step on,
    the state is NaN: a diverged seed logs no half-finite values.
    """
    chunk = _chunk_size(log_every) if draw is not None else log_every

    def one_step(carry, noise):
        state, index, first_bad = carry
        state = step(state, index) if draw is None else step(state, index, noise)
        bad = ~jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(state)]))
        first_bad = jnp.where((first_bad < 0) & bad, index + 1, first_bad)
        state = jax.tree.map(lambda x: jnp.where(bad, jnp.nan, x), state)
        return (state, index + 1, first_bad), None

    def one_chunk(carry, _):
        noise = None if draw is None else jax.vmap(draw)(carry[1] + jnp.arange(chunk))
        return jax.lax.scan(one_step, carry, noise, length=chunk)[0], None

    def block(carry, _):
        carry, _ = jax.lax.scan(one_chunk, carry, None, length=log_every // chunk)
        return carry, record(carry[0], carry[1])

    start = (state, jnp.asarray(0), jnp.asarray(-1))
    (_, _, first_bad), logged = jax.lax.scan(block, start, None, length=logs)
    initial = record(state, jnp.asarray(0))
    series = [jnp.concatenate([first[None], rest]) for first, rest in zip(initial, logged, strict=True)]
    return (*series, first_bad)


def _chunk_size(log_every: int, largest: int = 256) -> int:
    """The largest divisor of log_every that is at most `largest` (steps whose noise is drawn at once)."""
    return next(c for c in range(min(log_every, largest), 0, -1) if log_every % c == 0)


def run_sgd(
    problem: Problem,
    key,
    *,
    init="sphere",
    lr: float,
    steps: int,
    batch: int = 1,
    mode: str = "online",
    schedule=None,
    log_every: int = 1,
    seeds: int = 1,
    n: int | None = None,
    n_test: int = 10_000,
    dtype: str = "float64",
    engine: str = "Rd",
) -> SGDRun:
    """Train (k, v) in R^d from many seeds at once.

    **Arguments:**

    - `problem`: the task (d, L, lam, gamma, eps).
    - `key`: a JAX PRNG key; seed i uses `jax.random.split(key, seeds)[i]` for its hidden
      directions, initialisation and data, so the same key gives the same run.
    - `init`: "sphere", "manifold", or overlaps of shape (5,) or (seeds, 5) (vectors built by
      `vectors_with_overlaps`).
    - `lr`: the step size (> 0); the flow's clock is t = lr * step.
    - `steps`: the number of steps (>= 1), a multiple of `log_every`.
    - `batch`: samples per step (>= 1); in mode "dataset", batch = n is full-batch GD and a
      smaller batch runs epochs over a fresh permutation of the dataset.
    - `mode`: "online" (fresh samples each step), "dataset" (a fixed dataset of n samples),
      or "population" (exact gradient of the population risk through the overlaps).
    - `schedule`: lam as a function of t = lr * step (e.g. `InverseTimeDecay(lam0, rate, lr)`
      for the paper's per-step schedule); default: problem.lam.
    - `log_every`: log every `log_every` steps (and step 0).
    - `seeds`: the number of independent runs (>= 1).
    - `n`: the dataset size for mode "dataset" (a multiple of `batch`).
    - `n_test`: held-out samples for the test risk of mode "dataset".
    - `dtype`: "float64" (default) or "float32" for the vectors and the data.
    - `engine`: "Rd" (vectors and samples in R^d) or "overlaps": online SGD as the exact Markov
      chain on the five overlaps, at a cost per step independent of d (`flowsim.tasks.slr._overlap_sgd`;
      mode "online", float64 and d >= 5 only). Its runs have the law of the R^d engine's, not its
      sample paths: seed i draws its initialisation and mini-batches from its own key.

    **Returns:** an `SGDRun`. A seed whose iterate becomes non-finite is reported in
    `diverged` with its first bad step; what it logged before stays.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "overlaps":
        if mode != "online":
            raise ValueError(f"engine 'overlaps' runs online SGD only: mode must be 'online', got {mode!r}")
        if dtype != "float64":
            raise ValueError(f"engine 'overlaps' runs in float64 only, got dtype {dtype!r}")
        if problem.d < 5:
            raise ValueError(
                f"engine 'overlaps' needs d >= 5 (a 4-dimensional frame and its complement), got d = {problem.d}"
            )
    lr = _check_positive("lr", lr)
    steps = _check_count("steps", steps, 1)
    batch = _check_count("batch", batch, 1)
    log_every = _check_count("log_every", log_every, 1)
    seeds = _check_count("seeds", seeds, 1)
    if steps % log_every:
        raise ValueError(f"log_every = {log_every} must divide steps = {steps}")
    if mode == "dataset":
        n = _check_count("n", n, 1)
        if n % batch:
            raise ValueError(f"batch = {batch} must divide the dataset size n = {n}")
        n_test = _check_count("n_test", n_test, 1)
    m0 = np.zeros((seeds, 5))
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS} or overlaps of shape (5,) or (seeds, 5), got {init!r}")
    else:
        m0 = np.broadcast_to(check_overlaps(init), (seeds, 5)) if np.ndim(init) == 1 else check_overlaps(init)
        if m0.shape != (seeds, 5):
            raise ValueError(f"init overlaps must have shape (5,) or (seeds, 5) = ({seeds}, 5), got {m0.shape}")
        if problem.d < 4:
            raise ValueError(f"building vectors with given overlaps needs d >= 4, got d = {problem.d}")
        init = "given"
    if init == "manifold" and problem.d < 3:
        raise ValueError(f"init 'manifold' needs d >= 3, got d = {problem.d}")
    args = traced((problem, schedule if schedule is not None else Constant(problem.lam)))
    lr_array, seed_keys = jnp.asarray(lr, dtype=float), jax.random.split(key, seeds)
    if engine == "overlaps":
        logged = _run_overlaps(args, lr_array, seed_keys, jnp.asarray(m0), (init, steps // log_every, log_every, batch))
    else:
        config = (mode, init, steps // log_every, log_every, batch, n, n_test, DTYPES[dtype])
        logged = _run(args, lr_array, seed_keys, jnp.asarray(m0), config)
    m, train, test, first_bad = (np.asarray(x) if x is not None else None for x in logged)
    logged_steps = np.arange(0, steps + 1, log_every)
    times = lr * jnp.asarray(logged_steps, dtype=float)
    lam = np.asarray(jax.vmap(args[1])(times))
    # The exact risk outside the scan: one compiled function for every run of the same shape.
    risk = evaluate(_risk_along, times, jnp.asarray(m), args)
    return SGDRun(
        logged_steps,
        np.asarray(times),
        jnp.asarray(m),
        risk,
        None if train is None else jnp.asarray(train),
        None if test is None else jnp.asarray(test),
        jnp.asarray(lam),
        {int(i): int(first_bad[i]) for i in np.flatnonzero(first_bad >= 0)},
    )


@eqx.filter_jit
def _run(args, lr, seed_keys, m0, config):
    mode, init, logs, log_every, batch, n, n_test, dtype = config
    problem, schedule = args

    def one_seed(seed_key, m0):
        key_truth, key_init, key_data, key_test = jax.random.split(seed_key, 4)
        truth64 = _ground_truth(key_truth, problem.d)
        truth = GroundTruth(truth64.k_star.astype(dtype), truth64.v_star.astype(dtype))
        k, v = _initial_vectors(init, truth, key_init, m0)
        dataset = _sample(problem, truth, key_data, n, dtype)[:2] if mode == "dataset" else None
        held_out = _sample(problem, truth, key_test, n_test, dtype)[:2] if mode == "dataset" else None

        def gradients(k, v, step, lam):
            if mode == "population":
                return jax.grad(lambda k, v: _risk_at(problem, lam, overlaps(k, v, truth)), (0, 1))(k, v)
            if mode == "online":
                X, y, _ = _sample(problem, truth, jax.random.fold_in(key_data, step), batch, dtype)
            else:
                X, y = dataset
                if batch < n:
                    per_epoch = n // batch
                    order = jax.random.permutation(jax.random.fold_in(key_data, step // per_epoch), n)
                    rows = jax.lax.dynamic_slice(order, ((step % per_epoch) * batch,), (batch,))
                    X, y = X[rows], y[rows]
            return jax.grad(_squared_loss, (0, 1))(k, v, X, y, lam)

        def step(state, index):
            k, v = state
            lam = schedule(lr * index).astype(dtype)
            g_k, g_v = gradients(k, v, index, lam)
            return _projected_step(k, g_k, lr.astype(dtype)), _projected_step(v, g_v, lr.astype(dtype))

        def record(state, index):
            k, v = state
            out = [overlaps(k.astype(float), v.astype(float), truth64)]
            if mode == "dataset":
                lam = schedule(lr * index)
                out += [
                    _squared_loss(k, v, *dataset, lam.astype(dtype)),
                    _squared_loss(k, v, *held_out, lam.astype(dtype)),
                ]
            return out

        return _logged_scan(step, record, (k, v), logs, log_every)

    outputs = jax.vmap(one_seed)(seed_keys, m0)
    if mode == "dataset":
        return outputs
    m, first_bad = outputs
    return m, None, None, first_bad


@eqx.filter_jit
def _run_overlaps(args, lr, seed_keys, m0, config):
    init, logs, log_every, batch = config
    problem, schedule = args

    def one_seed(seed_key, m0):
        key_init, key_data = jax.random.split(seed_key)
        if init != "given":
            m0 = initial_overlaps(key_init, problem.d, 1, init)[0]

        def draw(index):
            return draw_step_noise(jax.random.fold_in(key_data, index), batch, problem.L, problem.d)

        def step(m, index, noise):
            return sgd_step(problem, m, schedule(lr * index), lr, noise, batch)

        return _logged_scan(step, lambda m, index: [m], m0, logs, log_every, draw)

    m, first_bad = jax.vmap(one_seed)(seed_keys, m0)
    return m, None, None, first_bad
