"""Process-wide JAX settings flowsim relies on.

- float64 by default.
- JAX's Threefry hash (every `jax.random` draw, split and fold_in) lowered on the CPU as it is on the GPU: its
  20 rounds written out, instead of JAX's CPU default of a five-iteration loop. The bits are the same (the same
  hash, tested against its authors' published test vectors); a program with many random draws compiles about
  1.3x faster and the SGD chain runs about 1.2x faster (BENCHMARKS.md, "Threefry without its loop"), because
  XLA's CPU compiler gives every loop its own kernels and calls, and flowsim's trainings draw at every step.
  (With jax 0.12, SGD in R^d then runs about 1.2x slower once compiled; the chain still gains.)
"""

import jax
from jax.interpreters import mlir

# Overlaps near a fixed point are compared to 1e-10, so float64 is the default;
# float32 is only ever an explicit option of a function.
jax.config.update("jax_enable_x64", True)


def _threefry_unrolled_on_cpu() -> bool:
    """Register JAX's unrolled Threefry lowering for the CPU; False where this JAX has no such rule (then JAX's
    own lowering stays: the same numbers, compiled more slowly)."""
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
THREEFRY_UNROLLED = _threefry_unrolled_on_cpu()
