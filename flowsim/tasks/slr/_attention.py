"""The attention weight maps w: R^L -> R^L of single-location regression (docs/science.md section 7).

T(X) = sum_l w_l(lam chi) z_l with chi_l = <X_l, k>, z_l = <X_l, v>. Each map is a per-token function f,
normalised over the tokens or not:

| map | f(x) | w_l |
|---|---|---|
| erf | erf(x) | f(x_l) |
| linear | 1 + x | f(x_l) |
| softmax | e^x | f(x_l) / sum_j f(x_j) |
| softplus | log(1 + e^x) | f(x_l) / sum_j f(x_j) |

The population risk by a rule (`flowsim.tasks.slr._maps`) needs the weights only through the
informative token's weight w_1 and the noise tokens' S1 = sum_{l>=2} w_l u_l and S2 = sum_{l>=2} w_l^2.
The noise tokens' part of those does not depend on the overlaps (their scores are the rule's points),
so it is computed once per point (`noise_statistics`) and shared by every state of a batch;
`informative_weights` completes it with the informative token's score.
"""

import jax
import jax.numpy as jnp
from jax.scipy.special import erf
from jaxtyping import Array, Float

__all__ = ["ATTENTION_MAPS", "NORMALISED", "attention_weights", "informative_weights", "noise_statistics"]

#: The weight maps of the attention layer; "erf" is the paper's (closed-form risk).
ATTENTION_MAPS = ("erf", "softmax", "linear", "softplus")
#: The maps whose weights are normalised to sum to 1 over the tokens.
NORMALISED = ("softmax", "softplus")


def _log_f(attention: str, x):
    """log f(x) of a normalised map (softmax works in the log domain: e^x overflows for large scores)."""
    return x if attention == "softmax" else jnp.log(jax.nn.softplus(x))


def _f(attention: str, x):
    """f(x) of an unnormalised map."""
    return erf(x) if attention == "erf" else 1.0 + x


def attention_weights(attention: str, scores: Float[Array, "... L"]) -> Float[Array, "... L"]:
    """The weights w(scores) of an attention map, along the last axis (the tokens).

    **Arguments:**

    - `attention`: one of `ATTENTION_MAPS`.
    - `scores`: lam <X_l, k>, shape (..., L).

    **Returns:** the weights, shape (..., L).
    """
    if attention in NORMALISED:
        return jax.nn.softmax(_log_f(attention, scores), axis=-1)
    if attention in ATTENTION_MAPS:
        return _f(attention, scores)
    raise ValueError(f"attention must be one of {ATTENTION_MAPS}, got {attention!r}")


def noise_statistics(attention: str, lam, u: Float[Array, "... n"]) -> tuple[Array, Array, Array]:
    """The noise tokens' part of the weight statistics, from their standardised scores u (scores lam u).

    **Returns:** for a normalised map, (log sum_l f_l, sum_l p_l u_l, sum_l p_l^2) with p_l = f_l / sum f;
    for the others (0, sum_l f_l u_l, sum_l f_l^2); f_l = f(lam u_l). Each of shape (...).
    """
    if attention in NORMALISED:
        log_f = _log_f(attention, lam * u)
        log_total = jax.nn.logsumexp(log_f, axis=-1)
        p = jnp.exp(log_f - log_total[..., None])
        return log_total, jnp.sum(p * u, axis=-1), jnp.sum(p * p, axis=-1)
    f = _f(attention, lam * u)
    return jnp.zeros(f.shape[:-1]), jnp.sum(f * u, axis=-1), jnp.sum(f * f, axis=-1)


def informative_weights(attention: str, score, statistics) -> tuple[Array, Array, Array]:
    """(w_1, S1, S2) from the informative token's score lam chi_1 and the noise tokens' `noise_statistics`."""
    log_total, first, second = statistics
    if attention in NORMALISED:
        # w_1 = f_1 / (f_1 + sum f) and the noise tokens share 1 - w_1 in proportions p_l.
        log_ratio = _log_f(attention, score) - log_total
        w1, rest = jax.nn.sigmoid(log_ratio), jax.nn.sigmoid(-log_ratio)
        return w1, rest * first, rest**2 * second
    return _f(attention, score), first, second
