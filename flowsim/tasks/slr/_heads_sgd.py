"""Projected online SGD of H attention heads in R^d, on data with S informative locations (docs/heads.md).

Each step draws a fresh batch from the data seam (`family_sample`: S distinct uniform positions, token J_j ~
N(spike k*_j, spread^2 I), k*_j = e_{2j-1}, v*_j = e_{2j}), takes the gradient of the batch's mean squared loss of
f(X) = sum_h sum_l w_l(lam_t <x_l, k_h>) <x_l, v_h> (`heads_gradient`), and moves every k_h and v_h along the part of
its gradient tangent to the sphere, renormalised (`slr._sgd.projected_step`): Marion et al.'s projected SGD, for
every head at once. lam_t is the problem's lam at the flow time t = lr * step (the authors' two-head schedule:
`InverseTimeDecay(2.0, 2e-4, 1e-3, until=25_000)`, lam0 / (1 + 2e-4 t) to step 25 000, then fixed). The run logs
the heads' order parameters (`slr.HeadsProblem`'s state) as an `SGDRun` of the problem, so that the population risk
of each logged state, `flowsim.compare` and the flow from the same starts read it unchanged.

Cost: drawing and spiking the tokens, batch x L x d normal numbers per seed and step, dominates (the gradient is two
products of the tokens with 2H vectors, about a sixth of a step at H = 2). The tokens are drawn in float32 by default
(`draws`; their normal numbers cost 2.6 times less than in float64: threefry's bits and the inverse error function in
single precision, each number a standard normal rounded to 24 bits), then taken in float64: the heads, their
gradients, every order parameter and the risk are carried in float64.

The authors' code shares one noise vector between a sequence's informative tokens (`SpikedTokens.shared_noise`): a
quirk, not the model, whose end states differ (docs/heads.md); `shared_noise=True` draws so, to compare.

Seeds run in parallel (vmap, and split over the devices: `flowsim.devices`), steps in compiled segments
(`flowsim.sgd.run_logged`); seed i draws everything from `jax.random.fold_in(key, first_seed + i)`, so that a
run cut into blocks of seeds (`first_seed`) gives each seed the numbers one run would.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import InvalidInput, as_floats, as_key, check_choice, wrong_shape
from flowsim._interrupt import ctrl_c_stops, run_interruptibly
from flowsim._memory import Cost, Need, check_work, float_bytes
from flowsim.devices import shard_batch
from flowsim.integrate import traced
from flowsim.sgd import LoggedSteps, SGDRun, check_lengths, finish_run, logged_programs, make_run, run_logged
from flowsim.tasks.slr._family import SpikedTokens
from flowsim.tasks.slr._family_data import family_sample
from flowsim.tasks.slr._heads_data import heads_gradient, heads_state
from flowsim.tasks.slr._heads_problem import HeadsProblem
from flowsim.tasks.slr._sgd import projected_step

__all__ = ["DRAWS", "HEADS_SGD_SECONDS", "heads_sgd_work", "run_heads_sgd", "sphere_heads"]

#: The dtypes the tokens may be drawn in.
DRAWS = {"float32": jnp.float32, "float64": jnp.float64}
#: Seconds per drawn token coordinate (seed x step x batch x L x d) of `run_heads_sgd` with erf and H = S = 2, by the
#: dtype of the draws: float32 measured by benchmarks/heads_reproduction.py on the 2-core CPU (BENCHMARKS.md, "Several
#: heads": 200 seeds, 8e10 drawn numbers, in 287 s alone on the machine, 3.6e-9, and in 901 s beside two other jobs,
#: 1.1e-8), set between the two; float64 not measured whole: float32's times 1.5 (its draws, about a third of a step,
#: cost 2.6 times as much). Other H scale it by (0.8 + 0.1 H): the gradient's two products of the tokens with 2H
#: vectors took about a sixth of a step at H = 2 (measured beside the draws).
HEADS_SGD_SECONDS = {"float32": 6e-9, "float64": 9e-9}
#: Tolerance on |k_h| = |v_h| = 1 of given starts.
_UNIT_TOL = 1e-10


def sphere_heads(key, heads: int, d: int) -> tuple[jax.Array, jax.Array]:
    """H keys and H values drawn independently and uniformly on the unit sphere of R^d, each (H, d)."""
    K, V = jax.random.normal(key, (2, heads, d))
    return K / jnp.linalg.norm(K, axis=-1, keepdims=True), V / jnp.linalg.norm(V, axis=-1, keepdims=True)


def heads_sgd_work(
    problem: HeadsProblem, seeds: int, steps: int, batch: int, logs: int, draws: str = "float32", names=None
):
    """The memory and time of `run_heads_sgd` (needs, costs), estimated before anything is compiled.

    `names`: how the run's sizes are named in the advice (command-line options, or the API's arguments).
    """
    names = {"seeds": "seeds", "steps": "steps", "batch": "batch", "log_every": "log_every"} | (names or {})
    L, d = problem.L, problem.d
    drawn = seeds * batch * L * d
    needs = [
        Need(
            f"the tokens of one step ({seeds} seeds x batch {batch} x L {L} x d {d}, four copies)",
            float_bytes(4, drawn),
            f"lower {names['seeds']} or {names['batch']}",
        ),
        Need(
            f"the logged states ({seeds} seeds x {logs + 1} logs x {problem.dimension} order parameters, three copies)",
            float_bytes(3, seeds, logs + 1, problem.dimension),
            f"raise {names['log_every']}",
        ),
    ]
    seconds = HEADS_SGD_SECONDS[draws] * drawn * steps * (0.8 + 0.1 * problem.heads)
    what = f"projected SGD ({seeds} seeds x {steps} steps x batch {batch} x L {L} x d {d} drawn numbers, {draws})"
    costs = [Cost(what, seconds, f"lower {names['seeds']} or {names['steps']}")]
    return needs, costs


def _starts(problem: HeadsProblem, k0, v0, seeds: int):
    """The given starts as (seeds, H, d) arrays of unit vectors, checked; None when neither is given."""
    if (k0 is None) != (v0 is None):
        raise InvalidInput("give both k0 and v0 (the heads' start), or neither (uniform on the spheres, per seed)")
    if k0 is None:
        return None
    shape = (problem.heads, problem.d)
    starts = []
    for name, vectors in (("k0", k0), ("v0", v0)):
        array = as_floats(name, vectors)
        if array.shape not in (shape, (seeds, *shape)):
            raise wrong_shape(name, f"(H, d) = {shape} or (seeds, H, d) = {(seeds, *shape)}", array.shape)
        if not np.isfinite(array).all():
            raise InvalidInput(f"{name} must be finite, got a non-finite entry")
        if np.abs(np.linalg.norm(array, axis=-1) - 1).max() > _UNIT_TOL:
            raise InvalidInput(
                f"{name} must hold unit vectors (every head lives on the sphere), got a norm other than 1"
            )
        starts.append(jnp.asarray(np.broadcast_to(array, (seeds, *shape))))
    return tuple(starts)


def run_heads_sgd(
    problem: HeadsProblem,
    key,
    *,
    lr: float = 1e-3,
    steps: int = 100_000,
    batch: int = 5,
    log_every: int = 1000,
    seeds: int = 1,
    first_seed: int = 0,
    k0=None,
    v0=None,
    draws: str = "float32",
    shared_noise: bool = False,
    force: bool = False,
) -> SGDRun:
    """Projected online SGD of the problem's H heads in R^d, many seeds at once (module docstring).

    **Arguments:**

    - `problem`: a `slr.HeadsProblem` (data with S locations, H, the map, lam or its schedule, d).
    - `key`: a JAX PRNG key or an integer seed; seed i uses `jax.random.fold_in(key, first_seed + i)` for its start
      and its batches: the same key gives the same run.
    - `lr`: the step (> 0; the authors': 1e-3); the flow's clock is t = lr * step, at which lam is read.
    - `steps`: the number of steps (>= 1; the authors': 100 000), a multiple of `log_every`.
    - `batch`: sequences per step (>= 1; the authors': 5).
    - `log_every`: log the state every `log_every` steps (and at step 0).
    - `seeds`: the number of independent runs (>= 1); `first_seed`: the index of the first (>= 0).
    - `k0`, `v0`: the heads' start, (H, d) for every seed or (seeds, H, d), unit vectors; by default each k_h, v_h
      uniform on the sphere, drawn per seed.
    - `draws`: the dtype the tokens are drawn in, "float32" (default) or "float64".
    - `shared_noise`: draw the batches with the authors' code's quirk, one noise vector shared by a sequence's
      informative tokens (`SpikedTokens.shared_noise`), to compare with their numbers; the logged risk stays the
      problem's, the model's (independent noises).
    - `force`: run even if the estimate before work says it takes hours.

    **Returns:** an `SGDRun` of the problem: the heads' order parameters at the logged steps, (seeds, logs, n), their
    population risk, and each seed's status (a seed whose heads became non-finite is DIVERGED from that step on).
    """
    if not isinstance(problem, HeadsProblem):
        raise InvalidInput(f"problem must be a slr.HeadsProblem, got {type(problem).__name__}")
    check_choice("draws", draws, tuple(DRAWS))
    if problem.data.tokens.shared_noise:
        raise InvalidInput(
            "problem.data must be the model, each informative token with its own noise (its risk is the model's): "
            "ask for the authors' shared noise with shared_noise=True"
        )
    if not isinstance(shared_noise, bool):
        raise InvalidInput(f"shared_noise must be True or False, got {shared_noise!r}")
    if shared_noise and problem.locations < 2:
        raise InvalidInput(f"shared_noise needs S >= 2 informative locations, got S = {problem.locations}")
    tokens = problem.data.tokens
    drawn_tokens = SpikedTokens(tokens.spike, tokens.spread, tokens.locations, shared_noise)
    sampled = eqx.tree_at(lambda data: data.tokens, problem.data, drawn_tokens)
    lr, steps, batch, log_every, seeds = check_lengths(lr, steps, batch, log_every, seeds)
    if isinstance(first_seed, bool) or not isinstance(first_seed, int | np.integer) or first_seed < 0:
        raise InvalidInput(f"first_seed must be an integer >= 0, got {first_seed!r}")
    starts = _starts(problem, k0, v0, seeds)
    logs = steps // log_every
    check_work("run_heads_sgd", *heads_sgd_work(problem, seeds, steps, batch, logs, draws), force=force)
    given = starts is not None
    shape = (seeds, problem.heads, problem.d)
    starts = starts if given else (jnp.zeros(shape), jnp.zeros(shape))
    keys = jax.vmap(lambda i: jax.random.fold_in(as_key(key), i))(first_seed + jnp.arange(seeds))
    placed = shard_batch((keys, starts))
    shared = (traced(problem), jnp.asarray(lr, dtype=float), traced(sampled))
    config = (batch, draws, given, int(problem.d))  # d: the vectors' size (static; the problem holds it traced)
    layout = dict(logs=logs, log_every=log_every, sharded=placed.sharded)
    with ctrl_c_stops():
        logged, interrupted = run_interruptibly(lambda: run_logged(_HEADS, shared, placed.value, config, **layout))
    return finish_run(make_run(problem, lr, steps, log_every, *placed.gather(logged)), interrupted)


def _heads_seed(shared, seed, config) -> LoggedSteps:
    """One seed's training in R^d: its start, its batches, its steps and logs."""
    problem, lr, sampled = shared
    seed_key, (K, V) = seed
    batch, draws, given, d = config
    key_start, key_data = jax.random.split(seed_key)
    if not given:
        K, V = sphere_heads(key_start, problem.heads, d)
    length_values = problem.data.lengths.values
    step_sphere = jax.vmap(projected_step, (0, 0, None))

    def step(state, index):
        K, V = state
        drawn = family_sample(jax.random.fold_in(key_data, index), sampled, batch, d, DRAWS[draws])
        g_K, g_V = heads_gradient(problem.attention, drawn, K, V, problem.lam_at(lr * index), length_values)
        return step_sphere(K, g_K, lr), step_sphere(V, g_V, lr)

    def record(state, index):
        return [heads_state(*state, problem.locations)]

    return LoggedSteps((K, V), step, record)


#: The compiled programs of the heads' training in R^d.
_HEADS = logged_programs(_heads_seed)
