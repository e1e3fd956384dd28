"""The learners of sparse variable creation: one attention head read out from a [CLS] query, and an MLP.

The head (`AttentionHead`): token l has the embedding e_l = b[x_l] + P_l (a bit embedding plus a learned
positional embedding); the [CLS] query q scores it by <W_K e_l, q> / sqrt(width); the softmax of the scores
weighs the values W_V e_l; a small MLP reads the attended value out to a logit. Only the [CLS] row of the
attention is computed, and since e_l is affine in the bit x_l the scores are (b_0 + P_l) . u + x_l (b_1 - b_0) . u
with u = W_K^T q / sqrt(width): the positional part is shared by every sample, so a sample costs O(T) for
its scores and O(T width) for its attended value, not O(T^2).

The contrast (`BitsMLP`): an MLP on the flattened bits.
"""

import math

import equinox as eqx
import jax
from jaxtyping import Array, Float, PRNGKeyArray

__all__ = ["AttentionHead", "BitsMLP"]


class AttentionHead(eqx.Module):
    """One softmax attention head read out from a [CLS] query, with a one-hidden-layer MLP on top.

    **Arguments:** `T` (input length), `width` (embedding width), `hidden` (the read-out MLP's width),
    `key` (a JAX PRNG key).
    """

    bits: Float[Array, "2 width"]
    positions: Float[Array, "T width"]
    query: Float[Array, " width"]
    keys: Float[Array, "width width"]
    values: Float[Array, "width width"]
    readout: eqx.nn.MLP

    def __init__(self, T: int, width: int = 16, hidden: int = 32, *, key: PRNGKeyArray):
        keys = jax.random.split(key, 6)
        self.bits = jax.random.normal(keys[0], (2, width))
        # Small positional embeddings: the attention starts near uniform, so that the gradient, not the
        # random initialisation, picks the positions (at 1.0 instead of 0.1, a quarter to a half of the runs at
        # T = 32, m = 160 stalled with their attention on the wrong positions).
        self.positions = 0.1 * jax.random.normal(keys[1], (T, width))
        self.query = jax.random.normal(keys[2], (width,))
        self.keys = jax.random.normal(keys[3], (width, width)) / math.sqrt(width)
        self.values = jax.random.normal(keys[4], (width, width)) / math.sqrt(width)
        self.readout = eqx.nn.MLP(width, "scalar", hidden, depth=1, activation=jax.nn.relu, key=keys[5])

    def scores(self, x: Float[Array, "... T"]) -> Float[Array, "... T"]:
        """The [CLS] query's scores of the T tokens of inputs x (bits as floats)."""
        u = self.keys.T @ self.query / math.sqrt(self.query.shape[0])
        return (self.bits[0] + self.positions) @ u + x * ((self.bits[1] - self.bits[0]) @ u)

    def attention(self, x: Float[Array, "... T"]) -> Float[Array, "... T"]:
        """The [CLS] row of the attention: softmax of the scores."""
        return jax.nn.softmax(self.scores(x), axis=-1)

    def __call__(self, x: Float[Array, " T"]) -> Float[Array, ""]:
        """The logit of P(y = 1) for one input of T bits."""
        a = self.attention(x)
        attended = self.bits[0] + (a @ x) * (self.bits[1] - self.bits[0]) + a @ self.positions
        return self.readout(self.values @ attended)


class BitsMLP(eqx.Module):
    """An MLP on the flattened bits (two hidden layers), the non-attention contrast.

    **Arguments:** `T`, `hidden` (the hidden layers' width), `key`.
    """

    mlp: eqx.nn.MLP

    def __init__(self, T: int, hidden: int = 32, *, key: PRNGKeyArray):
        self.mlp = eqx.nn.MLP(T, "scalar", hidden, depth=2, activation=jax.nn.relu, key=key)

    def __call__(self, x: Float[Array, " T"]) -> Float[Array, ""]:
        return self.mlp(2.0 * x - 1.0)
