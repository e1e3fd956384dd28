"""The parameters of a single-location regression problem."""

import math
import numbers

import equinox as eqx
import jax

__all__ = ["Problem"]


def _is_concrete(value) -> bool:
    return not isinstance(value, jax.core.Tracer)


class Problem(eqx.Module):
    """Single-location regression at dimension d with L tokens (SPEC.md section 1).

    An immutable pytree: `d` and `L` fix array shapes and are static; `lam`,
    `gamma` and `eps` are leaves, so a jitted function of a Problem does not
    recompile when they change.

    **Arguments:**

    - `d`: token dimension, an integer >= 2.
    - `L`: number of tokens, an integer >= 1.
    - `lam`: inverse temperature of the attention nonlinearity, finite and > 0.
    - `gamma`: standard deviation of the informative token, finite and > 0
      (default sqrt(1/2): the informative token then has the same expected norm).
    - `eps`: standard deviation of the label noise, finite and >= 0 (default 0).
    """

    d: int = eqx.field(static=True)
    L: int = eqx.field(static=True)
    lam: float
    gamma: float = math.sqrt(0.5)
    eps: float = 0.0

    def __check_init__(self):
        for name, minimum in (("d", 2), ("L", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
                raise ValueError(f"Problem.{name} must be an integer >= {minimum}, got {value!r}")
        for name, allowed, ok in (
            ("lam", "a finite number > 0", lambda x: x > 0),
            ("gamma", "a finite number > 0", lambda x: x > 0),
            ("eps", "a finite number >= 0", lambda x: x >= 0),
        ):
            value = getattr(self, name)
            if not _is_concrete(value):
                continue  # built inside a transformation: checked where it was concrete
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"Problem.{name} must be {allowed}, got {value!r}") from None
            if not (math.isfinite(number) and ok(number)):
                raise ValueError(f"Problem.{name} must be {allowed}, got {value!r}")

    @property
    def s(self) -> float:
        """The informative token's mean along k*: sqrt(d/2)."""
        return math.sqrt(self.d / 2)
