"""Samples of the SLR family's data models in R^D, and the predictor on them (docs/follow-up-models.md).

Sequences of variable length are padded to the longest length of the law, with a mask: `FamilyBatch`. The
predictor applies the attention map to each sequence's own tokens (`family_predict`, through `attend_tokens`, which
several heads share), so a normalised map normalises over them and a map normalised by the length divides by the
sequence's own L. With S informative locations (`SpikedTokens.locations`) the targets are k*_j = e_{2j-1},
v*_j = e_{2j} (j = 1, ..., S).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from flowsim._checks import as_key, check_count
from flowsim.tasks.slr._attention import AttentionMap
from flowsim.tasks.slr._family import DataModel

__all__ = ["FamilyBatch", "attend_tokens", "family_predict", "family_sample"]


class FamilyBatch(eqx.Module):
    """n sequences padded to the longest length: `tokens` (n, L_max, D), `lengths` (n,), `labels` (n,),
    `relevant`: the relevant position of each, (n,), or with S > 1 locations the S positions J_1, ..., J_S of each,
    (n, S). Padded tokens are zeros."""

    tokens: Float[Array, "n L D"]
    lengths: Int[Array, " n"]
    labels: Float[Array, " n"]
    relevant: Int[Array, " n"] | Int[Array, "n S"]

    @property
    def mask(self) -> Bool[Array, "n L"]:
        return jnp.arange(self.tokens.shape[1]) < self.lengths[:, None]


def family_sample(key: PRNGKeyArray, data: DataModel, n: int, D: int, dtype=None) -> FamilyBatch:
    """n sequences of the data model in R^D, with k* = e_1 and v* = e_2 (S locations: k*_j = e_{2j-1}, v*_j = e_{2j}).

    **Arguments:** a PRNG key (or seed); the data model; n >= 1; the dimension D >= 2 (>= 2S); `dtype`: the Gaussian
    numbers are drawn in (default None: float64; float32 halves the cost of drawing them, as SGD's batches may; the
    spike, spread and noise, float64 where traced, may promote the batch to float64).

    **Returns:** a `FamilyBatch`.
    """
    n, D = check_count("n", n, 1), check_count("D", D, max(2, 2 * data.locations))
    key_length, key_tokens, key_location, key_noise = jax.random.split(as_key(key), 4)
    lengths = data.lengths
    longest = lengths.longest
    values = jnp.asarray(lengths.values)
    length = values[jax.random.choice(key_length, len(values), (n,), p=jnp.asarray(lengths.probabilities))]
    mask = jnp.arange(longest) < length[:, None]
    tokens = jax.random.normal(key_tokens, (n, longest, D), dtype)
    if data.locations > 1:
        return _several_locations(data, tokens, length, mask, key_location, key_noise, dtype)
    if data.spiked:
        relevant = jax.random.randint(key_location, (n,), 0, length)
        spike = (data.tokens.spike * jax.nn.one_hot(relevant, longest)).astype(tokens.dtype)
        spread = jnp.where(jax.nn.one_hot(relevant, longest) > 0, data.tokens.spread, 1.0)
        tokens = tokens * spread[..., None]
        tokens = tokens.at[..., 0].add(spike)
    else:
        logits = jnp.where(mask, data.tokens.nu * tokens[..., 0], -jnp.inf)
        relevant = jax.random.categorical(key_location, logits, axis=-1)
    tokens = jnp.where(mask[..., None], tokens, 0.0)
    labels = jnp.take_along_axis(tokens[..., 1], relevant[:, None], axis=1)[:, 0]
    labels = labels + data.noise * jax.random.normal(key_noise, (n,), dtype)
    return FamilyBatch(tokens, length, labels, relevant)


def _several_locations(data: DataModel, tokens, length, mask, key_location, key_noise, dtype) -> FamilyBatch:
    """S > 1 informative positions: distinct, uniform among each sequence's own (the first S of a uniformly random
    order of them); the token at J_j is N(spike e_{2j-1}, spread^2 I), its own noise (or, with the authors' quirk
    `shared_noise`, J_1's); y = sum_j x_{J_j, 2j} + noise."""
    n, longest, _ = tokens.shape
    S = data.locations
    order = jnp.argsort(jnp.where(mask, jax.random.uniform(key_location, (n, longest)), 2.0), axis=1)
    relevant = order[:, :S]
    at = jax.nn.one_hot(relevant, longest, dtype=tokens.dtype)  # (n, S, L)
    informative = jnp.sum(at, axis=1) > 0
    if data.tokens.shared_noise:
        first = jnp.take_along_axis(tokens, relevant[:, :1, None], axis=1)  # (n, 1, D): J_1's noise
        tokens = jnp.where(informative[..., None], first, tokens)
    tokens = tokens * jnp.where(informative, data.tokens.spread, 1.0)[..., None]
    tokens = tokens.at[..., 0 : 2 * S : 2].add(data.tokens.spike * jnp.swapaxes(at, 1, 2))
    tokens = jnp.where(mask[..., None], tokens, 0.0)
    read = jnp.take_along_axis(tokens[..., 1 : 2 * S : 2], relevant[:, None, :], axis=1)[:, 0]  # (n, S)
    labels = jnp.sum(read, axis=-1) + data.noise * jax.random.normal(key_noise, (n,), dtype)
    return FamilyBatch(tokens, length, labels, relevant)


def attend_tokens(attention: AttentionMap, scores, values, lengths, length_values: tuple[int, ...]):
    """sum_l w_l(scores) values_l over each sequence's own tokens (the last axis), for any leading axes.

    **Arguments:** the map; `scores`, `values` (n, ..., L_max); each sequence's length (n,); the length law's values
    (each length's weights are computed on the first L tokens, and each sequence takes its own).

    **Returns:** shape (n, ...).
    """
    own = jnp.reshape(lengths, lengths.shape + (1,) * (scores.ndim - 2))
    prediction = jnp.zeros(scores.shape[:-1], scores.dtype)
    for L in length_values:
        at_length = jnp.sum(attention.weights(scores[..., :L]) * values[..., :L], axis=-1)
        prediction = jnp.where(own == L, at_length, prediction)
    return prediction


def family_predict(attention: AttentionMap, batch: FamilyBatch, k, v, lengths: tuple[int, ...]) -> Float[Array, " n"]:
    """f(X) = sum_l w_l(<x_l, k>) <x_l, v> over each sequence's own tokens.

    **Arguments:** the map; a batch; k, v (D,); the length law's values (each length's weights are computed on
    the first L tokens, and each sequence takes its own).

    **Returns:** the predictions, shape (n,).
    """
    return attend_tokens(attention, batch.tokens @ k, batch.tokens @ v, batch.lengths, lengths)
