"""What several test files share: one definition each, so that they also share compiled programs."""

import jax.numpy as jnp

from flowsim import slr

#: A researcher's own map, made here with the public API only: softmax capped at C = e,
#: w_l = min(e^{x_l}, C) / sum_j min(e^{x_j}, C), given by its log (min(x, 1)) so that large scores do not overflow.
CAPPED = slr.AttentionMap("capped softmax", log_f=lambda x: jnp.minimum(x, 1.0), normalisation="tokens")
