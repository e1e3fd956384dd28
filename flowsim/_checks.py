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
    "check_entries",
    "check_positive",
    "check_shape",
    "concrete",
    "python_scalar",
    "subnormal_note",
    "wrong_shape",
    "zeros_and_ones",
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
            raise InvalidInput(f"{name} must be {self.text}, got {value!r}: {subnormal_note(number)}")
        return number

    def admits(self, number) -> bool:
        """Whether a number (an int or float, as the command line parsed it) is allowed, subnormal ones refused."""
        return self.accepts(number) and (self.integer or not _subnormal(number))


def _subnormal(number: float) -> bool:
    # XLA's CPU programs flush subnormal numbers to zero: such a step size or time would be 0 there.
    return 0 < abs(number) < sys.float_info.min


def subnormal_note(number: float) -> str:
    """Why a subnormal number is refused ("a subnormal number, which ..."), the one wording of every such refusal;
    "" for any other number."""
    if not _subnormal(number):
        return ""
    return (
        "a subnormal number, which flowsim's compiled programs read as 0 (the smallest normal float64 is "
        f"{sys.float_info.min:.4g})"
    )


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
    """`value` as a float64 array, else `InvalidInput` naming it (instead of NumPy's "could not convert", or its
    warning as it drops the imaginary part of complex numbers)."""
    try:
        array = np.asarray(value)
        if not np.iscomplexobj(array):
            return array.astype(float, copy=False)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be an array of numbers, got {value!r}") from None
    raise InvalidInput(f"{name} must hold real numbers, got complex ones ({array.dtype})")


def check_entries(name: str, value, allowed: str = "finite numbers", accepts: Callable = np.isfinite):
    """`value` as an array of real numbers, if `accepts` (vectorised) holds for each entry (default: finite), else
    `InvalidInput` "{name} must hold {allowed}, got {entry} at index {index}": the check of an array argument at a
    public function's boundary.

    A NumPy or JAX array of real numbers is returned as it is (its dtype kept), anything else as float64
    (`as_floats`). A traced value passes unchecked: it was checked where it was concrete, and flowsim's compiled
    programs that call a public function on tracers pay nothing for its checks.
    """
    if isinstance(value, jax.core.Tracer):
        return value
    real = isinstance(value, np.ndarray | jax.Array) and (
        value.dtype == bool or jax.numpy.issubdtype(value.dtype, jax.numpy.integer)
        or jax.numpy.issubdtype(value.dtype, jax.numpy.floating)
    )  # fmt: skip
    array = value if real else as_floats(name, value)
    host = np.asarray(array)  # a JAX array's one copy to the host
    bad = ~accepts(host)
    if bad.any():
        where = np.unravel_index(np.argmax(bad), host.shape)
        at = f" at index {tuple(int(i) for i in where)}" if host.ndim else ""
        raise InvalidInput(f"{name} must hold {allowed}, got {host[where]}{at}")
    return array


def zeros_and_ones(array: np.ndarray) -> np.ndarray:
    """Which entries are 0 or 1 (booleans included): the `accepts` of `check_entries` for labels and outcomes."""
    return (array == 0) | (array == 1)


def wrong_shape(name: str, wanted: str, shape) -> InvalidInput:
    """The refusal of an array of the wrong shape: "{name} must have shape {wanted}, got {shape}"."""
    return InvalidInput(f"{name} must have shape {wanted}, got {tuple(shape)}")


def check_shape(name: str, value, shape: tuple[int, ...], meaning: str = "") -> np.ndarray:
    """`value` as a float64 array, if it has `shape`, else ValueError naming it (`meaning`: how to read the shape)."""
    array = as_floats(name, value)
    if array.shape != shape:
        raise wrong_shape(name, f"{meaning}{shape}", array.shape)
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
