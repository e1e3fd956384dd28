"""Schedules of the inverse temperature lam as functions of the flow time t."""

import equinox as eqx
import jax.numpy as jnp

__all__ = ["Constant", "InverseTimeDecay"]


class Constant(eqx.Module):
    """lam(t) = lam."""

    lam: float

    def __call__(self, t):
        return jnp.asarray(self.lam, dtype=float)


class InverseTimeDecay(eqx.Module):
    """The paper's per-step schedule lam0 / (1 + rate * step), on the clock t = step_size * step.

    **Arguments:**

    - `lam0`: lam at t = 0.
    - `rate`: the decay per step (the paper uses 1e-4).
    - `step_size`: the step alpha that maps steps to flow time.
    """

    lam0: float
    rate: float
    step_size: float

    def __check_init__(self):
        for name in ("lam0", "step_size"):
            value = getattr(self, name)
            if isinstance(value, int | float) and not value > 0:
                raise ValueError(f"InverseTimeDecay.{name} must be > 0, got {value!r}")
        if isinstance(self.rate, int | float) and not self.rate >= 0:
            raise ValueError(f"InverseTimeDecay.rate must be >= 0, got {self.rate!r}")

    def __call__(self, t):
        return self.lam0 / (1 + self.rate * jnp.asarray(t, dtype=float) / self.step_size)

    def at_step(self, step):
        """lam at a step of the discrete algorithm."""
        return self.lam0 / (1 + self.rate * jnp.asarray(step, dtype=float))
