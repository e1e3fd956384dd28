"""The exact discrete algorithm on a task's state: projected gradient descent, iterated in `lax.scan`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from flowsim import _status
from flowsim._checks import InvalidInput, check_count, check_positive
from flowsim._status import Failure, Status
from flowsim._task import check_states, task_risk
from flowsim.devices import shard_batch
from flowsim.integrate import evaluate, traced

__all__ = ["MapTrajectories", "iterate_map", "risk_along"]


class MapTrajectories(eqx.Module):
    """Iterates of the discrete map.

    **Fields:**

    - `steps`: the logged steps, shape (logs,); `times`: the same on the flow's clock alpha * step.
    - `ys`: the logged states, (batch, logs, n); NaN from a divergence on.
    - `risk`: the risk of each logged state, (batch, logs).
    - `status`: a `Status` per trajectory (SUCCESS or DIVERGED).
    - `first_bad`: the first logged step with a non-finite state (-1 where none), (batch,).
    """

    steps: np.ndarray
    times: np.ndarray
    ys: Float[Array, "batch logs n"]
    risk: Float[Array, "batch logs"]
    status: Int[Array, " batch"]
    first_bad: Int[Array, " batch"]

    def failures(self) -> list[Failure]:
        """Every diverged trajectory, with the first logged step at which it was not finite."""
        first_bad = np.asarray(self.first_bad)
        alpha = self.times[-1] / self.steps[-1]
        reasons = {int(i): f"the map diverged by step {first_bad[i]}" for i in np.flatnonzero(first_bad >= 0)}
        return _status.failures(self.status, alpha * np.maximum(first_bad, 0), reasons, first_bad)


#: The risk of each logged state at its time: times (logs,), ys (batch, logs, n).
risk_along = jax.vmap(jax.vmap(task_risk, (0, 0, None)), (None, 0, None))


def iterate_map(task, y0, alpha: float, steps: int, *, log_every: int = 1) -> MapTrajectories:
    """Iterate the task's exact discrete map (`task.discrete_map`) from a batch of states.

    Step n runs at time alpha * n: the clock of the flow, so a schedule of t serves both.

    **Arguments:**

    - `task`: an `AbstractTask` with a discrete map.
    - `y0`: initial states, shape (n,) or (batch, n), all states of the task.
    - `alpha`: the step size (> 0).
    - `steps`: the number of steps (>= 1), a multiple of `log_every`.
    - `log_every`: keep every `log_every`-th iterate (and the initial one).

    **Returns:** a `MapTrajectories` with steps 0, log_every, ..., steps.
    """
    alpha = check_positive("alpha", alpha)
    steps = check_count("steps", steps, 1)
    log_every = check_count("log_every", log_every, 1)
    if steps % log_every:
        raise InvalidInput(f"log_every = {log_every} must divide steps = {steps}")
    y0, valid, reasons = check_states(task, y0)
    if not valid.all():
        raise InvalidInput(reasons[int(np.argmin(valid))])
    task = traced(task)
    batch = shard_batch(jnp.asarray(y0))  # the states split over every device (a no-op on one)
    ys = batch.gather(_iterate(batch.value, jnp.asarray(alpha, dtype=float), task, steps // log_every, log_every))
    logged_steps = np.arange(0, steps + 1, log_every)
    times = alpha * logged_steps.astype(float)
    risk = evaluate(risk_along, jnp.asarray(times), ys, task)
    bad = ~np.isfinite(np.asarray(ys)).all(axis=-1)
    first_bad = np.where(bad.any(axis=-1), logged_steps[np.argmax(bad, axis=-1)], -1)
    status = np.where(first_bad >= 0, Status.DIVERGED, Status.SUCCESS)
    return MapTrajectories(logged_steps, times, ys, risk, jnp.asarray(status), jnp.asarray(first_bad))


@eqx.filter_jit
def _iterate(y0, alpha, task, logs, log_every):
    one_step = jax.vmap(lambda t, y: task.discrete_map(t, y, alpha), (None, 0))

    def step(carry, _):
        y, n = carry
        return (one_step(alpha * n, y), n + 1), None

    def block(carry, _):
        carry, _ = jax.lax.scan(step, carry, None, length=log_every)
        return carry, carry[0]

    _, logged = jax.lax.scan(block, (y0, jnp.asarray(0.0)), None, length=logs)
    return jnp.concatenate([y0[:, None], jnp.moveaxis(logged, 0, 1)], axis=1)
