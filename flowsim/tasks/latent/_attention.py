"""The estimators: softmax attention, kernel (CME) attention, Nadaraya-Watson and multi-head attention.

All act on the last two axes of keys (..., L, d) and values (..., L, d_v) and broadcast over the rest.
"""

import jax
import jax.numpy as jnp
import lineax as lx
from jaxtyping import Array, Float

from flowsim._checks import InvalidInput

__all__ = ["gaussian_kernel", "kernel_attention", "multihead_attention", "nadaraya_watson", "softmax_attention"]


def softmax_attention(a: Float[Array, "... d"], keys: Float[Array, "... L d"], values: Float[Array, "... L dv"]):
    """attn_a(K, V) = sum_l softmax_l(<a, k_l>) v_l, with a = W^T q the query's parameter.

    **Returns:** the attended value, (..., d_v).
    """
    a, keys, values = jnp.asarray(a), jnp.asarray(keys), jnp.asarray(values)
    if keys.ndim < 2 or values.ndim < 2 or a.shape[-1:] != keys.shape[-1:] or keys.shape[-2] != values.shape[-2]:
        raise InvalidInput(
            f"softmax_attention takes a (..., d), keys (..., L, d) and values (..., L, d_v), got shapes {a.shape}, "
            f"{keys.shape} and {values.shape}"
        )
    weights = jax.nn.softmax(jnp.einsum("...ld,...d->...l", keys, a), axis=-1)
    return jnp.einsum("...l,...lv->...v", weights, values)


def multihead_attention(heads: Float[Array, "H d"], keys: Float[Array, "... L d"], values: Float[Array, "... L dv"]):
    """One softmax attention per row of `heads`: (..., H, d_v)."""
    return jax.vmap(softmax_attention, in_axes=(0, None, None), out_axes=-2)(heads, keys, values)


def gaussian_kernel(x: Float[Array, "... d"], y: Float[Array, "... d"], bandwidth) -> Float[Array, "..."]:
    """exp(-||x - y||^2 / (2 h^2))."""
    return jnp.exp(-jnp.sum((x - y) ** 2, axis=-1) / (2 * bandwidth**2))


def nadaraya_watson(query: Float[Array, "... d"], keys: Float[Array, "... L d"], values, bandwidth):
    """The Gaussian-kernel Nadaraya-Watson estimate sum_l K(q, k_l) v_l / sum_l K(q, k_l), (..., d_v).

    On unit-norm keys it equals softmax attention with a = q / h^2: the kernel factors as
    e^{<q, k>/h^2} e^{-||q||^2 / 2h^2} e^{-||k||^2 / 2h^2}, and the last two factors cancel.
    """
    log_kernel = -jnp.sum((query[..., None, :] - keys) ** 2, axis=-1) / (2 * bandwidth**2)
    return jnp.einsum("...l,...lv->...v", jax.nn.softmax(log_kernel, axis=-1), values)


def kernel_attention(
    query: Float[Array, " d"], keys: Float[Array, "L d"], values: Float[Array, "L dv"], bandwidth, ridge
):
    """Kernel (conditional-mean-embedding) attention V^T (G + L lam I)^{-1} k(K, q), with G the Gaussian Gram matrix
    of the keys and lam = `ridge`: the kernel ridge regression of the values on the keys, evaluated at q.

    One sequence; `jax.vmap` it over a batch. The system is symmetric positive definite (Cholesky, by lineax).

    **Returns:** (d_v,).
    """
    L = keys.shape[0]
    gram = gaussian_kernel(keys[:, None, :], keys[None, :, :], bandwidth) + L * ridge * jnp.eye(L)
    operator = lx.MatrixLinearOperator(gram, lx.positive_semidefinite_tag)
    coefficients = lx.linear_solve(operator, gaussian_kernel(keys, query, bandwidth), lx.Cholesky()).value
    return values.T @ coefficients
