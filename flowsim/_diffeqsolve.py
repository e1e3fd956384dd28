"""The engine's compiled solves: Diffrax's `diffeqsolve`, vmapped over a batch of starts.

`solve` integrates every row over one window of time, to its end (`flowsim.integrate`'s solve at once, and each
window of its interruptible solve). `start_rows` and `advance_rows` serve the compacted solve (`flowsim.integrate`):
each row advances by a round of at most a few steps from its own time, with its own solver state, step-size
controller state and the end of the step its controller proposed, all carried from the round before, so that a
resumed row continues its solve as one call would have (the same steps), and rows that have ended leave the batch.
"""

import contextlib
import threading
from collections.abc import Iterator

import diffrax
import equinox._errors
import jax
import jax.numpy as jnp
from diffrax._term import WrapTerm  # what diffeqsolve integrates; no public name

from flowsim._compile import filter_jit
from flowsim._status import Status
from flowsim.devices import over_batch

_CHECKS_LOCK = threading.Lock()


@contextlib.contextmanager
def checks_without_host_callback() -> Iterator[None]:
    """While tracing inside, an Equinox runtime check in its default mode makes its value NaN where it fails, instead
    of raising through a host callback.

    Diffrax checks `SaveAt`'s times against t0 and t1 with `equinox.error_if`, which by default (the environment
    variable EQX_ON_ERROR) raises through a host callback; JAX never keeps a program holding a host callback in its
    persistent compilation cache, so every process (each command, each test worker, each notebook kernel) compiled
    every solve again. `_solve` passes times it has made valid (increasing, clipped to the window), so those checks
    never fail; any other check inside the solve that did would give NaN states, which `integrate` reports per
    trajectory ("the state became non-finite"). Equinox traces a check through one jitted function,
    `branched_error_if_impl_jit`, which reads the mode: it is replaced, for this trace only and under a lock, by the
    same check traced inline in the NaN mode, so that nothing of the NaN mode is cached for anyone else's checks and
    a check that names its mode keeps it (another thread tracing an Equinox check during that trace would get the
    NaN mode too: the lock serialises flowsim's solves only). If Equinox renames these, nothing changes but the
    caching (tests/test_engine_generic.py checks that the solve holds no host callback).
    """
    errors = equinox._errors
    check, jitted = getattr(errors, "branched_error_if_impl", None), getattr(errors, "branched_error_if_impl_jit", None)
    if check is None or jitted is None:
        yield
        return

    def as_nan(x, pred, index, msgs, *, on_error):
        return check(x, pred, index, msgs, on_error="nan" if on_error == "default" else on_error)

    with _CHECKS_LOCK:
        errors.branched_error_if_impl_jit = as_nan
        try:
            yield
        finally:
            errors.branched_error_if_impl_jit = jitted


#: The shortest first step of a solve (or window) from t0, relative to |t0|: some 450 spacings of the floats there.
_FIRST_STEP = 1e-13


class _Wrapping(diffrax.AbstractAdaptiveStepSizeController):
    """A step-size controller built on another, `inner`, whose tolerances and norm it keeps."""

    inner: diffrax.AbstractAdaptiveStepSizeController

    @property
    def rtol(self):
        return self.inner.rtol

    @property
    def atol(self):
        return self.inner.atol

    @property
    def norm(self):
        return self.inner.norm


class FirstStepFloor(_Wrapping):
    """`inner`, its first step at least `_FIRST_STEP` |t0|. From a settled state Diffrax's first step is 1e-6: where
    a window begins far out (t0 = 6.5e48 of a solve to 1e50) that is below the floats' spacing, t0 + dt0 == t0, and
    every later step, a multiple of the last (t1 - t0 = 0), is as long: the solve spent its whole step budget without
    moving. Elsewhere (t0 = 0, or a first step above the floor) the solve is `inner`'s, bit for bit."""

    def wrap(self, direction):
        return FirstStepFloor(self.inner.wrap(direction))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return jnp.maximum(tnext, t0 + _FIRST_STEP * jnp.abs(t0)), state

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        return self.inner.adapt_step_size(t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state)


class CarriedStep(_Wrapping):
    """`inner`, its state carrying the end of the step it proposes next; given that end (`resume_at`), a solve
    resumed from the state (`diffeqsolve(controller_state=, dt0=None)`) ends its first step there: the step one
    call would have taken. (Not at t0 + dt0, which can differ from it by a rounding, and so every step after it.)"""

    resume_at: jax.Array | None = None

    def wrap(self, direction):
        return CarriedStep(self.inner.wrap(direction), self.resume_at)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        if self.resume_at is not None:  # resumed: diffeqsolve keeps the carried state, not this one
            return self.resume_at, None
        tnext, state = self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return tnext, (state, tnext)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        keep, next_t0, next_t1, jump, state, result = self.inner.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state[0]
        )
        return keep, next_t0, next_t1, jump, (state, next_t1), result


def _steady_state_event(field, steady_state_tol):
    """The event that stops a solve once |field| < steady_state_tol (None: no event)."""
    if steady_state_tol is None:
        return None

    def at_steady_state(t, y, args, **kwargs):
        return jnp.linalg.norm(field(t, y, args)) < steady_state_tol

    return diffrax.Event(at_steady_state)


def _outcome(result):
    """(status, why): Diffrax's outcome in flowsim's one enumeration, why an index into `flowsim.integrate`'s
    reasons (0: none)."""
    return jnp.select(
        [
            result == diffrax.RESULTS.successful,
            result == diffrax.RESULTS.event_occurred,
            result == diffrax.RESULTS.max_steps_reached,
            result == diffrax.RESULTS.dt_min_reached,
        ],
        [
            jnp.array([Status.SUCCESS, 0]),
            jnp.array([Status.STEADY_STATE, 0]),
            jnp.array([Status.MAX_STEPS, 2]),
            jnp.array([Status.SOLVER_FAILURE, 3]),
        ],
        jnp.array([Status.SOLVER_FAILURE, 4]),
    )


@filter_jit
def solve(field, y0, ts, window, args, solver, controller, max_steps, steady_state_tol, progress_meter, sharded=False):
    """Every row of y0 from window[0] to window[1], saved at ts clipped to the window (the times outside it are
    not the solution's; a window (ts[0], ts[-1]) saves at ts).

    **Returns:** per row: the saved states, the final state and time, (status, why), the number of steps.
    """
    term = diffrax.ODETerm(field)
    saved_at = jnp.clip(ts, window[0], window[1])
    event = _steady_state_event(field, steady_state_tol)

    def one(y0, saved_at, window, args):
        saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=saved_at), diffrax.SubSaveAt(t1=True)])
        with checks_without_host_callback():
            solution = diffrax.diffeqsolve(
                term,
                solver,
                t0=window[0],
                t1=window[1],
                dt0=None,
                y0=y0,
                args=args,
                saveat=saveat,
                stepsize_controller=FirstStepFloor(controller),
                max_steps=max_steps,
                throw=False,
                event=event,
                progress_meter=progress_meter,
            )
        saved, final = solution.ys
        status, why = _outcome(solution.result)
        return saved, final[0], solution.ts[1][0], status, why, solution.stats["num_steps"]

    # Each device steps its own rows until its own slowest trajectory ends (no exchange per step).
    return over_batch(jax.vmap(one, (0, None, None, None)), sharded)(y0, saved_at, window, args)


@filter_jit
def start_rows(field, y0, t0, t1, args, solver, controller, sharded=False):
    """What a solve of each row of y0 from t0 to t1 starts with, as `diffeqsolve` sets it: the end of its first
    step, its solver state and controller state (`advance_rows` resumes from them).

    **Returns:** (t_next, solver_state, controller_state), each with the rows on its first axis.
    """
    # The term and controller as diffeqsolve wraps them for t0 < t1: its first step depends on the wrapping (Diffrax
    # 0.7 chooses it by Hairer's rule for an ODETerm, and takes 0.01 for the WrapTerm it passes).
    term, controller = WrapTerm(diffrax.ODETerm(field), 1), CarriedStep(FirstStepFloor(controller)).wrap(1)

    def one(y0, t0, t1, args):
        tnext, state = controller.init(term, t0, t1, y0, None, args, solver.func, solver.error_order(term))
        return tnext, solver.init(term, t0, jnp.minimum(tnext, t1), y0, args), state

    return over_batch(jax.vmap(one, (0, None, None, None)), sharded)(y0, t0, t1, args)


@filter_jit
def advance_rows(field, rows, ts, t1, args, solver, controller, steps, steady_state_tol, sharded=False):
    """Each row's solve resumed at its own time for at most `steps` steps towards t1, saved at ts clipped to
    [its time, t1].

    **Arguments:** `rows`: (y, t, t_next, solver_state, controller_state) with the rows on their first axis, as
    `start_rows` or the previous round returned them; `steps`: the round's step budget (static).

    **Returns:** per row: the saved states, the state and time reached, the next (t_next, solver_state,
    controller_state), (status, why) (`Status.MAX_STEPS` for a row the round left running) and its steps.
    """
    term, event = diffrax.ODETerm(field), _steady_state_event(field, steady_state_tol)

    def one(rows, ts, t1, args):
        y, t, t_next, solver_state, controller_state = rows
        saveat = diffrax.SaveAt(
            subs=[diffrax.SubSaveAt(ts=jnp.clip(ts, t, t1)), diffrax.SubSaveAt(t1=True)],
            solver_state=True,
            controller_state=True,
        )
        with checks_without_host_callback():
            solution = diffrax.diffeqsolve(
                term,
                solver,
                t0=t,
                t1=t1,
                dt0=None,
                y0=y,
                args=args,
                saveat=saveat,
                stepsize_controller=CarriedStep(FirstStepFloor(controller), t_next),
                max_steps=steps,
                throw=False,
                event=event,
                solver_state=solver_state,
                controller_state=controller_state,
                made_jump=False,
            )
        saved, final = solution.ys
        status, why = _outcome(solution.result)
        state = solution.controller_state
        return (
            saved,
            final[0],
            solution.ts[1][0],
            (state[1], solution.solver_state, state),
            status,
            why,
            solution.stats["num_steps"],
        )

    return over_batch(jax.vmap(one, (0, None, None, None)), sharded)(rows, ts, t1, args)
