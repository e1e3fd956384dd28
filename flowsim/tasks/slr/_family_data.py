"""Samples of the SLR family's data models in R^D, and the predictor on them (docs/follow-up-models.md).

Sequences of variable length are padded to the longest length of the law, with a mask: `FamilyBatch`. The
predictor applies the attention map to each sequence's own tokens (`family_predict`), so a normalised map
normalises over them and a map normalised by the length divides by the sequence's own L.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from flowsim._checks import as_key, check_count
from flowsim.tasks.slr._attention import AttentionMap
from flowsim.tasks.slr._family import DataModel

__all__ = ["FamilyBatch", "family_predict", "family_sample"]


class FamilyBatch(eqx.Module):
    """n sequences padded to the longest length: `tokens` (n, L_max, D), `lengths` (n,), `labels` (n,),
    `relevant` (n,): the relevant position of each. Padded tokens are zeros."""

    tokens: Float[Array, "n L D"]
    lengths: Int[Array, " n"]
    labels: Float[Array, " n"]
    relevant: Int[Array, " n"]

    @property
    def mask(self) -> Bool[Array, "n L"]:
        return jnp.arange(self.tokens.shape[1]) < self.lengths[:, None]


def family_sample(key: PRNGKeyArray, data: DataModel, n: int, D: int) -> FamilyBatch:
    """n sequences of the data model in R^D, with k* = e_1 and v* = e_2.

    **Arguments:** a PRNG key (or seed); the data model; n >= 1; the dimension D >= 2.

    **Returns:** a `FamilyBatch`.
    """
    n, D = check_count("n", n, 1), check_count("D", D, 2)
    key_length, key_tokens, key_location, key_noise = jax.random.split(as_key(key), 4)
    lengths = data.lengths
    longest = lengths.longest
    values = jnp.asarray(lengths.values)
    length = values[jax.random.choice(key_length, len(values), (n,), p=jnp.asarray(lengths.probabilities))]
    mask = jnp.arange(longest) < length[:, None]
    tokens = jax.random.normal(key_tokens, (n, longest, D))
    if data.spiked:
        relevant = jax.random.randint(key_location, (n,), 0, length)
        spike = data.tokens.spike * jax.nn.one_hot(relevant, longest)
        spread = jnp.where(jax.nn.one_hot(relevant, longest) > 0, data.tokens.spread, 1.0)
        tokens = tokens * spread[..., None]
        tokens = tokens.at[..., 0].add(spike)
    else:
        logits = jnp.where(mask, data.tokens.nu * tokens[..., 0], -jnp.inf)
        relevant = jax.random.categorical(key_location, logits, axis=-1)
    tokens = jnp.where(mask[..., None], tokens, 0.0)
    labels = jnp.take_along_axis(tokens[..., 1], relevant[:, None], axis=1)[:, 0]
    labels = labels + data.noise * jax.random.normal(key_noise, (n,))
    return FamilyBatch(tokens, length, labels, relevant)


def family_predict(attention: AttentionMap, batch: FamilyBatch, k, v, lengths: tuple[int, ...]) -> Float[Array, " n"]:
    """f(X) = sum_l w_l(<x_l, k>) <x_l, v> over each sequence's own tokens.

    **Arguments:** the map; a batch; k, v (D,); the length law's values (each length's weights are computed on
    the first L tokens, and each sequence takes its own).

    **Returns:** the predictions, shape (n,).
    """
    scores = batch.tokens @ k
    values = batch.tokens @ v
    prediction = jnp.zeros(batch.lengths.shape, scores.dtype)
    for L in lengths:
        at_length = jnp.sum(attention.weights(scores[:, :L]) * values[:, :L], axis=-1)
        prediction = jnp.where(batch.lengths == L, at_length, prediction)
    return prediction
