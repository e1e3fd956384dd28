"""Several attention heads on data with several informative locations, in R^D (docs/heads.md).

The data are the SLR family's (`family_sample` with `SpikedTokens(spike, spread, locations=S)`: the targets
k*_j = e_{2j-1}, v*_j = e_{2j}); the predictor has H heads,

    f(X) = sum_h sum_l w_l(lam <x_l, k_h>) <x_l, v_h>,

w any attention map of section 7 (erf by default), applied to each sequence's own tokens (`attend_tokens`). All
f depends on is the tokens' projections on the 2H head vectors, so SGD differentiates the loss through those
projections and contracts the result with the tokens once (`heads_gradient`): the cost of a step is two products
of the batch's tokens with 2H vectors, whatever the map.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from flowsim.tasks.slr._attention import AttentionMap
from flowsim.tasks.slr._family_data import FamilyBatch, attend_tokens
from flowsim.tasks.slr._heads_state import heads_overlaps

__all__ = ["heads_gradient", "heads_loss", "heads_predict", "heads_state", "heads_targets"]


def heads_targets(locations: int, D: int) -> tuple[Float[Array, "S D"], Float[Array, "S D"]]:
    """The targets of the data seam in R^D: k*_j = e_{2j-1} and v*_j = e_{2j}, each (S, D)."""
    eye = jnp.eye(D)
    return eye[0 : 2 * locations : 2], eye[1 : 2 * locations : 2]


def heads_state(K: Float[Array, "... H D"], V: Float[Array, "... H D"], locations: int) -> Float[Array, "... n"]:
    """The heads' order parameters (`slr.HeadsProblem`'s state, `heads_layout(H, S)`'s order) of vectors K, V against
    the data seam's targets."""
    return heads_overlaps(K, V, *heads_targets(locations, K.shape[-1]))


def _from_projections(attention: AttentionMap, projections, lengths, length_values, lam, heads: int):
    """f from the tokens' projections (n, L, 2H) on (k_1, ..., k_H, v_1, ..., v_H)."""
    scores = lam * jnp.swapaxes(projections[..., :heads], -1, -2)  # (n, H, L)
    values = jnp.swapaxes(projections[..., heads:], -1, -2)
    return jnp.sum(attend_tokens(attention, scores, values, lengths, length_values), axis=-1)


def heads_predict(attention: AttentionMap, batch: FamilyBatch, K, V, lam, length_values: tuple[int, ...]):
    """f(X) = sum_h sum_l w_l(lam <x_l, k_h>) <x_l, v_h> over each sequence's own tokens.

    **Arguments:** the map; a `FamilyBatch`; K, V (H, D); lam; the length law's values.

    **Returns:** the predictions, (n,).
    """
    projections = batch.tokens @ jnp.concatenate([K, V]).T
    return _from_projections(attention, projections, batch.lengths, length_values, lam, K.shape[0])


def heads_loss(attention: AttentionMap, batch: FamilyBatch, K, V, lam, length_values: tuple[int, ...]):
    """The batch's mean of (y - f(X))^2."""
    return jnp.mean((batch.labels - heads_predict(attention, batch, K, V, lam, length_values)) ** 2)


def heads_gradient(attention: AttentionMap, batch: FamilyBatch, K, V, lam, length_values: tuple[int, ...]):
    """The gradient of `heads_loss` in K and V, each (H, D): automatic differentiation through the projections
    (n, L, 2H) only, then one contraction with the tokens (the chain rule, d loss / dW = sum dloss/dP x^T).

    The tokens may be float32 (drawn so, `family_sample(dtype=...)`): they are taken in the heads' dtype here.
    """
    heads = K.shape[0]
    W = jnp.concatenate([K, V])
    tokens = batch.tokens.astype(W.dtype)
    labels = batch.labels.astype(W.dtype)

    def loss(projections):
        prediction = _from_projections(attention, projections, batch.lengths, length_values, lam, heads)
        return jnp.mean((labels - prediction) ** 2)

    along = jax.grad(loss)(tokens @ W.T)
    gradient = jnp.einsum("nla,nld->ad", along, tokens)
    return gradient[:heads], gradient[heads:]
