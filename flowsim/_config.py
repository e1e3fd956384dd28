"""Process-wide JAX settings flowsim relies on.

- float64 by default.
- JAX's Threefry hash (every `jax.random` draw, split and fold_in) lowered on the CPU as it is on the GPU: its
  20 rounds written out, instead of JAX's CPU default of a five-iteration loop. The bits are the same (the same
  hash, tested against its authors' published test vectors); a program with many random draws compiles about
  1.3x faster and the SGD chain runs about 1.2x faster (BENCHMARKS.md, "Threefry without its loop"), because
  XLA's CPU compiler gives every loop its own kernels and calls, and flowsim's trainings draw at every step.
  Only on the jaxlib releases where this was measured (`UNROLLED_RELEASES`): on jaxlib 0.11 and 0.12, LLVM's
  loop vectorizer takes exponential time on some programs holding the written-out hash (the sparse task's
  initialisation, compiled in 3 s with JAX's loop, was still compiling after 20 minutes: BENCHMARKS.md,
  "Python 3.13's hang"), so there, and on any release not measured, JAX's own lowering stays.
"""

import re

import jax
import jaxlib
from jax.interpreters import mlir

# Overlaps near a fixed point are compared to 1e-10, so float64 is the default;
# float32 is only ever an explicit option of a function.
jax.config.update("jax_enable_x64", True)


#: The jaxlib releases, (major, minor), on which the hash is written out on the CPU (see the module's docstring).
UNROLLED_RELEASES = frozenset({(0, 10)})


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "0.12.0.1" or "1.0rc1"; (0, 0) for one that starts otherwise."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _threefry_unrolled_on_cpu(jaxlib_version: str) -> bool:
    """Register JAX's unrolled Threefry lowering for the CPU where this jaxlib's release is one of
    `UNROLLED_RELEASES`; False where it is not, or where this JAX has no such rule (then JAX's own lowering
    stays: the same numbers, compiled more slowly)."""
    if release(jaxlib_version) not in UNROLLED_RELEASES:
        return False
    try:
        from jax._src.random import threefry2x32
    except ImportError:  # pragma: no cover - a JAX that moved its Threefry module
        return False
    primitive = getattr(threefry2x32, "threefry2x32_p", None)
    rule = getattr(threefry2x32, "_threefry2x32_lowering_rule", None)
    if primitive is None or rule is None:  # pragma: no cover
        return False
    mlir.register_lowering(primitive, rule, platform="cpu")
    return True


#: Whether `jax.random`'s hash is lowered without its loop on the CPU (see the module's docstring).
THREEFRY_UNROLLED = _threefry_unrolled_on_cpu(jaxlib.__version__)
