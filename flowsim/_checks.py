"""Validation at the boundary: allowed values, said once, reused by the API, the tasks and the CLI."""

import math
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass

import jax
import numpy as np

__all__ = [
    "NOISE",
    "NON_NEGATIVE",
    "POSITIVE",
    "SCALE",
    "SEED",
    "SHARE",
    "Allowed",
    "InvalidInput",
    "as_floats",
    "as_key",
    "at_least",
    "check_choice",
    "check_count",
    "check_positive",
    "check_shape",
    "concrete",
    "python_scalar",
]


class InvalidInput(ValueError):
    """A value flowsim cannot take: the message names the parameter (or option) and what is allowed.

    A `ValueError`, so that `except ValueError` catches it; the command line reports it as invalid input
    (exit status 2), and any other error as flowsim's own failure, never as the user's.
    """


@dataclass(frozen=True)
class Allowed:
    """The values a parameter accepts.

    **Fields:**

    - `text`: what is allowed, as a phrase ("a finite number > 0"): used in errors and in --help.
    - `accepts`: a predicate on a Python number.
    - `integer`: whether only integers (not bools) are allowed.
    """

    text: str
    accepts: Callable[[float], bool]
    integer: bool = False

    def check(self, name: str, value):
        """`value` as an int or float if allowed, else ValueError "{name} must be {text}, got {value!r}" (a nonzero
        number below 2.2e-308 in size, subnormal, is refused too: compiled programs read it as 0).

        A traced value (inside a JAX transformation) passes unchecked: it was checked where it was concrete.
        """
        if isinstance(value, jax.core.Tracer):
            return value
        if self.integer:
            ok = not isinstance(value, bool) and isinstance(value, numbers.Integral) and self.accepts(int(value))
            number = int(value) if ok else None
        else:
            try:
                number = float(value) if not isinstance(value, bool | str) else math.nan
            except (TypeError, ValueError):
                number = math.nan
            ok = not math.isnan(number) and self.accepts(number)
        if not ok:
            raise InvalidInput(f"{name} must be {self.text}, got {value!r}")
        if not self.integer and _subnormal(number):
            raise InvalidInput(
                f"{name} must be {self.text}, got {value!r}: a subnormal number, which flowsim's compiled programs "
                f"read as 0 (the smallest normal float64 is {sys.float_info.min:.4g})"
            )
        return number

    def admits(self, number) -> bool:
        """Whether a number (an int or float, as the command line parsed it) is allowed, subnormal ones refused."""
        return self.accepts(number) and (self.integer or not _subnormal(number))


def _subnormal(number: float) -> bool:
    # XLA's CPU programs flush subnormal numbers to zero: such a step size or time would be 0 there.
    return 0 < abs(number) < sys.float_info.min


def at_least(minimum: int) -> Allowed:
    """Integers >= minimum."""
    return Allowed(f"an integer >= {minimum}", lambda x: x >= minimum, integer=True)


POSITIVE = Allowed("a finite number > 0", lambda x: math.isfinite(x) and x > 0)
NON_NEGATIVE = Allowed("a finite number >= 0", lambda x: math.isfinite(x) and x >= 0)
SHARE = Allowed("a number in [0, 1]", lambda x: 0 <= x <= 1)
#: A model's scale (a noise level, a bandwidth): its square, fourth power and their inverses stay float64 numbers,
#: not inf or 0.
SCALE = Allowed("a number in [1e-50, 1e50]", lambda x: 1e-50 <= x <= 1e50)
#: A noise level that may be 0 (label noise): its square and fourth power stay float64 numbers, not inf.
NOISE = Allowed("a number in [0, 1e50]", lambda x: 0 <= x <= 1e50)
#: The seeds `jax.random.key` takes (it converts them to a C long).
SEED = Allowed("an integer in [0, 2**63 - 1]", lambda x: 0 <= x <= 2**63 - 1, integer=True)


def check_positive(name: str, value) -> float:
    """`value` as a float, if it is a finite real number > 0 (a Python, NumPy or JAX scalar)."""
    return POSITIVE.check(name, value)


def check_count(name: str, value, minimum: int) -> int:
    """`value` as an int, if it is an integer >= minimum (not a bool)."""
    return at_least(minimum).check(name, value)


def check_choice(name: str, value, allowed: tuple):
    """`value` if it is one of `allowed`, else ValueError naming them."""
    if value not in allowed:
        raise InvalidInput(f"{name} must be one of {allowed}, got {value!r}")
    return value


def as_floats(name: str, value) -> np.ndarray:
    """`value` as a float64 array, else `InvalidInput` naming it (instead of NumPy's "could not convert")."""
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be an array of numbers, got {value!r}") from None


def check_shape(name: str, value, shape: tuple[int, ...], meaning: str = "") -> np.ndarray:
    """`value` as a float64 array, if it has `shape`, else ValueError naming it (`meaning`: how to read the shape)."""
    array = as_floats(name, value)
    if array.shape != shape:
        raise InvalidInput(f"{name} must have shape {meaning or ''}{shape}, got {array.shape}")
    return array


def concrete(value) -> bool:
    """Whether `value` is known here, not a tracer inside a compiled program. A task's parameters are checked
    where they are concrete (when it is made); the engine's programs trace them (`flowsim.integrate.traced`)."""
    return not isinstance(value, jax.core.Tracer)


def python_scalar(value):
    """A NumPy or concrete JAX scalar as the Python number it holds; anything else unchanged.

    The converter of a task's static fields (shapes such as d): a static field must hold a plain,
    hashable Python value, and NumPy integers come in wherever a user computes a size with NumPy.
    """
    if isinstance(value, np.generic) or (
        isinstance(value, np.ndarray | jax.Array) and value.ndim == 0 and not isinstance(value, jax.core.Tracer)
    ):
        return value.item()
    return value


def as_key(key, name: str = "key"):
    """A JAX PRNG key from a key or an integer seed (`jax.random.key(seed)`), else ValueError.

    Typed keys (`jax.random.key`), traced ones included, pass unchanged; so do legacy raw keys
    (`jax.random.PRNGKey`: two uint32), which every `jax.random` function still takes.
    """
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return jax.random.key(SEED.check(f"{name} (an integer seed)", key))
    if isinstance(key, jax.Array) and (
        jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) or (key.dtype == np.uint32 and key.shape == (2,))
    ):
        return key
    raise InvalidInput(
        f"{name} must be a JAX PRNG key, jax.random.key(seed), or an integer seed in [0, 2**63 - 1], got {key!r}"
    )
