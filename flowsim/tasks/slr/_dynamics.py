"""Gradient flow and projected gradient descent of single-location regression, on the overlaps."""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from flowsim.tasks.slr import _generated as generated
from flowsim.integrate import Trajectories, evaluate, integrate, traced
from flowsim.schedules import Constant
from flowsim.tasks.slr._data import _check_count, _check_positive
from flowsim.tasks.slr._overlaps import _show, unrealizable
from flowsim.tasks.slr._problem import Problem

__all__ = ["MapTrajectories", "flow_field", "iterate_map", "solve_flow"]


def _lam(args, t):
    _, schedule = args
    return schedule(t)


def _parameters(problem: Problem, lam):
    return problem.d, problem.L, lam, problem.gamma, problem.eps


def flow_field(t, m, args):
    """d/dt of the five overlaps; `args` = (problem, schedule). A Diffrax-style vector field."""
    return generated.flow(*jnp.moveaxis(m, -1, 0), *_parameters(args[0], _lam(args, t)))


def _flow_field_on_manifold(t, m, args):
    return generated.flow_on_manifold(*jnp.moveaxis(m, -1, 0), *_parameters(args[0], _lam(args, t)))


def _risk(t, m, args):
    return generated.risk(*jnp.moveaxis(m, -1, 0), *_parameters(args[0], _lam(args, t)))


def _risk_on_manifold(t, m, args):
    zeros = jnp.zeros_like(m[..., 0])
    return generated.risk(m[..., 0], m[..., 1], zeros, zeros, zeros, *_parameters(args[0], _lam(args, t)))


def _validate_batch(m0, on_manifold: bool) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Initial conditions as (batch, n), and which rows are realizable (with reasons)."""
    n = 2 if on_manifold else 5
    array = np.asarray(m0, dtype=float)
    if array.ndim not in (1, 2) or array.shape[-1] != n:
        raise ValueError(
            f"m0 must have shape ({n},) or (batch, {n}) for the "
            f"{'2-D flow on M' if on_manifold else '5-D flow'}, got shape {array.shape}"
        )
    array = array.reshape(-1, n)
    full = np.concatenate([array, np.zeros((len(array), 3))], axis=1) if on_manifold else array
    problems = unrealizable(full)
    valid = np.ones(len(array), bool)
    valid[list(problems)] = False
    reasons = {i: f"overlaps point m0[{i}] = {_show(full[i])} {reason}" for i, reason in problems.items()}
    return array, valid, reasons


def solve_flow(
    problem: Problem,
    m0,
    ts,
    *,
    schedule=None,
    on_manifold: bool = False,
    **options,
) -> Trajectories:
    """Integrate the projected gradient flow of the population risk on the overlaps.

    **Arguments:**

    - `problem`: the task parameters.
    - `m0`: initial overlaps, shape (5,) or (batch, 5); with `on_manifold`, (kappa, nu)
      of shape (2,) or (batch, 2). Unrealizable rows are reported, not solved.
    - `ts`: increasing times at which to save; the flow starts at ts[0].
    - `schedule`: lam as a function of t (e.g. `InverseTimeDecay`); default: problem.lam.
    - `on_manifold`: integrate the 2-D flow on M = {theta = eta = rho = 0}.
    - `options`: passed to `flowsim.integrate.integrate` (solver, rtol, atol, max_steps,
      steady_state_tol, progress).

    **Returns:** a `Trajectories` with ys of shape (batch, len(ts), 5) (or 2), the risk
    along the way in `observed`, and a status per trajectory (see `failures()`).
    """
    y0, valid, reasons = _validate_batch(m0, on_manifold)
    # Explicit steps are stability-limited: about 35 d of them per unit-100 of time at d >= 400
    # (BENCHMARKS.md), so the default budget grows with d.
    options.setdefault("max_steps", max(100_000, 500 * problem.d))
    args = (problem, schedule if schedule is not None else Constant(problem.lam))
    field, risk = (_flow_field_on_manifold, _risk_on_manifold) if on_manifold else (flow_field, _risk)
    return integrate(field, y0, ts, args, observe=risk, valid=valid, invalid_reasons=reasons, **options)


class MapTrajectories(NamedTuple):
    """Iterates of the discrete map: logged steps (logs,), overlaps (batch, logs, 5), risk (batch, logs)."""

    steps: np.ndarray
    ys: Float[Array, "batch logs 5"]
    risk: Float[Array, "batch logs"]

    def first_non_finite(self) -> dict[int, int]:
        """For each diverged trajectory, the first logged step with a non-finite overlap."""
        bad = ~np.isfinite(np.asarray(self.ys)).all(axis=-1)
        return {int(i): int(self.steps[np.argmax(bad[i])]) for i in np.flatnonzero(bad.any(axis=-1))}


def iterate_map(
    problem: Problem, m0, alpha: float, steps: int, *, schedule=None, log_every: int = 1
) -> MapTrajectories:
    """Iterate the exact projected-gradient-descent map on the overlaps (lax.scan, batched).

    Step n uses lam = schedule(alpha * n): the clock of the flow, t = alpha * step.

    **Arguments:**

    - `problem`: the task parameters.
    - `m0`: initial overlaps, shape (5,) or (batch, 5), realizable.
    - `alpha`: the step size (> 0).
    - `steps`: the number of steps (>= 1), a multiple of `log_every`.
    - `schedule`: lam as a function of t; default: problem.lam.
    - `log_every`: keep every `log_every`-th iterate (and the initial one).

    **Returns:** a `MapTrajectories` with steps 0, log_every, ..., steps.
    """
    alpha = _check_positive("alpha", alpha)
    steps = _check_count("steps", steps, 1)
    log_every = _check_count("log_every", log_every, 1)
    if steps % log_every:
        raise ValueError(f"log_every = {log_every} must divide steps = {steps}")
    y0, valid, reasons = _validate_batch(m0, on_manifold=False)
    if not valid.all():
        raise ValueError(reasons[int(np.argmin(valid))])
    args = traced((problem, schedule if schedule is not None else Constant(problem.lam)))
    ys = _iterate(jnp.asarray(y0), jnp.asarray(alpha, dtype=float), args, steps // log_every, log_every)
    logged_steps = np.arange(0, steps + 1, log_every)
    risk = evaluate(_risk_along, alpha * jnp.asarray(logged_steps, dtype=float), ys, args)
    return MapTrajectories(logged_steps, ys, risk)


#: The risk of each logged iterate, at the lam of its step: times (logs,), ys (batch, logs, 5).
_risk_along = jax.vmap(jax.vmap(_risk, (0, 0, None)), (None, 0, None))


@eqx.filter_jit
def _iterate(m0, alpha, args, logs, log_every):
    problem = args[0]

    def step(carry, _):
        m, n = carry
        lam = _lam(args, alpha * n)
        new = generated.pgd_map(*jnp.moveaxis(m, -1, 0), *_parameters(problem, lam), alpha)
        return (new, n + 1), None

    def block(carry, _):
        carry, _ = jax.lax.scan(step, carry, None, length=log_every)
        return carry, carry[0]

    _, logged = jax.lax.scan(block, (m0, jnp.asarray(0.0)), None, length=logs)
    return jnp.concatenate([m0[:, None], jnp.moveaxis(logged, 0, 1)], axis=1)
