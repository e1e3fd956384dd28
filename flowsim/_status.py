"""One status enumeration for every computed trajectory or run, and one failure report."""

import enum

import equinox as eqx
import numpy as np

__all__ = ["Failure", "Status", "failures"]


class Status(enum.IntEnum):
    """How the computation of one trajectory (a solve, an iterated map, an SGD run) ended."""

    SUCCESS = 0  #: reached the last time or step
    STEADY_STATE = 1  #: a solve stopped early at a steady state; later times hold the final state
    MAX_STEPS = 2  #: a solve ran out of solver steps
    SOLVER_FAILURE = 3  #: the solver failed (step size underflow, non-finite values, ...)
    INVALID_INITIAL_CONDITION = 4  #: rejected before computing
    DIVERGED = 5  #: an iterate (of the map or of SGD) became non-finite
    INTERRUPTED = 6  #: stopped by Ctrl-C; the states computed until then are kept

    @property
    def ok(self) -> bool:
        return self in (Status.SUCCESS, Status.STEADY_STATE)


def ok(status) -> np.ndarray:
    """Which codes of a status array are successes."""
    status = np.asarray(status)
    return (status == Status.SUCCESS) | (status == Status.STEADY_STATE)


class Failure(eqx.Module):
    """One failed trajectory or run: its index in the batch, where it stopped and why.

    **Fields:** `index`; `time` (the flow time reached, or of the first bad step); `status`;
    `reason`; `step` (the first bad step of a map or SGD run, None for a solve).
    """

    index: int
    time: float
    status: Status
    reason: str
    step: int | None = None

    def __str__(self) -> str:
        where = f"at t = {self.time:.6g}" if self.step is None else f"at step {self.step} (t = {self.time:.6g})"
        return f"trajectory {self.index} failed {where}: {self.status.name}: {self.reason}"


def failures(status, times, reasons: dict[int, str], steps=None) -> list[Failure]:
    """The failures of a batch, from its status codes, the times reached and the reasons.

    **Arguments:**

    - `status`: a `Status` code per trajectory, shape (batch,).
    - `times`: the time each one reached (or its first bad step's time), shape (batch,).
    - `reasons`: {index: why}.
    - `steps`: the first bad step per trajectory (-1 where none), or None for solves.
    """
    status, times = np.asarray(status), np.asarray(times)
    return [
        Failure(
            int(i),
            float(times[i]),
            Status(int(status[i])),
            reasons.get(int(i), ""),
            None if steps is None else int(np.asarray(steps)[i]),
        )
        for i in np.flatnonzero(~ok(status))
    ]
