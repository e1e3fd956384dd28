"""The memory a run needs, estimated before it is compiled, against what the machine has.

A run that does not fit fails inside XLA with RESOURCE_EXHAUSTED after compiling, or swaps for
minutes; estimating its largest arrays first lets it be refused at once, with the option to change.
"""

import os
from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from flowsim._checks import InvalidInput

__all__ = ["Need", "available_bytes", "check_fits", "format_bytes", "tree_bytes"]


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


def available_bytes() -> tuple[int, str]:
    """The memory free for a new computation on this process's first device, and where it was read.

    **Returns:** (bytes, source): the device's limit minus what is in use where JAX reports them
    (GPUs), else the host's available memory (MemAvailable of /proc/meminfo, or the free pages).
    """
    device = jax.local_devices()[0]  # of several processes, only its own devices can be read
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0)), f"free on {device.device_kind}"
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available on this machine"
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free on this machine"


def tree_bytes(shapes) -> int:
    """Bytes of a pytree of arrays or `jax.ShapeDtypeStruct`s (e.g. from `jax.eval_shape`)."""
    return sum(int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize for leaf in jax.tree.leaves(shapes))


def check_fits(call: str, needs: Sequence[Need], available: tuple[int, str] | None = None) -> None:
    """Refuse a run whose estimated memory exceeds what is available, before it is compiled.

    **Arguments:**

    - `call`: what is refused, for the message (e.g. "run_sgd").
    - `needs`: the run's largest arrays (estimates: XLA may need a small multiple of them).
    - `available`: (bytes, source) to compare with; default `available_bytes()`.

    **Raises:** ValueError with the estimate, the memory available and the advice of the largest part.
    """
    total = sum(need.nbytes for need in needs)
    free, source = available_bytes() if available is None else available
    if total <= free:
        return
    largest = max(needs, key=lambda need: need.nbytes)
    raise InvalidInput(
        f"{call} would need about {format_bytes(total)} of memory, more than the {format_bytes(free)} {source}: "
        f"{largest.what} alone take {format_bytes(largest.nbytes)}; {largest.advice}"
    )
