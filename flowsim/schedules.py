"""Schedules: a parameter of a task (the inverse temperature lam) as a function of the flow time t.

A schedule takes the place of one named parameter of a task (`AbstractTask.scheduled`), held in
the task itself: `slr.Problem(d, L, lam=InverseTimeDecay(1.0, 1e-4, 4e-3))`. Nothing else
carries it, so the flow, the map, SGD and their comparison all see the same values.
"""

import abc

import equinox as eqx
import jax.numpy as jnp

from flowsim._checks import NON_NEGATIVE, POSITIVE

__all__ = ["AbstractSchedule", "Constant", "InverseTimeDecay"]


class AbstractSchedule(eqx.Module):
    """A parameter as a function of the flow time t."""

    @abc.abstractmethod
    def __call__(self, t):
        """The value at flow time t (broadcast over arrays of t)."""

    @abc.abstractmethod
    def at_step(self, step):
        """The value at a step of the discrete algorithm."""

    @property
    @abc.abstractmethod
    def initial(self) -> float:
        """The value at t = 0."""

    @abc.abstractmethod
    def describe(self) -> str:
        """A short formula, e.g. "1/(1 + 0.0001 step)"."""


class Constant(AbstractSchedule):
    """value(t) = value."""

    value: float

    def __call__(self, t):
        return jnp.full(jnp.shape(t), self.value, dtype=float)

    def at_step(self, step):
        return self(step)

    @property
    def initial(self) -> float:
        return self.value

    def describe(self) -> str:
        return f"{float(self.value):g}"


class InverseTimeDecay(AbstractSchedule):
    """The paper's per-step schedule lam0 / (1 + rate * step), on the clock t = step_size * step.

    **Arguments:**

    - `lam0`: the value at t = 0 (> 0).
    - `rate`: the decay per step (>= 0; the paper uses 1e-4; 0 keeps the value fixed).
    - `step_size`: the step alpha that maps steps to flow time (> 0).
    - `until`: the step after which the value is frozen at lam0 / (1 + rate * until) (>= 0; default None:
      never). The authors' two-head experiment decays to step 25 000, then freezes (docs/heads.md).
    """

    lam0: float
    rate: float
    step_size: float
    until: float | None = None

    def __check_init__(self):
        POSITIVE.check("InverseTimeDecay.lam0", self.lam0)
        NON_NEGATIVE.check("InverseTimeDecay.rate", self.rate)
        POSITIVE.check("InverseTimeDecay.step_size", self.step_size)
        if self.until is not None:
            NON_NEGATIVE.check("InverseTimeDecay.until", self.until)

    def __call__(self, t):
        return self.at_step(jnp.asarray(t, dtype=float) / self.step_size)

    def at_step(self, step):
        step = jnp.asarray(step, dtype=float)
        if self.until is not None:
            step = jnp.minimum(step, self.until)
        return self.lam0 / (1 + self.rate * step)

    @property
    def initial(self) -> float:
        return self.lam0

    def describe(self) -> str:
        if self.rate == 0:
            return f"{float(self.lam0):g}"
        frozen = "" if self.until is None else f", frozen after step {float(self.until):g}"
        return f"{float(self.lam0):g}/(1 + {float(self.rate):g} step){frozen}"
