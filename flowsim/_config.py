"""Process-wide JAX settings flowsim relies on."""

import jax

# Overlaps near a fixed point are compared to 1e-10, so float64 is the default;
# float32 is only ever an explicit option of a function.
jax.config.update("jax_enable_x64", True)
