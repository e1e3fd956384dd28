"""The learners of sparse variable creation: one attention head read out from a [CLS] query, and an MLP.

The head (`AttentionHead`): token l has the embedding e_l = b[x_l] + P_l (a bit embedding plus a learned
positional embedding); the [CLS] query q scores it by <W_K e_l, q> / sqrt(width); the softmax of the scores
weighs the values W_V e_l; a small MLP reads the attended value out to a logit. Only the [CLS] row of the
attention is computed, and since e_l is affine in the bit x_l the scores are (b_0 + P_l) . u + x_l (b_1 - b_0) . u
with u = W_K^T q / sqrt(width): the positional part is shared by every sample, so a sample costs O(T) for
its scores and O(T width) for its attended value, not O(T^2).

A batch of inputs is not even taken token by token (`logits`): a token's weight e^{score} and its value depend
only on its bit and its position, so every sum over the tokens that the [CLS] output needs (the softmax's
normaliser and its weighted values) is sum_l f(x_l, l) = sum_l f(0, l) (1 - x_l) + f(1, l) x_l: matrix
products of the (samples, T) bits with (T, features) matrices shared by the batch, with no (samples, T)
softmax, exponential or gradient of it. The sums have nonnegative coefficients (no cancellation), and the
weights are scaled by the largest token's, so nothing overflows.

The paper's learner (`OneLayerTransformer`): a one-layer Transformer (16 heads, width 64, pre-layer-norm) read out
from a [CLS] token, computed the same way: only its [CLS] row, from the 2T keys and values of the (bit, position)
tokens shared by every sample.

The contrast (`BitsMLP`): an MLP on the flattened bits.

Every learner's `logits(x)` takes a batch of inputs (samples, T) and is what training calls; `model(x)` is
the logit of one input.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from flowsim._checks import InvalidInput

__all__ = ["INIT_SCALE", "AttentionHead", "BitsMLP", "OneLayerTransformer"]

#: The standard deviation of the Transformer's initial weights and embeddings (BERT's, and SPEC's protocol).
INIT_SCALE = 0.02


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

    def token_scores(self) -> tuple[Float[Array, " 1"], Float[Array, "2 1 T"]]:
        """The scores as the Transformer's `token_scores` gives them, for one head and no [CLS] token: (-inf,) (no
        weight) and, for bits 0 and 1, the score of each position, (2, 1, T)."""
        u = self.keys.T @ self.query / math.sqrt(self.query.shape[0])
        c, delta = (self.bits[0] + self.positions) @ u, (self.bits[1] - self.bits[0]) @ u
        return jnp.full(1, -jnp.inf), jnp.stack([c, c + delta])[:, None, :]

    def logits(self, x: Float[Array, "samples T"]) -> Float[Array, " samples"]:
        """The logits of P(y = 1) for a batch of inputs of T bits.

        A token's score is c_l + x_l delta (c_l = (b_0 + P_l) . u, delta = (b_1 - b_0) . u), so its weight is
        w_l e^{delta x_l} with w_l = e^{c_l}: up to a factor common to every token, the bit whose factor is
        the larger (1 if delta >= 0, else 0) weighs 1 and the other e^{-|delta|}. With xi the indicator of the
        larger bit, every sum the head needs is small sum_l w_l g_l + (1 - small) xi @ (w g) (small =
        e^{-|delta|}): one matrix product per batch for the normaliser and the attended positions.
        """
        u = self.keys.T @ self.query / math.sqrt(self.query.shape[0])
        c, delta = (self.bits[0] + self.positions) @ u, (self.bits[1] - self.bits[0]) @ u
        w = jnp.exp(c - jax.lax.stop_gradient(jnp.max(c)))
        features = jnp.concatenate([w[:, None], w[:, None] * self.positions], axis=1)  # (T, 1 + width)
        up, small = delta >= 0, jnp.exp(-jnp.abs(delta))
        on_larger = jnp.where(up, x, 1 - x) @ features  # sums over the tokens of the larger bit
        larger = small * features.sum(0) + (1 - small) * on_larger
        normaliser = larger[:, :1]
        # The weights of the tokens of bit 1: xi @ w when bit 1 is the larger, else small (sum w - xi @ w).
        on_ones = jnp.where(up, on_larger[:, :1], small * (jnp.sum(w) - on_larger[:, :1]))
        attended = self.bits[0] + (on_ones / normaliser) * (self.bits[1] - self.bits[0]) + larger[:, 1:] / normaliser
        return jax.vmap(lambda a: self.readout(self.values @ a))(attended)

    def __call__(self, x: Float[Array, " T"]) -> Float[Array, ""]:
        """The logit of P(y = 1) for one input of T bits."""
        return self.logits(x[None])[0]


class BitsMLP(eqx.Module):
    """An MLP on the flattened bits (two hidden layers), the non-attention contrast.

    **Arguments:** `T`, `hidden` (the hidden layers' width), `key`.
    """

    mlp: eqx.nn.MLP

    def __init__(self, T: int, hidden: int = 32, *, key: PRNGKeyArray):
        self.mlp = eqx.nn.MLP(T, "scalar", hidden, depth=2, activation=jax.nn.relu, key=key)

    def logits(self, x: Float[Array, "samples T"]) -> Float[Array, " samples"]:
        """The logits of P(y = 1) for a batch of inputs of T bits."""
        return jax.vmap(self)(x)

    def __call__(self, x: Float[Array, " T"]) -> Float[Array, ""]:
        """The logit of P(y = 1) for one input of T bits."""
        return self.mlp(2.0 * x - 1.0)


class OneLayerTransformer(eqx.Module):
    """The paper's learner: a one-layer pre-layer-norm Transformer read out from a learned [CLS] token.

    Tokens: [CLS] (a learned embedding c) and e_l = b[x_l] + P_l for the T bits (a bit embedding plus a
    learned positional embedding). One layer: z = c + W_O MultiHeadAttention(LN_1 of the [CLS] row against
    LN_1 of all T + 1 tokens), then z + MLP(LN_2(z)) (GELU), a final layer norm and a linear read-out to one
    logit. Only the [CLS] output is read, so only the [CLS] row of the attention is computed: a token's key
    and value depend only on its bit and its position, so the 2T keys and values (`token_keys_values`) are
    shared by every sample, and a sample costs O(T heads) for its scores and O(T width) for its attended
    values. Weights and embeddings start from N(0, 0.02^2), biases at 0, layer norms at the identity.

    **Arguments:** `T` (input length), `width` (model width, 64), `heads` (16; must divide `width`),
    `hidden` (the MLP's width, 64), `key` (a JAX PRNG key).
    """

    bits: Float[Array, "2 width"]
    positions: Float[Array, "T width"]
    cls: Float[Array, " width"]
    norm_attention: eqx.nn.LayerNorm
    w_query: eqx.nn.Linear
    w_key: eqx.nn.Linear
    w_value: eqx.nn.Linear
    w_output: eqx.nn.Linear
    norm_mlp: eqx.nn.LayerNorm
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear
    norm_final: eqx.nn.LayerNorm
    readout: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, T: int, width: int = 64, heads: int = 16, hidden: int = 64, *, key: PRNGKeyArray):
        if width % heads:
            raise InvalidInput(f"OneLayerTransformer: heads = {heads} must divide width = {width}")
        keys = iter(jax.random.split(key, 10))

        def normal(shape, key=None):
            return INIT_SCALE * jax.random.normal(next(keys) if key is None else key, shape)

        def linear(n_in, n_out):
            key = next(keys)
            layer = eqx.nn.Linear(n_in, n_out, key=key)
            return eqx.tree_at(lambda m: (m.weight, m.bias), layer, (normal((n_out, n_in), key), jnp.zeros(n_out)))

        self.bits, self.positions, self.cls = normal((2, width)), normal((T, width)), normal((width,))
        self.w_query, self.w_key, self.w_value, self.w_output = (linear(width, width) for _ in range(4))
        self.mlp_in, self.mlp_out, self.readout = linear(width, hidden), linear(hidden, width), linear(width, 1)
        self.norm_attention, self.norm_mlp, self.norm_final = (eqx.nn.LayerNorm(width) for _ in range(3))
        self.heads = heads

    def _split(self, v: Float[Array, "... width"]) -> Float[Array, "... heads head_width"]:
        return v.reshape(*v.shape[:-1], self.heads, -1)

    def token_keys_values(self):
        """The keys and values of every (bit, position) token, and of [CLS], split into heads.

        **Returns:** (keys, values) of shape (2, T, heads, head_width) (index 0: bit 0, 1: bit 1), and
        (cls_key, cls_value, cls_query) of shape (heads, head_width).
        """
        tokens = jax.vmap(jax.vmap(self.norm_attention))(self.bits[:, None, :] + self.positions[None])
        cls = self.norm_attention(self.cls)
        project = jax.vmap(jax.vmap(lambda layer, t: layer(t), (None, 0)), (None, 0))
        keys, values = self._split(project(self.w_key, tokens)), self._split(project(self.w_value, tokens))
        return (keys, values), (
            self._split(self.w_key(cls)),
            self._split(self.w_value(cls)),
            self._split(self.w_query(cls)),
        )

    def scores(self, x: Float[Array, " T"]):
        """The [CLS] query's scores of [CLS] itself, (heads,), and of the T tokens, (heads, T)."""
        (keys, _), (cls_key, _, query) = self.token_keys_values()
        return self._scores(x, keys, cls_key, query)

    def _scores(self, x, keys, cls_key, query):
        on_cls, on_tokens = self._token_scores(keys, cls_key, query)
        return on_cls, on_tokens[0] + x * (on_tokens[1] - on_tokens[0])

    @staticmethod
    def _token_scores(keys, cls_key, query):
        """The scores of [CLS], (heads,), and of the bit-0 and bit-1 tokens, (2, heads, T): shared by every sample."""
        scale = 1.0 / math.sqrt(query.shape[-1])
        return jnp.sum(cls_key * query, -1) * scale, jnp.einsum("bthd,hd->bht", keys, query) * scale

    def token_scores(self) -> tuple[Float[Array, " heads"], Float[Array, "2 heads T"]]:
        """The [CLS] query's score of [CLS] itself, (heads,), and of a token of bit 0 and of bit 1 at each position,
        (2, heads, T): a sample's scores are these, picked by its bits."""
        (keys, _), (cls_key, _, query) = self.token_keys_values()
        return self._token_scores(keys, cls_key, query)

    def attention(self, x: Float[Array, " T"]) -> Float[Array, "heads T"]:
        """The [CLS] row of each head's attention over the T bit tokens (its weight on [CLS] left out)."""
        on_cls, on_tokens = self.scores(x)
        return jax.nn.softmax(jnp.concatenate([on_cls[:, None], on_tokens], axis=1), axis=1)[:, 1:]

    def logits(self, x: Float[Array, "samples T"]) -> Float[Array, " samples"]:
        """The logits of P(y = 1) for a batch of inputs of T bits.

        Each head's token weights e^{score} (scaled by the head's largest, [CLS] included) and weighted values
        depend only on the token's bit and position: their sums over the tokens are (1 - x) @ F_0 + x @ F_1, two
        matrix products per batch with the (T, heads (1 + head_width)) features of the bit-0 and bit-1 tokens.
        """
        (keys, values), (cls_key, cls_value, query) = self.token_keys_values()
        on_cls, on_tokens = self._token_scores(keys, cls_key, query)
        shift = jax.lax.stop_gradient(jnp.maximum(on_cls, jnp.max(on_tokens, axis=(0, 2))))  # (heads,)
        weights = jnp.exp(on_tokens - shift[:, None])  # (2, heads, T)
        cls_weight = jnp.exp(on_cls - shift)
        features = jnp.concatenate([weights[..., None], weights[..., None] * jnp.swapaxes(values, 1, 2)], axis=-1)
        features = jnp.swapaxes(features, 1, 2).reshape(2, x.shape[-1], -1)  # (2, T, heads (1 + head_width))
        sums = ((1 - x) @ features[0] + x @ features[1]).reshape(*x.shape[:-1], self.heads, -1)
        normaliser = cls_weight + sums[..., 0]
        attended = (cls_weight[:, None] * cls_value + sums[..., 1:]) / normaliser[..., None]
        return jax.vmap(self._output)(attended.reshape(*x.shape[:-1], -1))

    def _output(self, attended: Float[Array, " width"]) -> Float[Array, ""]:
        """The logit from the heads' attended values (concatenated): the residual stream, MLP, read-out."""
        z = self.cls + self.w_output(attended)
        z = z + self.mlp_out(jax.nn.gelu(self.mlp_in(self.norm_mlp(z))))
        return self.readout(self.norm_final(z))[0]

    def __call__(self, x: Float[Array, " T"]) -> Float[Array, ""]:
        """The logit of P(y = 1) for one input of T bits."""
        return self.logits(x[None])[0]
