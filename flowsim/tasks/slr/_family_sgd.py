"""Finite-sample SGD in R^D for the SLR family, on the flow's clock t = lr * step (docs/follow-up-models.md).

k and v are trained in R^D on the squared loss (y - f(X))^2 of sequences from `family_sample` (k* = e_1,
v* = e_2; variable lengths padded, predicted by `family_predict`), online (a fresh batch each step) or on a
fixed dataset (mini-batches drawn from it, epoch by epoch). With free norms the step is plain SGD on the loss plus
the ridge (r/2)(|k|^2 + |v|^2), whose expectation is the objective of `FamilyProblem`'s flow; with unit norms
it is projected SGD on the spheres (`slr._sgd.projected_step`), the scores multiplied by lam. The run logs the
problem's state (the seven, or the five overlaps with unit norms) as an `SGDRun` of the problem, so that
`flowsim.compare` and its sweeps compare it with the flow unchanged.

It uses the engine's runner (`flowsim.sgd.run_logged`): seeds in parallel, steps in compiled segments.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from flowsim._checks import InvalidInput, as_floats, as_key, check_choice, check_count, wrong_shape
from flowsim._interrupt import ctrl_c_stops, run_interruptibly
from flowsim._memory import Need, check_work, float_bytes
from flowsim.integrate import traced
from flowsim.sgd import LoggedSteps, SGDRun, check_lengths, finish_run, logged_programs, make_run, run_logged
from flowsim.tasks.slr._estimates import sgd_work
from flowsim.tasks.slr._family_data import FamilyBatch, family_predict, family_sample
from flowsim.tasks.slr._family_problem import FamilyOnPlane, FamilyProblem, seven_from_vectors
from flowsim.tasks.slr._sgd import projected_step

__all__ = ["FAMILY_MODES", "FamilyTraining", "family_loss", "run_family_sgd", "train_family"]

FAMILY_MODES = ("online", "dataset")
#: Tolerance on |k| = |v| = 1 for given starts with unit norms.
_UNIT_TOL = 1e-10


class FamilyTraining(eqx.Module):
    """A family SGD run and what the logged state does not hold.

    **Fields:**

    - `run`: the `SGDRun` (its state: the problem's; `run.train_risk` the dataset's loss in mode "dataset").
    - `k`, `v`: the final vectors, (seeds, D); NaN for a seed that diverged.
    - `dataset`: mode "dataset": each seed's `FamilyBatch`, every field with a leading seeds axis; else None.
    """

    run: SGDRun
    k: Float[Array, "seeds D"]
    v: Float[Array, "seeds D"]
    dataset: FamilyBatch | None


def family_loss(problem: FamilyProblem, batch: FamilyBatch, k, v) -> Float[Array, ""]:
    """The objective SGD steps on: the batch's mean of (y - f(X))^2, plus (r/2)(|k|^2 + |v|^2) with free norms.

    With unit norms the scores are lam <x, k> and there is no ridge (k, v are kept on the spheres instead).

    **Arguments:** the problem; a `FamilyBatch`; k, v (D,).

    **Returns:** the objective, a scalar; its expectation over batches is the flow's (the risk plus the ridge).
    """
    loss = _mean_squared(problem, batch, k, v)
    return loss + problem.geometry.ridge / 2 * (k @ k + v @ v) if problem.free else loss


def _mean_squared(problem: FamilyProblem, batch: FamilyBatch, k, v) -> Float[Array, ""]:
    """The batch's mean of (y - f(X))^2, the scores lam <x, k> with unit norms."""
    scale = 1.0 if problem.free else problem.geometry.lam
    prediction = family_predict(problem.attention, batch, scale * k, v, problem.data.lengths.values)
    return jnp.mean((batch.labels - prediction) ** 2)


def _state(problem: FamilyProblem, k, v):
    """The problem's state of (k, v): the seven, or (with unit norms) the five overlaps (kappa, nu, theta, eta, rho)."""
    eye = jnp.eye(k.shape[-1], dtype=k.dtype)
    seven = seven_from_vectors(k, v, eye[0], eye[1])
    return seven if problem.free else seven[..., jnp.array([0, 3, 2, 1, 6])]


def _starts(problem: FamilyProblem, k0, v0, seeds: int):
    """The given starts as (seeds, D) arrays, checked; None when neither is given (drawn in the run)."""
    if (k0 is None) != (v0 is None):
        raise InvalidInput("give both k0 and v0 (the start), or neither (a small random start drawn per seed)")
    if k0 is None:
        return None
    D = problem.D
    starts = []
    for name, vector in (("k0", k0), ("v0", v0)):
        array = as_floats(name, vector)
        if array.shape not in ((D,), (seeds, D)):
            raise wrong_shape(name, f"(D,) = ({D},) or (seeds, D) = ({seeds}, {D})", array.shape)
        if not np.isfinite(array).all():
            raise InvalidInput(f"{name} must be finite, got a non-finite entry")
        if not problem.free and np.abs(np.linalg.norm(array, axis=-1) - 1).max() > _UNIT_TOL:
            raise InvalidInput(f"{name} must be a unit vector (the problem has unit norms), got a norm other than 1")
        starts.append(jnp.asarray(np.broadcast_to(array, (seeds, D))))
    return tuple(starts)


def _check_work(problem: FamilyProblem, mode, steps, batch, logs, seeds, samples, force: bool) -> None:
    """Refuse, before anything is compiled, a run whose samples, dataset or logs would not fit, or that would take
    hours (`flowsim._memory.check_work`; the per-step cost of slr's SGD in R^d)."""
    longest, D = problem.data.lengths.longest, problem.D
    needs, costs = sgd_work("rd", seeds, steps, batch, longest, D, logs, {"log_every": "log_every"})
    needs.append(
        Need(
            f"the logged vectors ({seeds} seeds x {logs + 1} logs x 2 D = {2 * D}, twice)",
            float_bytes(4, seeds, logs + 1, D),
            "raise log_every",
        )
    )
    if mode == "dataset":
        needs.append(
            Need(
                f"the datasets ({seeds} seeds x {samples} samples x L {longest} x D {D}, twice: the run's, returned)",
                float_bytes(2, seeds, samples, longest, D),
                "lower samples or seeds",
            )
        )
    check_work("run_family_sgd", needs, costs, force=force)


def train_family(
    problem: FamilyProblem,
    key,
    *,
    lr: float,
    steps: int,
    batch: int = 1,
    mode: str = "online",
    samples: int | None = None,
    log_every: int = 1,
    seeds: int = 1,
    k0=None,
    v0=None,
    force: bool = False,
) -> FamilyTraining:
    """Train (k, v) in R^D, D = problem.D, on the problem's data, many seeds at once.

    **Arguments:**

    - `problem`: a `FamilyProblem` (data model, attention map, geometry, D).
    - `key`: a JAX PRNG key or an integer seed; seed i uses `jax.random.split(key, seeds)[i]` for its start and
      data: the same key gives the same run.
    - `lr`: the step size (> 0); the flow's clock is t = lr * step.
    - `steps`: the number of steps (>= 1), a multiple of `log_every`.
    - `batch`: sequences per step (>= 1).
    - `mode`: "online" (a fresh batch each step) or "dataset" (a fixed dataset of `samples` sequences per seed,
      mini-batches of `batch` drawn from a fresh permutation each epoch, the remainder of an epoch left out;
      batch = samples is full-batch GD).
    - `samples`: the dataset's size in mode "dataset" (>= batch); not read in mode "online".
    - `log_every`: log every `log_every` steps (and step 0).
    - `seeds`: the number of independent runs (>= 1).
    - `k0`, `v0`: the start, (D,) for every seed or (seeds, D) (unit vectors with unit norms); by default k, v ~
      N(0, scale^2 I / D) with free norms (the problem's "small" start, drawn in R^D), uniform on the spheres
      with unit norms.
    - `force`: run even if the estimate before work says it takes hours.

    **Returns:** a `FamilyTraining`: the `SGDRun` (the problem's state at the logged steps, its population risk,
    and in mode "dataset" the dataset's mean squared loss as `train_risk`; the population risk is the exact test
    risk, so there is no held-out sample), the final vectors and the datasets.
    """
    if not isinstance(problem, FamilyProblem) or isinstance(problem, FamilyOnPlane):
        # SGD's noise leaves the invariant plane at once: its runs compare with the full problem's flow only.
        raise InvalidInput(f"problem must be a slr.FamilyProblem (not its restriction), got {type(problem).__name__}")
    check_choice("mode", mode, FAMILY_MODES)
    lr, steps, batch, log_every, seeds = check_lengths(lr, steps, batch, log_every, seeds)
    if mode == "dataset":
        if samples is None:
            raise InvalidInput("mode 'dataset' needs samples, the dataset's size (an integer >= batch)")
        samples = check_count("samples", samples, 1)
        if samples < batch:
            raise InvalidInput(
                f"samples must be >= batch = {batch} (a mini-batch is drawn from the dataset), got {samples}"
            )
    elif samples is not None:
        raise InvalidInput("samples is read in mode 'dataset' only: leave it out in mode 'online'")
    starts = _starts(problem, k0, v0, seeds)
    _check_work(problem, mode, steps, batch, steps // log_every, seeds, samples, force)
    D = problem.D
    given = starts is not None
    starts = starts if given else (jnp.zeros((seeds, D)), jnp.zeros((seeds, D)))
    config = (mode, batch, samples, given)
    shared = (traced(problem), jnp.asarray(lr, dtype=float))
    per_seed = (jax.random.split(as_key(key), seeds), starts)
    with ctrl_c_stops():
        logged, interrupted = run_interruptibly(
            lambda: run_logged(_FAMILY, shared, per_seed, config, logs=steps // log_every, log_every=log_every)
        )
    ys, k, v, *train, first_bad, stopped_at = logged
    run = make_run(problem, lr, steps, log_every, ys, first_bad, stopped_at, *train)
    dataset = _datasets(shared[0], per_seed[0], samples) if mode == "dataset" else None
    training = FamilyTraining(run, k[:, -1], v[:, -1], dataset)
    finish_run(run, interrupted)
    return training


def run_family_sgd(problem: FamilyProblem, key, **options) -> SGDRun:
    """`train_family`'s `SGDRun` alone: the trainer `flowsim.compare`'s sweeps take (`train=run_family_sgd`).

    **Arguments:** as `train_family`. **Returns:** the `SGDRun`.
    """
    return train_family(problem, key, **options).run


def _keys(seed_key):
    """A seed's keys: (start, online batches, dataset)."""
    return jax.random.split(seed_key, 3)


def _dataset(problem: FamilyProblem, seed_key, samples: int) -> FamilyBatch:
    return family_sample(_keys(seed_key)[2], problem.data, samples, problem.D)


@eqx.filter_jit
def _datasets(problem: FamilyProblem, seed_keys, samples: int) -> FamilyBatch:
    """Every seed's dataset, as its run drew it (one program: run eagerly, each operation would compile its own)."""
    return jax.vmap(lambda seed_key: _dataset(problem, seed_key, samples))(seed_keys)


def _family_seed(shared, seed, config) -> LoggedSteps:
    """One seed's training in R^D: its start, data, steps and logs."""
    problem, lr = shared
    seed_key, (k0, v0) = seed
    mode, batch, samples, given = config
    key_init, key_data, _ = _keys(seed_key)
    D = k0.shape[-1]
    if not given:
        k0, v0 = jax.random.normal(key_init, (2, D))
        if problem.free:
            k0, v0 = problem.scale / math.sqrt(D) * k0, problem.scale / math.sqrt(D) * v0
        else:
            k0, v0 = k0 / jnp.linalg.norm(k0), v0 / jnp.linalg.norm(v0)
    dataset = _dataset(problem, seed_key, samples) if mode == "dataset" else None
    gradient = jax.grad(lambda k, v, data: family_loss(problem, data, k, v), (0, 1))

    def draw(index) -> FamilyBatch:
        if mode == "online":
            return family_sample(jax.random.fold_in(key_data, index), problem.data, batch, D)
        if batch == samples:
            return dataset
        per_epoch = samples // batch
        order = jax.random.permutation(jax.random.fold_in(key_data, index // per_epoch), samples)
        rows = jax.lax.dynamic_slice(order, ((index % per_epoch) * batch,), (batch,))
        return jax.tree.map(lambda x: x[rows], dataset)

    def step(state, index):
        k, v = state
        g_k, g_v = gradient(k, v, draw(index))
        if problem.free:
            return k - lr * g_k, v - lr * g_v
        return projected_step(k, g_k, lr), projected_step(v, g_v, lr)

    def record(state, index):
        k, v = state
        out = [_state(problem, k, v), k, v]
        if mode == "dataset":
            out.append(_mean_squared(problem, dataset, k, v))
        return out

    return LoggedSteps((k0, v0), step, record)


#: The compiled programs of the family's training in R^D.
_FAMILY = logged_programs(_family_seed)
