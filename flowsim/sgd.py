"""Finite-sample SGD: many seeds at once (vmap), steps in `lax.scan`, logging and divergence inside it.

`run_logged` is the runner every SGD of flowsim uses (a task's chain on its state, `run_sgd` from
`AbstractTask.sgd_step`, and a task's own trainers: single-location regression in R^d, the latent
task's read-out): one seed's training is defined once (`LoggedSteps`), compiled into one program, a
segment of about a thousand steps (`logged_programs`, cached like any program), and the host strings
the segments together, looking for Ctrl-C between two. A seed whose state becomes non-finite keeps
what it logged before, is NaN from then on, and is reported with its first bad step: status DIVERGED
in the run's `status`, and in `failures()`.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from flowsim import _status
from flowsim._checks import InvalidInput, as_key, check_choice, check_count, check_positive
from flowsim._compile import OPTIONS, filter_jit
from flowsim._interrupt import Interrupted, ctrl_c_stops, interruption, run_interruptibly, stopped
from flowsim._memory import Need, check_fits, format_bytes, tree_bytes
from flowsim._status import Failure, Status
from flowsim._task import check_states
from flowsim.devices import over_batch, shard_batch
from flowsim.integrate import check_finite, evaluate, traced
from flowsim.maps import risk_along

__all__ = [
    "NOISE_CHUNK_BYTES",
    "LoggedPrograms",
    "LoggedSteps",
    "SGDRun",
    "check_lengths",
    "finish_run",
    "logged_needs",
    "logged_programs",
    "make_run",
    "run_logged",
    "run_sgd",
]


class SGDRun(eqx.Module):
    """Logged trajectories of many seeds.

    **Fields:**

    - `task`: the task trained on (its schedule included).
    - `steps`: the logged steps 0, log_every, ..., steps, shape (logs,).
    - `times`: the same on the flow's clock t = lr * step.
    - `ys`: the logged states (seeds, logs, n); NaN from a divergence on.
    - `risk`: the population risk of each logged state, (seeds, logs).
    - `train_risk`, `test_risk`: for training on a fixed dataset, the risk on the training set and on
      a held-out sample, (seeds, logs); None otherwise.
    - `status`: a `Status` per seed (SUCCESS or DIVERGED).
    - `first_bad`: the first step whose state was not finite (-1 where none), (seeds,).
    - `stopped_at`: the step at which Ctrl-C stopped the seed (-1 where none), (seeds,).
    """

    task: object
    steps: np.ndarray
    times: np.ndarray
    ys: Float[Array, "seeds logs n"]
    risk: Float[Array, "seeds logs"]
    train_risk: Float[Array, "seeds logs"] | None
    test_risk: Float[Array, "seeds logs"] | None
    status: Int[Array, " seeds"]
    first_bad: Int[Array, " seeds"]
    stopped_at: Int[Array, " seeds"]

    @property
    def lr(self) -> float:
        """The step size, from the clock t = lr * step."""
        return float(self.times[-1] / self.steps[-1])

    @property
    def scheduled_values(self) -> np.ndarray:
        """The task's scheduled parameter at each logged step, (logs,)."""
        return np.asarray(self.task.schedule()(jnp.asarray(self.times, dtype=float)))

    def failures(self) -> list[Failure]:
        """Every diverged seed, with its first non-finite step, and every seed stopped (Ctrl-C, SIGTERM), with where."""
        first_bad, stopped_at = np.asarray(self.first_bad), np.asarray(self.stopped_at)
        stop = f"stopped by {interruption()}"  # Ctrl-C, or SIGTERM in the command line
        reasons = {int(i): f"{stop} at step {stopped_at[i]}" for i in np.flatnonzero(stopped_at >= 0)}
        reasons |= {
            int(i): f"the iterate became non-finite at step {first_bad[i]}" for i in np.flatnonzero(first_bad >= 0)
        }
        steps = np.where(first_bad >= 0, first_bad, stopped_at)
        return _status.failures(self.status, self.lr * np.maximum(steps, 0), reasons, steps)


class LoggedSteps(NamedTuple):
    """One seed's training, as `logged_programs` runs it.

    **Fields:** `state`, the start (a pytree of arrays); `step(state, n) -> state`, or
    `step(state, n, draw(n))` when `draw` is given (the random numbers of step n, drawn in bulk for a
    chunk of steps before they run, and depending on n only); `record(state, n)`, the list of arrays
    logged at step n.
    """

    state: Any
    step: Callable
    record: Callable
    draw: Callable | None = None


class LoggedPrograms(NamedTuple):
    """A training defined per seed and its compiled segment (`logged_programs`), run by `run_logged`."""

    build: Callable
    segment: Callable


def logged_programs(build, kind: str | None = None) -> LoggedPrograms:
    """The compiled program that runs a training defined per seed, in segments the host strings together.

    Made once, at import (module level), so that its compilations are reused: a segment is one program
    for the run's whole length and its logging cadence (both traced: a sweep over lr at a fixed t_end, whose
    runs log every steps / logs steps, reuses it wherever its segments hold as many logging blocks and its
    chunks as many steps), and, holding no host callback, it is also kept by JAX's persistent compilation
    cache. Between two segments the host looks for Ctrl-C (`flowsim._interrupt`).

    **Arguments:**

    - `build(shared, seed, config) -> LoggedSteps`: one seed's training; `shared` is a pytree of arrays
      common to every seed, `seed` that seed's rows of the per-seed pytree, `config` hashable and static.
      It is traced in the segment: what it computes before the steps (the start, a dataset from the
      seed's key) is recomputed, identically, at each segment's start. The first segment starts from
      that start (and logs it), so that no second program is compiled for it.
    - `kind`: the XLA options the segment is compiled with (`flowsim._compile.OPTIONS`), or None for XLA's
      defaults.

    **Returns:** a `LoggedPrograms` for `run_logged`.
    """

    def segment(shared, per_seed, carry, first, lengths, config, layout):
        blocks, chunk, sharded = layout
        logs, log_every = lengths  # traced: a sweep whose runs log at other cadences reuses the program

        def one_seed(seed_and_carry, first):
            seed, carry = seed_and_carry
            run = build(shared, seed, config)
            zero = jnp.asarray(0)
            # The first segment (first == 0) is given a placeholder: it starts from the seed's start.
            start = (run.state, zero, jnp.asarray(-1))
            carry = jax.tree.map(lambda fresh, given: jnp.where(first == 0, fresh, given), start, carry)

            def one_step(carry, noise):
                state, index, first_bad = carry
                state = run.step(state, index) if run.draw is None else run.step(state, index, noise)
                bad = ~jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(state)]))
                first_bad = jnp.where((first_bad < 0) & bad, index + 1, first_bad)
                # From a divergence on, the state is NaN: a diverged seed logs no half-finite values.
                state = jax.tree.map(lambda x: jnp.where(bad, jnp.nan, x), state)
                return (state, index + 1, first_bad), None

            def one_chunk(_, carry):
                noise = None if run.draw is None else jax.vmap(run.draw)(carry[1] + jnp.arange(chunk))
                return jax.lax.scan(one_step, carry, noise, length=chunk)[0]

            def one_block(carry, number):
                # Block first - 1 only logs the carry it is given (the start, in the first segment); the last
                # segment may reach past the run's end: those blocks are skipped (and dropped).
                carry = jax.lax.cond(
                    (number >= first) & (number < logs),
                    lambda c: jax.lax.fori_loop(0, log_every // chunk, one_chunk, c),
                    lambda c: c,
                    carry,
                )
                return carry, run.record(carry[0], carry[1])

            return jax.lax.scan(one_block, carry, first - 1 + jnp.arange(blocks + 1))

        return over_batch(jax.vmap(one_seed, in_axes=(0, None)), sharded)((per_seed, carry), first)

    if kind is None:
        return LoggedPrograms(build, eqx.filter_jit(segment))
    return LoggedPrograms(build, filter_jit(segment, kind=check_choice("kind", kind, (None, *OPTIONS))))


def _placeholder_carry(programs: LoggedPrograms, shared, per_seed, config, sharded: bool):
    """Zeros shaped like every seed's (state, step, first bad step), placed like `per_seed`: the first
    segment's carry, which it replaces by each seed's start (shapes only: nothing is compiled); and whether
    the training draws its steps' random numbers in bulk (`LoggedSteps.draw`)."""
    one_seed = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), per_seed)
    draws = []

    def start(seed):
        run = programs.build(shared, seed, config)
        draws.append(run.draw is not None)
        return run.state

    state = jax.eval_shape(start, one_seed)
    rows = jax.tree.leaves(per_seed)[0].shape[0]
    zero = jnp.asarray(0)
    carry = jax.tree.map(lambda x: np.zeros((rows, *x.shape), x.dtype), (state, zero, zero))
    return (shard_batch(carry).value if sharded else jax.tree.map(jnp.asarray, carry)), draws[0]


def run_logged(
    programs: LoggedPrograms,
    shared,
    per_seed,
    config,
    *,
    logs: int,
    log_every: int,
    largest_chunk: int = 256,
    sharded: bool = False,
):
    """Run `logs * log_every` steps of every seed's training (`logged_programs`), logging every `log_every`.

    The steps run in compiled segments of about `CHECK_EVERY` steps (whole logging blocks); between two,
    the host looks for Ctrl-C (`flowsim._interrupt.stopped`) and, if asked, stops there: the later logs
    are NaN and `stopped_at` says where. Call it through `run_interruptibly`. A chunk of steps whose noise
    is drawn at once is the largest divisor of log_every up to `largest_chunk` steps (a training without
    bulk draws runs its steps one at a time, whatever log_every).

    **Returns:** `record(state, n)` at n = 0, log_every, ..., each item stacked as (seeds, logs + 1, ...),
    then the first step whose state was not finite per seed (-1 if none), then the step at which Ctrl-C
    stopped the run per seed (-1 if none).
    """
    blocks = min(logs, max(1, CHECK_EVERY // log_every))
    carry, draws = _placeholder_carry(programs, shared, per_seed, config, sharded)
    # Static: the segment's blocks and a chunk's steps (a training without bulk draws runs one step a chunk).
    layout = (blocks, _chunk_size(log_every, largest_chunk) if draws else 1, sharded)
    lengths = jnp.asarray([logs, log_every])
    pieces, stopped_at = [], -1
    for first in range(0, logs, blocks):
        # The first segment always runs: it holds the start, which a stopped run keeps too.
        if first and stopped():
            stopped_at = first * log_every
            break
        carry, logged = programs.segment(shared, per_seed, carry, jnp.asarray(first), lengths, config, layout)
        jax.block_until_ready(carry)  # one segment at a time: the next check comes after this one ran
        pieces.append(logged)
    # A segment logs the carry it was given first (the start, or the previous segment's last log), then its blocks':
    # the logs kept are picked once here, not sliced segment by segment (host work between two segments).
    own = np.arange(len(pieces) * (blocks + 1)).reshape(-1, blocks + 1)[:, 1:].ravel()
    keep = np.concatenate([[0], own])[: logs + 1]
    seeds = carry[1].shape[0]
    series = []
    for values in zip(*pieces, strict=True):
        logged = jnp.concatenate(values, axis=1)[:, keep]
        missing = logs + 1 - logged.shape[1]  # stopped: the logs it did not reach are NaN
        if missing:
            logged = jnp.concatenate([logged, jnp.full((seeds, missing, *logged.shape[2:]), jnp.nan)], axis=1)
        series.append(logged)
    return (*series, carry[2], jnp.full((seeds,), stopped_at))


def _chunk_size(log_every: int, largest: int = 256) -> int:
    """The largest divisor of log_every that is at most `largest` (steps whose noise is drawn at once)."""
    return next(c for c in range(min(log_every, largest), 0, -1) if log_every % c == 0)


#: Steps in one compiled segment of a training run (`run_logged`), between two looks for Ctrl-C: latency
#: against the overhead of a call.
CHECK_EVERY = 1000
#: Bytes of random numbers drawn at once for all seeds (`run_logged`'s chunks): large enough to
#: amortise each draw, small beside any machine's memory.
NOISE_CHUNK_BYTES = 64 * 2**20


def logged_needs(seeds: int, logs: int, values: int) -> Need:
    """The memory of the logged values: (seeds, logs + 1, values) float64, the scan's output and its copy."""
    return Need(
        f"the logged values ({seeds} seeds x {logs + 1} logs x {values} values)",
        2 * seeds * (logs + 1) * values * 8,
        "log fewer steps: raise log_every (--log-every) or lower steps (--steps)",
    )


def check_lengths(lr, steps, batch, log_every, seeds) -> tuple[float, int, int, int, int]:
    """The common arguments of every SGD run, validated: lr > 0, counts >= 1, log_every divides steps."""
    lr = check_positive("lr", lr)
    steps = check_count("steps", steps, 1)
    batch = check_count("batch", batch, 1)
    log_every = check_count("log_every", log_every, 1)
    seeds = check_count("seeds", seeds, 1)
    if steps % log_every:
        raise InvalidInput(f"log_every = {log_every} must divide steps = {steps}")
    if not math.isfinite(lr * steps):  # the run's flow time t = lr * step, which its schedule and comparison read
        raise InvalidInput(f"lr * steps must be finite (the run's time at its end), got lr = {lr!r}, steps = {steps}")
    return lr, steps, batch, log_every, seeds


def make_run(task, lr: float, steps: int, log_every: int, ys, first_bad, stopped_at, train=None, test=None) -> SGDRun:
    """An `SGDRun` from the logged states: the population risk of each (one compiled call per shape)."""
    logged_steps = np.arange(0, steps + 1, log_every)
    times = lr * logged_steps.astype(float)
    ys = jnp.asarray(ys)
    risk = evaluate(risk_along, jnp.asarray(times), ys, traced(task))
    first_bad, stopped_at = np.asarray(first_bad), np.asarray(stopped_at)
    status = np.where(first_bad >= 0, Status.DIVERGED, np.where(stopped_at >= 0, Status.INTERRUPTED, Status.SUCCESS))
    return SGDRun(
        task,
        logged_steps,
        times,
        ys,
        risk,
        None if train is None else jnp.asarray(train),
        None if test is None else jnp.asarray(test),
        jnp.asarray(status),
        jnp.asarray(first_bad),
        jnp.asarray(stopped_at),
    )


def finish_run(run: SGDRun, interrupted: bool) -> SGDRun:
    """The run, or `Interrupted` carrying it if Ctrl-C asked to stop it (`flowsim._interrupt`): where it stopped,
    or, when Ctrl-C came after its last check, the whole run (a Ctrl-C is never swallowed)."""
    if interrupted:
        stopped = np.asarray(run.stopped_at)
        where = f"at step {int(np.max(stopped))}" if (stopped >= 0).any() else "after the last step"
        raise Interrupted(run, f"{where} of {int(run.steps[-1])}")
    return run


def run_sgd(
    task, key, *, init="sphere", lr: float, steps: int, batch: int = 1, log_every: int = 1, seeds: int = 1
) -> SGDRun:
    """Online SGD on the task's state: the task's exact chain (`AbstractTask.sgd_step`), many seeds at once.

    **Arguments:**

    - `task`: an `AbstractTask` with an SGD chain; its schedule is read at t = lr * step.
    - `key`: a JAX PRNG key or an integer seed; seed i uses `jax.random.split(key, seeds)[i]`.
    - `init`: a name of `task.initialisations`, or states of shape (n,) or (seeds, n).
    - `lr`: the step size (> 0); `steps`: the number of steps (>= 1), a multiple of `log_every`.
    - `batch`: samples per step (>= 1); `log_every`: log every `log_every` steps (and step 0).
    - `seeds`: the number of independent runs (>= 1).

    **Returns:** an `SGDRun`.

    **Raises:** `InvalidInput` if the task's risk or field is not finite at the given starts or its targets
    (`flowsim.integrate.check_finite`), before any step.
    """
    lr, steps, batch, log_every, seeds = check_lengths(lr, steps, batch, log_every, seeds)
    y0 = init_states(task, init, seeds)
    key = as_key(key)
    # The noise of one step of one seed, by shape only (nothing is drawn): it sets the draws' chunk.
    noise = tree_bytes(jax.eval_shape(lambda k: task.sgd_noise(k, batch), key))
    largest_chunk = int(np.clip(NOISE_CHUNK_BYTES // max(1, noise * seeds), 1, 256))
    check_fits(
        "run_sgd",
        [
            logged_needs(seeds, steps // log_every, task.dimension + 1),
            Need(
                f"the random numbers of one step ({seeds} seeds x {format_bytes(noise)}, batch {batch})",
                2 * seeds * noise,
                "lower batch (--batch) or seeds (--seeds)",
            ),
        ],
    )
    # The run keeps the task as given (Python numbers: d sizes other work, e.g. a flow's step budget); the program
    # takes it traced, so that other values of d and the parameters reuse it.
    shared = (traced(task), jnp.asarray(lr, dtype=float))
    # The seeds (their keys, and their starts: given, or drawn in the run) split over every device (a no-op on one).
    keys = jax.random.split(key, seeds)
    placed = shard_batch((keys, jnp.zeros((seeds, task.dimension)) if y0 is None else y0))
    config = (init if y0 is None else None, batch)
    layout = dict(logs=steps // log_every, log_every=log_every, largest_chunk=largest_chunk, sharded=placed.sharded)
    with ctrl_c_stops():
        logged, interrupted = run_interruptibly(lambda: run_logged(_CHAIN, shared, placed.value, config, **layout))
    return finish_run(make_run(task, lr, steps, log_every, *placed.gather(logged)), interrupted)


def init_states(task, init, seeds: int):
    """None for a named initialisation (drawn per seed inside the run), else the given states as (seeds, n); the
    task's risk and field checked finite there and at its targets (`flowsim.integrate.check_finite`)."""
    if isinstance(init, str):
        if init not in task.initialisations:
            raise InvalidInput(
                f"init must be one of {task.initialisations} or states of shape ({task.dimension},) or "
                f"(seeds, {task.dimension}), got {init!r}"
            )
        check_finite(task)
        return None
    # Checked before broadcasting: a 1-D init of the wrong length gets the shape message, not NumPy's.
    y0, valid, reasons = check_states(task, init, "init")
    if not valid.all():
        raise InvalidInput(reasons[int(np.argmin(valid))])
    if np.ndim(init) == 1:
        y0 = np.broadcast_to(y0, (seeds, task.dimension))
    if y0.shape != (seeds, task.dimension):
        raise InvalidInput(
            f"init must have shape ({task.dimension},) or (seeds, {task.dimension}) = ({seeds}, {task.dimension}), "
            f"got {y0.shape}"
        )
    check_finite(task, y0)
    return jnp.asarray(y0)


def _chain_seed(shared, seed, config) -> LoggedSteps:
    """One seed of a task's SGD chain: its start (drawn from its key, or given) and its steps."""
    task, lr = shared
    seed_key, y0 = seed
    init, batch = config
    key_init, key_data = jax.random.split(seed_key)
    if init is not None:
        y0 = task.initial_states(key_init, 1, init)[0]

    def draw(index):
        return task.sgd_noise(jax.random.fold_in(key_data, index), batch)

    def step(y, index, noise):
        return task.sgd_step(lr * index, y, lr, noise, batch)

    return LoggedSteps(y0, step, lambda y, index: [y], draw)


#: The chain's compiled programs (each device runs its own seeds: `flowsim.devices.over_batch`).
_CHAIN = logged_programs(_chain_seed, "training")
