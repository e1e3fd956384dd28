"""Batched ODE integration with Diffrax: per-trajectory adaptive steps, status and failure reports.

The engine knows nothing of a task: it integrates a vector field `field(t, y, args)`
from a batch of initial conditions, each trajectory with its own adaptive steps
(vmap over `diffrax.diffeqsolve`), and reports for every trajectory how its solve
ended. Failed trajectories keep the values computed before the failure; later
saved times hold NaN, never a number that was not computed.
"""

import contextlib
import functools
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from flowsim import _status
from flowsim._checks import InvalidInput
from flowsim._compile import compiled_call, filter_jit, traced
from flowsim._diffeqsolve import advance_rows, start_rows
from flowsim._diffeqsolve import solve as _solve
from flowsim._interrupt import Interrupted, checking_enabled, ctrl_c_stops, interruption, run_interruptibly
from flowsim._memory import Need, check_fits
from flowsim._status import Failure, Status
from flowsim._task import check_states, images, show_state, task_jacobian, task_risk, task_vector_field
from flowsim.devices import shard_batch
from flowsim.rosenbrock import Rodas5, Rosenbrock4

__all__ = [
    "Failure",
    "Rodas5",
    "Rosenbrock4",
    "Status",
    "Trajectories",
    "check_finite",
    "choose_solver",
    "evaluate",
    "explicit_steps",
    "implicit_steps",
    "integrate",
    "solve_flow",
    "traced",
]

#: Default tolerances of the PID controller. The flows are smooth and trajectories
#: are compared to 1e-7 (scipy) and near fixed points to 1e-10, so the solves are
#: tight; `atol` bounds the error of overlaps that pass through zero.
RTOL, ATOL = 1e-10, 1e-12


def evaluate(function: Callable, *arguments):
    """function(*arguments), compiled once per function and shapes (Python numbers traced).

    The generated equations hold thousands of operations: run eagerly, each would be
    dispatched (and compiled) on its own.
    """
    return compiled_call(function, traced(arguments), {})


class Trajectories(eqx.Module):
    """A batch of solved trajectories.

    **Fields:**

    - `ts`: the saved times, shape (times,).
    - `ys`: the states at the saved times, shape (batch, times, n); NaN where not computed.
    - `observed`: a scalar observable at the saved times (e.g. the risk), shape (batch, times).
    - `status`: a `Status` code per trajectory, shape (batch,).
    - `t_final`: the time each solve reached (the steady-state time if it stopped early).
    - `y_final`: the state at `t_final`, shape (batch, n).
    - `num_steps`: accepted and rejected solver steps per trajectory.
    - `reasons`: for failed trajectories, a message per index.
    """

    ts: Float[Array, " times"]
    ys: Float[Array, "batch times n"]
    observed: Float[Array, "batch times"]
    status: Int[Array, " batch"]
    t_final: Float[Array, " batch"]
    y_final: Float[Array, "batch n"]
    num_steps: Int[Array, " batch"]
    reasons: dict[int, str] = eqx.field(static=True, default_factory=dict)

    @property
    def ok(self) -> Bool[Array, " batch"]:
        """Which trajectories were solved to the end (or to a steady state)."""
        return jnp.asarray(_status.ok(self.status))

    def failures(self) -> list[Failure]:
        """Every failed trajectory, with where and why it failed."""
        return _status.failures(self.status, self.t_final, self.reasons)


#: Why a solve failed, by the code `_solve` returns (0: it did not).
_REASONS = (
    None,
    None,
    "the maximum number of steps",
    "the step size fell to its minimum",
    "the solver failed",
    "stopped by {interruption}",  # Ctrl-C, or SIGTERM in the command line (`flowsim._interrupt.interruption`)
)


def integrate(
    field: Callable,
    y0: Float[Array, "batch n"],
    ts: Float[Array, " times"],
    args=None,
    *,
    observe: Callable | None = None,
    valid: np.ndarray | None = None,
    invalid_reasons: dict[int, str] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
    max_steps: int = 100_000,
    steady_state_tol: float | None = None,
    progress: bool = False,
    interruptible: bool | None = None,
    compacted: bool | None = None,
) -> Trajectories:
    """Integrate dy/dt = field(t, y, args) from each row of y0, saving at ts.

    **Arguments:**

    - `field`: the vector field; a module-level function, so that compiled solves are reused.
    - `y0`: initial conditions, shape (batch, n).
    - `ts`: increasing saved times; the solve runs from ts[0] to ts[-1].
    - `args`: a pytree passed to `field` and `observe` (traced: changing it does not recompile).
    - `observe`: optional scalar observable `observe(t, y, args)` recorded at the saved times.
    - `valid`, `invalid_reasons`: rows known to be invalid are not solved and are reported
      with status INVALID_INITIAL_CONDITION and the given reason.
    - `solver`: a Diffrax solver (default Tsit5; for stiff flows `Rodas5`, `Rosenbrock4` or an implicit one
      such as Kvaerno5; `solve_flow` chooses with `choose_solver`).
    - `rtol`, `atol`: tolerances of the PID step-size controller.
    - `max_steps`: step budget per trajectory.
    - `steady_state_tol`: if given, a trajectory stops once |field| < this tolerance;
      its later saved times hold its final state.
    - `progress`: show a progress meter (tqdm) during the solve.
    - `interruptible`: solve in up to `SEGMENTS` segments of the saved times (fewer where each would
      take well under `SEGMENT_SECONDS`), one call of the same compiled solve
      each, so that Ctrl-C takes effect at the end of the current segment and raises
      `flowsim.Interrupted` with every state computed until then. Each segment restarts the step
      size control (a few more steps; the same tolerances). Default: inside
      `flowsim._interrupt.checking()` (the command line), else one call for the whole solve.
    - `compacted`: solve in rounds of `ROUND_STEPS` steps over the trajectories still running only, each resumed
      where its last round ended (the same steps as one call: the same numbers), instead of stepping the whole
      batch until its slowest trajectory ends; Ctrl-C then takes effect after the current round's chunk. Default:
      for batches of at least `COMPACTED_BATCH` trajectories.

    **Returns:** a `Trajectories` (or raises `flowsim.Interrupted`, which holds one).
    """
    # The checks and masks around the solve are NumPy on the host or one compiled program (`_kept`): eager JAX
    # operations compile a program each on their first use, about 0.8 s in all on the CPU (a command's start-up, and
    # the wait between Ctrl-C and `Interrupted`).
    y0 = np.asarray(y0, dtype=float)
    ts_host = np.asarray(ts, dtype=float)
    if ts_host.ndim != 1 or ts_host.size < 2 or not (np.diff(ts_host) > 0).all():
        raise InvalidInput("ts must be a 1-D array of at least two strictly increasing times")
    ts = jnp.asarray(ts_host)
    batch, n = y0.shape
    saved = Need(
        f"the saved states ({batch} trajectories x {ts.size} times x {n} values)",
        3 * batch * ts.size * (n + 1) * 8,  # the solve's output, the observed values, their copies
        "save fewer times or solve fewer starts (--saves, --n)",
    )
    check_fits("integrate", [saved])
    valid = np.ones(batch, bool) if valid is None else np.asarray(valid, bool)
    # Invalid rows are solved from a harmless copy of a valid row (static shapes), then masked.
    safe_y0 = jnp.asarray(np.where(valid[:, None], y0, y0[int(np.argmax(valid))] if valid.any() else 0.0))
    args = traced(args)
    interruptible = checking_enabled() if interruptible is None else interruptible
    compacted = batch >= COMPACTED_BATCH if compacted is None else compacted
    if compacted:
        solve = functools.partial(_solve_compacted, interruptible=interruptible)
    else:
        solve = _solve_in_segments if interruptible else _solve_at_once
    ys, y_final, t_final, status, why, num_steps, interrupted = solve(
        field,
        safe_y0,
        ts,
        args,
        solver or diffrax.Tsit5(),
        diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps,
        steady_state_tol,
        progress,
    )
    status, why, t_final = np.array(status), np.asarray(why), np.array(t_final)
    reasons = {}
    for i in np.flatnonzero(why > 0):
        reason = _REASONS[why[i]].format(interruption=interruption())
        reasons[int(i)] = reason + (f" (max_steps = {max_steps})" if status[i] == Status.MAX_STEPS else "")
    finite = np.isfinite(np.asarray(y_final)).all(axis=-1)
    for i in np.flatnonzero(~finite & (status == Status.SUCCESS)):
        status[i], reasons[int(i)] = Status.SOLVER_FAILURE, "the state became non-finite"
    for i in np.flatnonzero(~valid):
        status[i] = Status.INVALID_INITIAL_CONDITION
        reasons[int(i)] = (invalid_reasons or {}).get(int(i), "invalid initial condition")
        t_final[i] = ts_host[0]
    ys, y_final = _kept(ts, ys, y_final, status, t_final, valid)
    if observe is None:
        observed = jnp.asarray(np.full(ys.shape[:2], np.nan))
    else:
        observed = _observe_all(observe, ts, ys, args)
    solved = Trajectories(ts, ys, observed, jnp.asarray(status), jnp.asarray(t_final), y_final, num_steps, reasons)
    if interrupted:
        raise Interrupted(solved, f"at t = {float(np.min(t_final)):.6g} of {ts_host[-1]:.6g}")
    return solved


@filter_jit
def _kept(ts, ys, y_final, status, t_final, valid):
    """The saved states a solve computed, the others NaN: a steady state holds its final state from its stop on;
    a trajectory that ended otherwise keeps its saved states up to its end; an invalid one keeps none.

    **Returns:** (ys, y_final).
    """
    ok = (status == Status.SUCCESS) | (status == Status.STEADY_STATE)
    after = ts[None, :] > t_final[:, None]
    ys = jnp.where(((status == Status.STEADY_STATE)[:, None] & after)[..., None], y_final[:, None, :], ys)
    computed = jnp.isfinite(ys).all(axis=-1) & (ok[:, None] | ~after) & valid[:, None]
    return jnp.where(computed[..., None], ys, jnp.nan), jnp.where(valid[:, None], y_final, jnp.nan)


@filter_jit
def _observe_all(observe, ts, ys, args):
    return jax.vmap(jax.vmap(observe, (0, 0, None)), (None, 0, None))(ts, ys, args)


#: Segments of an interruptible solve: Ctrl-C waits for at most about 1/SEGMENTS of the solve.
SEGMENTS = 16
#: A segment of an interruptible solve after the first is lengthened up to about this many seconds (a short solve
#: runs in fewer, longer segments), at a pace of STEP_SECONDS + TRAJECTORY_STEP_SECONDS x batch a step: about
#: what a batched step of the 5-D flows costs on one CPU core (a fixed part, then 1 to 3 us a trajectory).
SEGMENT_SECONDS = 1.0
STEP_SECONDS, TRAJECTORY_STEP_SECONDS = 2e-5, 3e-6
#: How long a window's solve may still run after Ctrl-C before it is abandoned (`run_interruptibly`'s patience), the
#: windows before it kept: a window can hold minutes of steps (a user's map, a stiff flow, a program compiling), and
#: Ctrl-C is honoured within about a second all the same. Windows are set by step counts, never by clocks: the same
#: solve is cut the same way, to the same numbers, on every run.
STOP_SECONDS = 0.8


def _solve_at_once(field, y0, ts, args, solver, controller, max_steps, steady_state_tol, progress):
    meter = diffrax.TqdmProgressMeter() if progress else diffrax.NoProgressMeter()
    placed = shard_batch(y0)  # the starts split over every device (flowsim.devices; a no-op on one)
    window = jnp.stack([ts[0], ts[-1]])  # the whole solve: the program that serves the segments too
    solved = _solve(
        field, placed.value, ts, window, args, solver, controller, max_steps, steady_state_tol, meter, placed.sharded
    )
    return (*placed.gather(solved), False)


def _next_intervals(first_intervals: int, left: int, steps: int, intervals: int, batch: int) -> int:
    """Saved intervals in the next segment: as many as take about `SEGMENT_SECONDS` at the last segment's pace
    (`steps` over `intervals`, its slowest trajectory's), never fewer than the first segment's, nor more than
    are left. Set by step counts, not by clocks: the same solve is cut the same way on every run."""
    allowed = SEGMENT_SECONDS / (STEP_SECONDS + TRAJECTORY_STEP_SECONDS * batch)
    return int(np.clip(allowed * intervals // max(steps, 1), first_intervals, left))


def _solve_in_segments(field, y0, ts, args, solver, controller, max_steps, steady_state_tol, progress):
    """`_solve` over consecutive windows of the saved times, each from where the last one ended.

    The first window holds 1/SEGMENTS of the saved intervals, each later one as many as `_next_intervals`
    allows (fewer, longer windows where the solve is short). One compiled solve serves every window: it saves
    at all of `ts` clipped to the window, and the window's own times are kept. A trajectory that ends in a
    window (steady state, failure) keeps that window's outcome; the step budget counts over all windows.
    Ctrl-C during a window lets it finish if it does within `STOP_SECONDS`, else abandons it (its steps cannot be
    read before it ends), then stops with the windows before it.
    """
    from tqdm.auto import tqdm

    ts_host = np.asarray(ts)
    intervals = len(ts_host) - 1
    first_intervals = -(-intervals // min(SEGMENTS, intervals))
    batch, n = y0.shape
    ys = np.full((batch, len(ts_host), n), np.nan)
    y_final, start = np.array(y0), np.array(y0)
    t_final = np.full(batch, ts_host[0])
    status, why = np.full(batch, int(Status.SUCCESS)), np.zeros(batch, int)
    used, done = np.zeros(batch, int), np.zeros(batch, bool)
    interrupted = False
    bar = tqdm(total=float(ts_host[-1] - ts_host[0]), unit="t", disable=not progress)
    meter = diffrax.NoProgressMeter()  # the windows' progress is the bar above
    first, count = 0, first_intervals
    with ctrl_c_stops():
        while first < intervals:
            last = first + count
            placed = shard_batch(jnp.asarray(start))  # over every device, as in `_solve_at_once`
            outputs, interrupted = run_interruptibly(
                _solve,
                field,
                placed.value,
                ts,
                jnp.asarray(ts_host[[first, last]]),
                args,
                solver,
                controller,
                max_steps,
                steady_state_tol,
                meter,
                placed.sharded,
                patience=STOP_SECONDS,
            )
            if outputs is None:  # abandoned after Ctrl-C: the windows before it are what was computed
                status[~done], why[~done] = Status.INTERRUPTED, 5
                break
            # Only the window's saved times leave the device (the others are not the solution's).
            outputs = (outputs[0][:, first : last + 1], *outputs[1:])
            s_ys, s_final, s_t, s_status, s_why, s_steps = (np.asarray(x) for x in placed.gather(outputs))
            live = ~done
            ys[live, first : last + 1] = s_ys[live]
            y_final[live], t_final[live] = s_final[live], s_t[live]
            used[live] += s_steps[live]
            ended = live & (s_status != Status.SUCCESS)
            status[ended], why[ended] = s_status[ended], s_why[ended]
            spent = live & ~ended & (used >= max_steps) & (last < intervals)
            status[spent], why[spent] = Status.MAX_STEPS, 2
            done |= ended | spent
            # Ended trajectories go on from a harmless finite state (static shapes); their results are ignored.
            start = np.where(done[:, None] | ~np.isfinite(s_final), start, s_final)
            bar.update(float(ts_host[last] - ts_host[first]))
            # A Ctrl-C in the last window stopped nothing: the solve is complete, and `integrate` raises
            # `Interrupted` with it all the same (the user asked to stop; nothing is thrown away).
            if interrupted and last < intervals:
                status[~done], why[~done] = Status.INTERRUPTED, 5
                break
            steps = int(s_steps[live].max()) if live.any() else 0
            first, count = last, _next_intervals(first_intervals, intervals - last, steps, last - first, batch)
    bar.close()
    return jnp.asarray(ys), jnp.asarray(y_final), t_final, status, why, jnp.asarray(used), interrupted


#: A batch of at least this many starts is solved compacted (`_solve_compacted`). A vmapped solve steps every row
#: until its slowest one ends (single-location regression at d = 400, B = 10^4: 590 steps for the slowest row,
#: 369 on average); rounds over the rows still running spend about the steps the rows take.
COMPACTED_BATCH = 512
#: The steps of a round of a compacted solve; its chunks hold about 1/CHUNKS of the batch, in multiples of
#: CHUNK_QUANTUM rows (one compiled program serves every round of a solve).
ROUND_STEPS = 64
CHUNKS, CHUNK_QUANTUM = 8, 64


def _chunk_rows(batch: int) -> int:
    """The rows of a compacted solve's chunk: about batch / CHUNKS, a multiple of CHUNK_QUANTUM."""
    return -(-batch // (CHUNKS * CHUNK_QUANTUM)) * CHUNK_QUANTUM


def _put(whole, rows, part) -> None:
    """Each array of the pytree `whole` takes the matching array of `part` at `rows`."""
    for array, values in zip(jax.tree.leaves(whole), jax.tree.leaves(part), strict=True):
        array[rows] = values


def _solve_compacted(field, y0, ts, args, solver, controller, max_steps, steady_state_tol, progress, interruptible):
    """The batch solved in rounds of at most ROUND_STEPS steps, each round over the rows still running only.

    A round takes the running rows in chunks of `_chunk_rows` rows (the last one padded with copies of a running
    row). Each row resumes where its last round ended, with its solver state, controller state and proposed step
    (`flowsim._diffeqsolve.advance_rows`), so that its steps are those of one call to the end; a row leaves once
    it has ended (at ts[-1], at a steady state, by a failure) or spent `max_steps`. Interruptible: Ctrl-C takes
    effect after the chunk being solved (abandoned after `STOP_SECONDS`), every row keeping what its rounds
    computed.
    """
    from tqdm.auto import tqdm

    ts_host = np.asarray(ts)
    batch, n = y0.shape
    chunk, t1 = _chunk_rows(batch), ts[-1]
    ys = np.full((batch, len(ts_host), n), np.nan)
    y, t = np.array(y0), np.full(batch, ts_host[0])
    status, why, used = np.full(batch, int(Status.SUCCESS)), np.zeros(batch, int), np.zeros(batch, int)
    live, interrupted, first_round = np.arange(batch), False, True
    bar = tqdm(total=float(ts_host[-1] - ts_host[0]), unit="t", disable=not progress)

    def run(function, state, rows, *rest):
        """function(those rows of the state placed over the devices, *rest): their outputs, on the host, and
        whether Ctrl-C asked to stop."""
        index = np.concatenate([rows, np.repeat(rows[:1], chunk - rows.size)])
        placed = shard_batch(jax.tree.map(lambda x: x[index], state))
        arguments = (field, placed.value, *rest, placed.sharded)
        if not interruptible:
            return jax.tree.map(lambda x: np.asarray(x)[: rows.size], placed.gather(function(*arguments))), False
        outputs, stop = run_interruptibly(function, *arguments, patience=STOP_SECONDS)
        if outputs is None:
            return None, True
        return jax.tree.map(lambda x: np.asarray(x)[: rows.size], placed.gather(outputs)), stop

    with ctrl_c_stops() if interruptible else contextlib.nullcontext():
        carried = None
        for begin in range(0, batch, chunk):  # each row's first step and states, as diffeqsolve sets them
            rows = live[begin : begin + chunk]
            start, interrupted = run(start_rows, y, rows, ts[0], t1, args, solver, controller)
            if start is None:
                break
            if carried is None:
                carried = jax.tree.map(lambda x: np.zeros((batch, *x.shape[1:]), x.dtype), start)
            _put(carried, rows, start)
            if interrupted:
                break
        if interrupted:  # before any step: every row stops at its start
            status[:], why[:] = Status.INTERRUPTED, 5
        while live.size and not interrupted:
            steps = min(ROUND_STEPS, max_steps - int(used[live[0]]))  # every running row has spent as many
            for begin in range(0, live.size, chunk):
                rows, state = live[begin : begin + chunk], (y, t, *carried)
                outputs, interrupted = run(
                    advance_rows, state, rows, ts, t1, args, solver, controller, steps, steady_state_tol
                )
                if outputs is None:
                    break
                saved, y_end, t_end, carried_end, status[rows], why[rows], taken = outputs
                # The saved times this round reached, beyond the row's time (saved by its previous round).
                after = ts_host >= t[rows, None] if first_round else ts_host > t[rows, None]
                reached = after & (ts_host <= t_end[:, None])
                ys[rows] = np.where(reached[..., None], saved, ys[rows])
                y[rows], t[rows], used[rows] = y_end, t_end, used[rows] + taken
                _put(carried, rows, carried_end)
                if interrupted:
                    break
            first_round = False
            running = (status == Status.MAX_STEPS) & (used < max_steps)
            if interrupted:  # the rows still running, solved or not this round, stop where they are
                pending = live[running[live] | ((status[live] == Status.SUCCESS) & (t[live] < ts_host[-1]))]
                status[pending], why[pending] = Status.INTERRUPTED, 5
                break
            live = live[running[live]]
            status[live], why[live] = Status.SUCCESS, 0
            bar.update((t[live].min() if live.size else ts_host[-1]) - bar.n)
    bar.close()
    return jnp.asarray(ys), jnp.asarray(y), t, status, why, jnp.asarray(used), interrupted


#: Where Tsit5's region of absolute stability ends on the negative real axis: a step h is stable
#: only while h |lambda| stays below it for the Jacobian's eigenvalues lambda.
EXPLICIT_STABILITY = 3.5

#: Steps per unit of time `Rodas5` needs for accuracy alone at rtol = 1, scaled by rtol^(-1/4) (its step counts
#: grow so: the controller keeps its order-4 error estimate within rtol): the largest of a batch's step counts (a
#: vmapped batch steps until its slowest trajectory ends) on single-location regression to t = 100, measured
#: 2026-11 (git history of BENCHMARKS.md, "Flow throughput"): at d = 400, 575 at rtol 1e-8 and 2 176 at 1e-10
#: (B = 2000), 93 at 1e-5 (B = 64); at d = 40 000, 3 485 at 1e-10.
ACCURACY_STEPS = 0.07
#: What a `Rodas5` step costs in explicit (Tsit5) steps: one Jacobian, one 5 x 5 inverse, eight field evaluations
#: and products (measured 4.8 to 5.5 against 1.57 us per trajectory and step at B = 2000, d = 400).
IMPLICIT_STEP_COST = 3.5


#: States whose Jacobians `explicit_steps` evaluates at once: a small chunk for a few states, a large one for many
#: (10^6 starts in chunks of 64 took 41 s of dispatches on a GPU, more than their solve).
_ESTIMATE_CHUNK, _LARGE_ESTIMATE_CHUNK = 64, 4096
#: Squarings k of the bound ||J^(2^k)||_F^(2^-k) >= rho(J) by which `explicit_steps` picks the states whose
#: eigenvalues it computes: within a factor (sqrt(n) cond(V))^(2^-k) of rho for a diagonalisable J = V D V^-1.
_SQUARINGS = 6
_jacobians = jax.vmap(task_jacobian, (None, 0, None))


def _radius_bounds(jacobians: np.ndarray) -> np.ndarray:
    """Upper bounds of the spectral radii of a stack of matrices, ||J^(2^k)||_F^(2^-k) for k = `_SQUARINGS`, by
    normalised squarings (the logarithms of the norms are summed, so nothing overflows)."""
    power, log_bound, zero = jacobians, np.zeros(len(jacobians)), np.zeros(len(jacobians), bool)
    for i in range(_SQUARINGS + 1):
        if i:
            power = power @ power
        norm = np.linalg.norm(power, axis=(1, 2))
        zero |= norm == 0  # a zero power: every eigenvalue is 0
        scale = np.where(norm > 0, norm, 1.0)
        power, log_bound = power / scale[:, None, None], log_bound + 2.0**-i * np.log(scale)
    return np.where(zero, 0.0, np.exp(log_bound))


#: Fractions of a solve's span at which `explicit_steps` evaluates the Jacobian of a task whose schedule varies (its
#: stiffness follows the schedule), integrated by the trapezoid rule; finer near the start, where a decaying
#: schedule changes fastest. With lam = 2 / (1 + 0.1 t) to t = 200 (the SGD experiment's flow, d = 80) the rule
#: gives 9 800 steps where Tsit5 takes 12 955 (30 sphere starts), against 39 000 from the Jacobian at t = 0 alone.
_SCHEDULE_FRACTIONS = np.array([0.0, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8, 1.0])


def _spectral_radius(task, states: np.ndarray, t: float) -> float:
    """The largest spectral radius of the task's Jacobian at these states at time t (the eigenvalues computed
    only where an upper bound of the radius exceeds the largest radius found so far, the largest bounds first)."""
    # In chunks of one of two sizes (padded with the first state), so that every batch size shares two programs.
    chunk = _ESTIMATE_CHUNK if len(states) <= _ESTIMATE_CHUNK**2 else _LARGE_ESTIMATE_CHUNK
    padded = np.concatenate([states, np.repeat(states[:1], -len(states) % chunk, axis=0)])
    time = jnp.asarray(t, float)
    jacobians = np.concatenate(
        [np.asarray(evaluate(_jacobians, time, rows, task)) for rows in padded.reshape(-1, chunk, task.dimension)]
    )[: len(states)]
    jacobians = jacobians[np.isfinite(jacobians).all(axis=(1, 2))]
    bounds = _radius_bounds(jacobians)
    order, radius = np.argsort(-bounds), 0.0
    for start in range(0, len(order), _ESTIMATE_CHUNK):
        rows = order[start : start + _ESTIMATE_CHUNK]
        if bounds[rows[0]] <= radius:  # no state left can have a larger radius
            break
        radius = max(radius, float(np.max(np.abs(np.linalg.eigvals(jacobians[rows])))))
    return radius


def explicit_steps(task, y0, t_span: float, t: float = 0.0) -> float:
    """About how many steps an explicit solver (Tsit5) takes over `t_span`, bound by stability alone.

    The largest spectral radius of the task's Jacobian at the starts and at the task's targets (where
    its flows go: the stiffness of a gradient flow is often largest near its minimisers), integrated over
    the span, over `EXPLICIT_STABILITY`: the radius times t_span where the task does not change with time,
    else the trapezoid rule on the radii at `_SCHEDULE_FRACTIONS` of the span (a decaying schedule makes
    the flow less stiff as it goes). Where this exceeds the steps accuracy needs, the flow is stiff and an
    implicit solver takes far fewer steps.

    **Arguments:**

    - `task`: an `AbstractTask`; `y0`: states (batch, n); `t_span`: the length of the solve;
      `t`: the time of the starts.

    **Returns:** the estimate for the stiffest of those states.
    """
    states = np.asarray(y0, dtype=float).reshape(-1, task.dimension)
    targets = np.asarray(task.targets, dtype=float)
    if targets.ndim == 2 and targets.shape[1] == task.dimension:
        states = np.concatenate([states, images(task, targets).reshape(-1, task.dimension)])
    states = states[np.isfinite(states).all(axis=1)]
    times = float(t) + float(t_span) * _SCHEDULE_FRACTIONS
    if task.autonomous or np.ptp(np.asarray(task.schedule()(jnp.asarray(times)))) == 0:
        return _spectral_radius(task, states, t) * float(t_span) / EXPLICIT_STABILITY
    radii = [_spectral_radius(task, states, time) for time in times]
    return float(np.trapezoid(radii, times)) / EXPLICIT_STABILITY


def implicit_steps(t_span: float, rtol: float = RTOL) -> float:
    """About how many steps `Rodas5` takes over `t_span` at `rtol`: ACCURACY_STEPS t_span rtol^(-1/4)."""
    return ACCURACY_STEPS * float(t_span) * float(rtol) ** -0.25


#: The longest span over which `choose_solver` compares the solvers' step counts (each grows in proportion to the
#: span, so the rule is the same at any longer one; their counts over 1e308 overflow).
_COMPARED_SPAN = 1e300


def _steps(estimate: float) -> str:
    """An estimated number of steps in words: a span shorter than one step is said so (the rule compares the
    two solvers' rates, the same at every span, so it still chooses)."""
    if not np.isfinite(estimate):  # a span near the float64 maximum: the count itself overflows
        return f"more than {np.finfo(float).max:.2g} steps"
    return f"about {estimate:.2g} steps" if estimate >= 1 else f"less than one step ({estimate:.2g})"


def choose_solver(
    task, y0, t_span: float, t: float = 0.0, rtol: float = RTOL, max_steps: int | None = None
) -> tuple[diffrax.AbstractSolver, str]:
    """The solver for a flow from these starts: explicit Tsit5, or `Rodas5` where the flow is stiff or the horizon
    too long for Tsit5's step budget.

    The rule: `Rodas5` when the explicit solver's stability-bound steps (`explicit_steps`) cost more
    than the linearly implicit solver's accuracy-bound ones (`implicit_steps`, each `IMPLICIT_STEP_COST`
    explicit steps), else Tsit5. For single-location regression (lam = 0.1, t = 100): Tsit5 up to d ~ 270
    at the engine's rtol 1e-10, Rodas5 from d ~ 120 at rtol 1e-8. Also `Rodas5` where Tsit5's steps exceed
    `max_steps`: Tsit5 would fail at the budget, while Rodas5's steps, once a flow settles, grow with the horizon's
    logarithm (d = 400, lam = 0.1: about 1 500 to t = 1e3, 2 000 to 1e308), not in proportion to it.

    **Arguments:** as `explicit_steps`; `rtol`, the solve's relative tolerance; `max_steps`, its step budget per
    trajectory (None: no budget).

    **Returns:** the solver and a sentence saying why it was chosen.
    """
    # The two solvers' rates compared over a span whose counts cannot overflow: at t_span = 1e308 both were inf, and
    # inf > inf chose Tsit5, whose stable steps spent the whole step budget where Rodas5 takes some 2 000 steps
    # (d = 400, lam = 0.1, sphere starts; 1 500 to t = 1e3: its steps grow with the horizon's logarithm once settled).
    compared = min(float(t_span), _COMPARED_SPAN)
    explicit, implicit = explicit_steps(task, y0, compared, t), implicit_steps(compared, rtol)
    stiff = explicit > IMPLICIT_STEP_COST * implicit
    explicit, implicit = (steps * (float(t_span) / compared) for steps in (explicit, implicit))
    estimate = (
        f"an explicit solver needs {_steps(explicit)} per trajectory (the Jacobian's spectral radius at the "
        f"starts and targets over a span of t = {t_span:g}, over its stability bound), a linearly implicit one "
        f"{_steps(implicit)} at rtol {rtol:g}, each costing {IMPLICIT_STEP_COST:g} explicit steps"
    )
    if stiff:
        return Rodas5(), f"the flow is stiff: {estimate}; solving with the linearly implicit Rodas5"
    if max_steps is not None and explicit > max_steps:
        return Rodas5(), (
            f"the horizon is too long for the explicit solver's step budget of {max_steps}: {estimate}; solving "
            "with the linearly implicit Rodas5, whose steps grow with the horizon's logarithm once the flow settles"
        )
    return diffrax.Tsit5(), f"the flow is not stiff: {estimate}; solving with the explicit Tsit5"


#: States whose risk and field `check_finite` evaluates at once: one compiled program (one shape) serves every call,
#: the states padded to a multiple of it.
_CHECK_BLOCK = 64
#: The most states `check_finite` evaluates: the targets and the starts, spread evenly over a larger batch (a million
#: starts on a GPU), so that the check stays a small fraction of the run. A non-finite field is a matter of the
#: task's parameters, met at every start or over a region of them, not at one start among a million.
_CHECKED_STATES = 16 * _CHECK_BLOCK


def _risk_and_field(t, ys, task):
    return jax.vmap(lambda y: (task_risk(t, y, task), task_vector_field(t, y, task)))(ys)


def check_finite(task, ys=None, t=0.0) -> None:
    """Refuse a task whose risk or field is not finite where a run starts: at the states `ys` and the task's targets.

    A field that is NaN or infinite from the start makes an adaptive solver reject every step until its step budget
    is spent, and an SGD run log NaN; the cause is the task's parameters (e.g. an attention map at a large inverse
    temperature), which the error names. `solve_flow`, `flowsim.run_sgd` and `flowsim.figures.phase_portrait`
    check before any step.

    **Arguments:**

    - `task`: an `AbstractTask`.
    - `ys`: states (batch, n), e.g. a run's starts (rows with a non-finite coordinate are left out: they are
      reported as invalid starts), or None for the targets alone.
    - `t`: the time at which a scheduled parameter is taken (the run's start).

    **Raises:** `InvalidInput` naming the task's parameters, the first state and which of the two is not finite.
    """
    states = np.asarray(task.targets, dtype=float)
    states = images(task, states).reshape(-1, task.dimension) if states.ndim == 2 else np.zeros((0, task.dimension))
    if ys is not None:
        starts = np.asarray(ys, dtype=float).reshape(-1, task.dimension)
        starts = starts[np.isfinite(starts).all(axis=1)]
        room = max(_CHECKED_STATES - len(states), 1)  # the targets always, the starts evenly spread
        if len(starts) > room:
            starts = starts[np.unique(np.linspace(0, len(starts) - 1, room).round().astype(int))]
        states = np.concatenate([starts, states])
    states = states[np.isfinite(states).all(axis=1)]
    if not len(states):
        return
    padded = -(-len(states) // _CHECK_BLOCK) * _CHECK_BLOCK
    block = np.concatenate([states, np.repeat(states[:1], padded - len(states), axis=0)])
    time = jnp.asarray(t, float)
    parts = [evaluate(_risk_and_field, time, rows, task) for rows in block.reshape(-1, _CHECK_BLOCK, task.dimension)]
    risk, field = (np.concatenate([np.asarray(part[i]) for part in parts])[: len(states)] for i in (0, 1))
    bad = ~(np.isfinite(risk) & np.isfinite(field).all(axis=1))
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidInput(
            f"the risk or field of {task.describe()} is not finite at {show_state(task, states[i])} (risk {risk[i]:g}, "
            f"field {np.array2string(field[i], precision=3)}): the task cannot be computed at these parameters"
        )


def solve_flow(task, y0, ts, **options) -> Trajectories:
    """Integrate the gradient flow of a task from a batch of initial states.

    **Arguments:**

    - `task`: an `AbstractTask` (its scheduled parameter may hold a schedule of t).
    - `y0`: initial states, shape (n,) or (batch, n). Rows that are not states of the task
      (`task.unrealizable`) are reported, not solved.
    - `ts`: increasing times at which to save; the flow starts at ts[0].
    - `options`: passed to `integrate` (solver, rtol, atol, max_steps, steady_state_tol, progress);
      defaults: `task.flow_solver()`, else the solver of `choose_solver` (Tsit5, or `Rodas5` for a
      stiff flow), and max_steps = `task.flow_max_steps()`.

    **Returns:** a `Trajectories` with the risk along the way in `observed` and a status per
    trajectory (see `failures()`).

    **Raises:** `InvalidInput` if the risk or field is not finite at a start or a target (`check_finite`).
    """
    y0, valid, reasons = check_states(task, y0)
    check_finite(task, y0[valid], float(np.asarray(ts, dtype=float)[0]))
    options = {"max_steps": task.flow_max_steps(), **task.flow_solver(), **options}
    if options.get("solver") is None and valid.any():
        ts_host = np.asarray(ts, dtype=float)
        span, start = float(ts_host[-1] - ts_host[0]), float(ts_host[0])
        options["solver"] = choose_solver(
            task, y0[valid], span, start, options.get("rtol", RTOL), options["max_steps"]
        )[0]
    try:
        return integrate(
            task_vector_field, y0, ts, task, observe=task_risk, valid=valid, invalid_reasons=reasons, **options
        )
    except Interrupted as error:
        error.task = task  # names the states of the partial result
        raise
