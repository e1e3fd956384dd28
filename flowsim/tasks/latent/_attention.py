"""The estimators: softmax attention, kernel (CME) attention, Nadaraya-Watson and multi-head attention.

All act on the last two axes of keys (..., L, d) and values (..., L, d_v) and broadcast over the rest.
"""

import jax
import jax.numpy as jnp
import lineax as lx
from jaxtyping import Array, Float

from flowsim._checks import SCALE, InvalidInput, check_entries, wrong_shape

__all__ = ["gaussian_kernel", "kernel_attention", "multihead_attention", "nadaraya_watson", "softmax_attention"]


def softmax_attention(a: Float[Array, "... d"], keys: Float[Array, "... L d"], values: Float[Array, "... L dv"]):
    """attn_a(K, V) = sum_l softmax_l(<a, k_l>) v_l, with a = W^T q the query's parameter.

    **Arguments:** `a` (..., d), `keys` (..., L, d) with L >= 1, `values` (..., L, d_v): finite numbers.

    **Returns:** the attended value, (..., d_v).
    """
    return _softmax_attention(*_check_sequences("softmax_attention", "a", a, keys, values))


def _softmax_attention(a, keys, values):
    weights = jax.nn.softmax(jnp.einsum("...ld,...d->...l", keys, a), axis=-1)
    return jnp.einsum("...l,...lv->...v", weights, values)


_BATCHED = "(..., d), keys (..., L, d) and values (..., L, d_v)"
_ONE_SEQUENCE = "(d,), keys (L, d) and values (L, d_v)"


def _check_sequences(function: str, query_name: str, query, keys, values, batched: bool = True):
    """The query, keys and values of an estimator as arrays, if finite and of matching shapes with L >= 1 tokens
    (one sequence, query (d,), keys (L, d), values (L, d_v), unless `batched`), else InvalidInput."""
    query, keys, values = check_entries(query_name, query), check_entries("keys", keys), check_entries("values", values)
    ranks, least = (query.ndim, keys.ndim, values.ndim), (1, 2, 2)
    ranked = all(rank >= n for rank, n in zip(ranks, least, strict=True)) if batched else ranks == least
    if not ranked or query.shape[-1:] != keys.shape[-1:] or keys.shape[-2] != values.shape[-2]:
        shapes = _BATCHED if batched else _ONE_SEQUENCE
        raise InvalidInput(
            f"{function} takes {query_name} {shapes}, got shapes {query.shape}, {keys.shape} and {values.shape}"
        )
    if keys.shape[-2] < 1:
        raise wrong_shape("keys", "(..., L, d) with L >= 1 tokens", keys.shape)
    return query, keys, values


def multihead_attention(heads: Float[Array, "H d"], keys: Float[Array, "... L d"], values: Float[Array, "... L dv"]):
    """One softmax attention per row of `heads` (H, d), H >= 1: (..., H, d_v)."""
    heads, keys, values = _check_sequences("multihead_attention", "heads", heads, keys, values)
    if heads.ndim != 2 or heads.shape[0] < 1:
        raise wrong_shape("heads", "(H, d) with H >= 1", heads.shape)
    return _multihead_attention(heads, keys, values)


def _multihead_attention(heads, keys, values):
    return jax.vmap(_softmax_attention, in_axes=(0, None, None), out_axes=-2)(heads, keys, values)


def gaussian_kernel(x: Float[Array, "... d"], y: Float[Array, "... d"], bandwidth) -> Float[Array, "..."]:
    """exp(-||x - y||^2 / (2 h^2)), with h = `bandwidth` in [1e-50, 1e50], x and y finite."""
    x, y = check_entries("x", x), check_entries("y", y)
    if x.ndim < 1:
        raise wrong_shape("x", "(..., d)", x.shape)
    if y.shape[-1:] != x.shape[-1:]:
        raise wrong_shape("y", f"(..., d) with d = {x.shape[-1]}, x's last axis", y.shape)
    return _gaussian_kernel(x, y, SCALE.check("bandwidth", bandwidth))


def _gaussian_kernel(x, y, bandwidth):
    return jnp.exp(-jnp.sum((x - y) ** 2, axis=-1) / (2 * bandwidth**2))


def nadaraya_watson(query: Float[Array, "... d"], keys: Float[Array, "... L d"], values, bandwidth):
    """The Gaussian-kernel Nadaraya-Watson estimate sum_l K(q, k_l) v_l / sum_l K(q, k_l), (..., d_v), for a
    `bandwidth` h in [1e-50, 1e50]; query, keys and values as in `softmax_attention`.

    On unit-norm keys it equals softmax attention with a = q / h^2: the kernel factors as
    e^{<q, k>/h^2} e^{-||q||^2 / 2h^2} e^{-||k||^2 / 2h^2}, and the last two factors cancel.
    """
    query, keys, values = _check_sequences("nadaraya_watson", "query", query, keys, values)
    bandwidth = SCALE.check("bandwidth", bandwidth)
    log_kernel = -jnp.sum((query[..., None, :] - keys) ** 2, axis=-1) / (2 * bandwidth**2)
    return jnp.einsum("...l,...lv->...v", jax.nn.softmax(log_kernel, axis=-1), values)


def kernel_attention(
    query: Float[Array, " d"], keys: Float[Array, "L d"], values: Float[Array, "L dv"], bandwidth, ridge
):
    """Kernel (conditional-mean-embedding) attention V^T (G + L lam I)^{-1} k(K, q), with G the Gaussian Gram matrix
    of the keys and lam = `ridge`: the kernel ridge regression of the values on the keys, evaluated at q.

    One sequence (query (d,), keys (L, d) with L >= 1, values (L, d_v), finite); `jax.vmap` it over a batch.
    `bandwidth` and `ridge` in [1e-50, 1e50]: the system is then symmetric positive definite (Cholesky, by lineax).

    **Returns:** (d_v,).
    """
    query, keys, values = _check_sequences("kernel_attention", "query", query, keys, values, batched=False)
    bandwidth, ridge = SCALE.check("bandwidth", bandwidth), SCALE.check("ridge", ridge)
    L = keys.shape[0]
    gram = _gaussian_kernel(keys[:, None, :], keys[None, :, :], bandwidth) + L * ridge * jnp.eye(L)
    operator = lx.MatrixLinearOperator(gram, lx.positive_semidefinite_tag)
    coefficients = lx.linear_solve(operator, _gaussian_kernel(keys, query, bandwidth), lx.Cholesky()).value
    return values.T @ coefficients
