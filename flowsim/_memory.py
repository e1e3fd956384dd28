"""The memory and time a run needs, estimated before it is compiled, against what the machine has.

A run that does not fit fails inside XLA with RESOURCE_EXHAUSTED after compiling, or swaps for
minutes; estimating its largest arrays first lets it be refused at once, with the option to change.
A run that would take hours is refused the same way unless it is asked for (`--yes`, `force=True`,
or within `long_runs_allowed()`), and a run longer than a minute says how long before it starts.
"""

import contextlib
import contextvars
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import jax
import numpy as np

from flowsim._checks import InvalidInput

__all__ = [
    "TIME_LIMIT",
    "Cost",
    "Need",
    "announcing",
    "available_bytes",
    "check_fits",
    "check_time",
    "check_work",
    "float_bytes",
    "format_bytes",
    "format_seconds",
    "held_announcements",
    "long_runs_allowed",
    "starting",
    "tree_bytes",
]

#: Seconds of estimated work above which a run is refused unless asked for (`check_time`).
TIME_LIMIT = 3600.0
#: Estimated work above this many seconds is announced before it starts (`announcing`).
ANNOUNCED = 60.0
_LONG_ALLOWED = contextvars.ContextVar("flowsim_long_runs", default=False)
_ANNOUNCE: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "flowsim_announce", default=None
)
_HELD: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("flowsim_held", default=None)


class Need(NamedTuple):
    """One part of a run's memory: what it is, its size in bytes, and how to make it smaller."""

    what: str
    nbytes: int
    advice: str


def format_bytes(nbytes: float) -> str:
    """A size with a binary unit: "512 B", "3.2 GiB", "1.1e+04 TiB"."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            value = nbytes / size
            return f"{value:.3g} {unit}" if value < 1e4 else f"{value:.2g} {unit}"
    return f"{int(nbytes)} B"


#: Linux's account of the host's memory.
_MEMINFO = "/proc/meminfo"


def available_bytes() -> tuple[int | None, str]:
    """The memory free for a new computation on this process's first device, and where it was read.

    **Returns:** (bytes, source): the device's limit minus what is in use where JAX reports them
    (GPUs), else the host's available memory: MemAvailable of /proc/meminfo (Linux), the free pages
    (other Unix), the installed memory where only that is known (macOS); None where the system says
    neither (Windows), so that nothing is refused for its memory.
    """
    device = jax.local_devices()[0]  # of several processes, only its own devices can be read
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0)), f"free on {device.device_kind}"
    try:
        with open(_MEMINFO) as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available on this machine"
    except OSError:
        pass
    names = getattr(os, "sysconf_names", {})
    for pages, source in (("SC_AVPHYS_PAGES", "free on this machine"), ("SC_PHYS_PAGES", "installed on this machine")):
        if pages in names and "SC_PAGE_SIZE" in names:
            return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE"), source
    return None, "unknown: this system does not report it"


def tree_bytes(shapes) -> int:
    """Bytes of a pytree of arrays or `jax.ShapeDtypeStruct`s (e.g. from `jax.eval_shape`)."""
    return sum(int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize for leaf in jax.tree.leaves(shapes))


def float_bytes(*sizes: int, itemsize: int = 8) -> int:
    """Bytes of an array of the given sizes (float64 by default), as an exact Python int (never overflows)."""
    return math.prod(int(size) for size in sizes) * itemsize


def check_fits(call: str, needs: Sequence[Need], available: tuple[int, str] | None = None) -> None:
    """Refuse a run whose estimated memory exceeds what is available, before it is compiled.

    **Arguments:**

    - `call`: what is refused, for the message (e.g. "run_sgd").
    - `needs`: the run's largest arrays (estimates: XLA may need a small multiple of them).
    - `available`: (bytes, source) to compare with; default `available_bytes()`. Unknown bytes (None) refuse
      nothing.

    **Raises:** ValueError with the estimate, the memory available and the advice of the largest part.
    """
    total = sum(need.nbytes for need in needs)
    free, source = available_bytes() if available is None else available
    if free is None or total <= free:
        return
    largest = max(needs, key=lambda need: need.nbytes)
    raise InvalidInput(
        f"{call} would need about {format_bytes(total)} of memory, more than the {format_bytes(free)} {source}: "
        f"{largest.what} alone take {format_bytes(largest.nbytes)}; {largest.advice}"
    )


class Cost(NamedTuple):
    """One part of a run's time: what it is, its estimated seconds, and how to make it shorter.

    The seconds come from the part's size times a per-unit cost measured on the 2-core CPU of
    BENCHMARKS.md (a faster machine takes less: the estimate errs long).
    """

    what: str
    seconds: float
    advice: str


def format_seconds(seconds: float) -> str:
    """A duration in the largest fitting unit: "40 s", "12 min", "3.5 h", "2.1e+03 days"."""
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.2g} {unit}"
    return f"{seconds:.0f} s"


@contextlib.contextmanager
def long_runs_allowed(allowed: bool = True) -> Iterator[None]:
    """Within this block `check_time` lets runs longer than `TIME_LIMIT` go (the command line's --yes)."""
    token = _LONG_ALLOWED.set(allowed)
    try:
        yield
    finally:
        _LONG_ALLOWED.reset(token)


@contextlib.contextmanager
def announcing(say: Callable[[str], None]) -> Iterator[None]:
    """Within this block `check_time` says, through `say`, the estimate of every run longer than a minute."""
    token = _ANNOUNCE.set(say)
    try:
        yield
    finally:
        _ANNOUNCE.reset(token)


@contextlib.contextmanager
def held_announcements() -> Iterator[None]:
    """Within this block `check_time`'s announcements wait for `starting()`: a run estimated before its other
    checks is announced only once they pass and its work starts; later estimates of its parts say nothing more."""
    held: list[str] = []
    # The announcer in force before this block, read before it is replaced (else starting() would say the
    # held lines to the list itself, forever).
    held_token = _HELD.set((_ANNOUNCE.get(), held))
    token = _ANNOUNCE.set(held.append)
    try:
        yield
    finally:
        _ANNOUNCE.reset(token)
        _HELD.reset(held_token)


def starting() -> None:
    """Say the announcements held (`held_announcements`), once: the work starts now."""
    pending = _HELD.get()
    if pending is not None:
        say, held = pending
        for line in held if say is not None else ():
            say(line)
        _HELD.set((None, held))


def check_time(call: str, costs: Sequence[Cost], *, force: bool = False) -> float:
    """Refuse a run whose estimated time exceeds `TIME_LIMIT`, unless asked for; announce one over a minute.

    **Arguments:**

    - `call`: what is estimated, for the message (e.g. "run_sgd").
    - `costs`: the run's parts.
    - `force`: run it however long it takes (also within `long_runs_allowed()`).

    **Returns:** the estimate in seconds.

    **Raises:** `InvalidInput` with the estimate, the limit and the advice of the longest part.
    """
    total = float(sum(cost.seconds for cost in costs))
    if not costs:
        return total
    longest = max(costs, key=lambda cost: cost.seconds)
    if total > TIME_LIMIT and not (force or _LONG_ALLOWED.get()):
        raise InvalidInput(
            f"{call} would take about {format_seconds(total)} (estimated before starting: {longest.what} alone "
            f"about {format_seconds(longest.seconds)}), more than {format_seconds(TIME_LIMIT)}: {longest.advice}; "
            "or ask for it with --yes (force=True)"
        )
    say = _ANNOUNCE.get()
    if say is not None and total > ANNOUNCED:
        say(f"{call}: about {format_seconds(total)} estimated ({longest.what}: {format_seconds(longest.seconds)})")
    return total


def check_work(call: str, needs: Sequence[Need] = (), costs: Sequence[Cost] = (), *, force: bool = False) -> float:
    """The one estimate before work: `check_fits` on `needs`, then `check_time` on `costs`.

    **Returns:** the estimated seconds. **Raises:** `InvalidInput` naming the largest part and how to shrink it.
    """
    check_fits(call, needs)
    return check_time(call, costs, force=force)
