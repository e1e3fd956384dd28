"""The population risk of H heads on data with S informative locations, in the order parameters (docs/heads.md).

f(X) = sum_h sum_l w_l(lam chi_h) z_lh with chi_lh = <x_l, k_h>, z_lh = <x_l, v_h>; y = sum_j <x_{J_j}, v*_j> +
eps xi. The maps are permutation-equivariant and the positions uniform, so take J_j = j: tokens 1..S informative
(token j: x = mu k*_j + c g, mu the spike, c the spread), the other L - S noise tokens x = g.

**erf (closed form).** The weights are per token, so the residual is a sum of independent per-token terms:
D_j = <x_j, v*_j> - A_j for token j and D_l = -A_l for a noise token, A_l = sum_h erf(lam chi_lh) z_lh, and
    R = eps^2 + sum_tokens Var(D_l) + (sum_tokens E[D_l])^2,
with E[D_j] = -sum_h E[erf z], E[D_j^2] = c^2 - 2 sum_h E[<x, v*_j> erf z] + sum_h E[erf^2 z^2]
+ 2 sum_{h<h'} E[erf erf z z] (noise tokens: the same without the label). Each moment is generated
(derivations/slr_heads.py, `_generated_heads`); the two-head moment of an informative token calls `erf_pair`,
a one-dimensional rule of error below 1e-13 at the authors' sizes (flowsim/tasks/slr/_erf_pair.py).

**Any map (a rule over the scores).** Given the L x H standardised scores u (token l's scores
chi_l = mu_l kappa_{., j(l)} + c_l A u_l, A the Cholesky factor of the keys' Gram matrix), the values and labels
are Gaussian with means linear in u and covariances fixed by the order parameters (Gaussian conditioning on the
keys), so E[(y - f)^2 | u] is a quadratic in the weights; its mean over u ~ N(0, I_{LH}) is taken by a fixed rule
(`flowsim.quadrature`, default `default_rule(L H)`). A normalised map (softmax) normalises each head over the
L tokens. The conditioning inverts the keys' Gram matrix: the rule needs linearly independent keys (|<k_h, k_h'>|
< 1); the erf closed form does not.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
from jaxtyping import Array, Float

from flowsim.quadrature import GaussianRule
from flowsim.tasks.slr import _generated_heads as generated
from flowsim.tasks.slr._attention import AttentionMap
from flowsim.tasks.slr._heads_state import HeadsLayout

__all__ = ["closed_form_hessian", "closed_form_risk", "rule_risk"]


def _terms(layout: HeadsLayout, lam, mu, c):
    """The generated moments the erf risk is made of, each as (function of its overlaps, their indices in the
    state): informative tokens' mean, label, square, pair; noise tokens' mean, square, pair. The index arrays
    have the shape of the moments (H, S), (pairs, S), (H,), (pairs,), with the arguments on a last axis."""
    rho = np.broadcast_to(layout.rho[:, None], layout.kappa.shape)
    first, second = layout.pair_first, layout.pair_second
    pairs = np.stack([layout.kk, layout.kv, layout.vk, layout.vv], axis=-1)  # (pairs, 4)
    informative_pair = np.concatenate(
        [
            np.stack([layout.kappa[first], layout.theta[first], rho[first]], axis=-1),
            np.stack([layout.kappa[second], layout.theta[second], rho[second]], axis=-1),
            np.broadcast_to(pairs[:, None, :], (len(layout.pairs), layout.locations, 4)),
        ],
        axis=-1,
    )
    noise_pair = np.concatenate([layout.rho[first, None], layout.rho[second, None], pairs], axis=-1)
    return {
        "mean": (lambda x: generated.informative_mean(*x, lam, mu, c), np.stack([layout.kappa, layout.theta, rho], -1)),
        "label": (
            lambda x: generated.informative_label(*x, lam, mu, c),
            np.stack([layout.kappa, layout.nu, layout.theta, layout.eta, rho], -1),
        ),
        "square": (
            lambda x: generated.informative_square(*x, lam, mu, c),
            np.stack([layout.kappa, layout.theta, rho], -1),
        ),
        "pair": (lambda x: generated.informative_pair(*x, lam, mu, c), informative_pair),
        "noise mean": (lambda x: generated.noise_mean(*x, lam), layout.rho[:, None]),
        "noise square": (lambda x: generated.noise_square(*x, lam), layout.rho[:, None]),
        "noise pair": (lambda x: generated.noise_pair(*x, lam), noise_pair),
    }


def _evaluate(function, index, y):
    """The moments at state y: `function` of the arguments y[index] (on index's last axis)."""
    return function(jnp.moveaxis(y[index], -1, 0))


def _assemble(moments: dict, c, eps, noise_tokens):
    """The risk from the moments (module docstring), and the token means it is quadratic in."""
    informative_mean = moments["mean"].sum(0)  # (S,): minus E[D_j]
    noise_mean = moments["noise mean"].sum()
    second = c**2 - 2 * moments["label"].sum(0) + moments["square"].sum(0) + 2 * moments["pair"].sum(0)
    noise_second = moments["noise square"].sum() + 2 * moments["noise pair"].sum()
    variance = jnp.sum(second - informative_mean**2) + noise_tokens * (noise_second - noise_mean**2)
    return eps**2 + variance + (jnp.sum(informative_mean) + noise_tokens * noise_mean) ** 2


def closed_form_risk(layout: HeadsLayout, y: Float[Array, " n"], lam, mu, c, eps, L: int) -> Float[Array, ""]:
    """The erf risk at one state y (module docstring): traceable, unchecked.

    **Arguments:** `layout`; `y` (n,); `lam` the inverse temperature; `mu`, `c` the informative tokens' spike and
    spread; `eps` the label noise; `L` the number of tokens (>= S).
    """
    terms = _terms(layout, lam, mu, c)
    moments = {name: _evaluate(function, index, y) for name, (function, index) in terms.items()}
    return _assemble(moments, c, eps, L - layout.locations)


def closed_form_hessian(layout: HeadsLayout, y: Float[Array, " n"], lam, mu, c, eps, L: int):
    """The erf risk's gradient and Hessian in the state at one state y, by the chain rule through the moments.

    Each moment depends on at most ten of the state's coordinates (a pair of heads at one location), and the risk
    is linear in the moments but for the token means, in which it is quadratic: so the Hessian is the moments' own
    small Hessians (each over its arguments, scattered into place) weighted by the risk's slopes, plus the
    token means' gradients' outer products weighted by the quadratic's coefficients: 6.9 us a state against 14 for
    `jax.hessian` of the whole risk (1 000 states, H = S = 2; the Jacobian a Rosenbrock solver takes every step).

    **Returns:** (gradient (n,), Hessian (n, n)).
    """
    n, S = layout.dimension, layout.locations
    noise_tokens = L - S
    terms = _terms(layout, lam, mu, c)
    values, gradients, hessians = {}, {}, {}
    for name, (function, index) in terms.items():
        flat = index.reshape(-1, index.shape[-1])

        def slope(x, function=function):
            value, gradient = jax.value_and_grad(function)(x)
            return gradient, (value, gradient)

        # One trace of each moment for its value, gradient and Hessian (forward over reverse).
        hessian, (value, gradient) = jax.vmap(jax.jacfwd(slope, has_aux=True))(y[flat])
        values[name] = value.reshape(index.shape[:-1])
        gradients[name] = gradient.reshape(index.shape)
        hessians[name] = hessian.reshape(*index.shape, index.shape[-1])
    informative_mean, noise_mean = values["mean"].sum(0), values["noise mean"].sum()
    total = jnp.sum(informative_mean) + noise_tokens * noise_mean
    # The risk's slopes in each moment: the token means' from the quadratic, the rest constants.
    slopes = {
        "mean": jnp.broadcast_to(2 * (total - informative_mean), values["mean"].shape),
        "noise mean": jnp.broadcast_to(2 * noise_tokens * (total - noise_mean), values["noise mean"].shape),
        "label": jnp.full(values["label"].shape, -2.0),
        "square": jnp.ones(values["square"].shape),
        "pair": jnp.full(values["pair"].shape, 2.0),
        "noise square": jnp.full(values["noise square"].shape, float(noise_tokens)),
        "noise pair": jnp.full(values["noise pair"].shape, 2.0 * noise_tokens),
    }
    gradient, hessian = jnp.zeros(n), jnp.zeros((n, n))
    for name, (_, index) in terms.items():
        weight = slopes[name][..., None]
        gradient = gradient.at[index].add(weight * gradients[name])
        hessian = hessian.at[index[..., :, None], index[..., None, :]].add(weight[..., None] * hessians[name])
    # The quadratic in the token means (mean_j for each location, the noise tokens' mean): its second derivatives
    # -2 delta + 2 between locations, 2 (L - S) with the noise mean, -2 (L - S) + 2 (L - S)^2 for the noise mean.
    means = jnp.zeros((S + 1, n))
    means = means.at[jnp.arange(S)[None, :, None], terms["mean"][1]].add(gradients["mean"])
    means = means.at[S, terms["noise mean"][1]].add(gradients["noise mean"])
    counts = np.concatenate([np.ones(S), [noise_tokens]])
    curvature = 2 * np.outer(counts, counts) - 2 * np.diag(counts)
    hessian = hessian + means.T @ curvature @ means
    return gradient, hessian


def _conditioning(layout: HeadsLayout, y):
    """The keys' Cholesky factor A (H, H), the values' gain G = C_vk A^-T (E[value part | u] = G u), their
    conditional covariance C_vv - G G^T, and per location the label's b_j = A^-1 eta_j (E[q_j | u] = b_j . u)
    and Cov(q_j, values | u) = nu_j - G b_j."""
    H = layout.heads
    first, second = layout.pair_first, layout.pair_second
    keys, cross, values = jnp.eye(H), jnp.diag(y[layout.rho]), jnp.eye(H)
    if layout.pairs:
        keys = keys.at[first, second].set(y[layout.kk]).at[second, first].set(y[layout.kk])
        values = values.at[first, second].set(y[layout.vv]).at[second, first].set(y[layout.vv])
        # cross[h, h'] = <v_h, k_h'>: vk for h < h', kv (= <v_h', k_h>) transposed.
        cross = cross.at[first, second].set(y[layout.vk]).at[second, first].set(y[layout.kv])
    factor = jnp.linalg.cholesky(keys)
    gain = jax.scipy.linalg.solve_triangular(factor, cross.T, lower=True).T
    label_gain = jax.scipy.linalg.solve_triangular(factor, y[layout.eta], lower=True)  # (H, S)
    label_values = y[layout.nu] - gain @ label_gain  # (H, S): Cov(q_j, value part of head h | u)
    return factor, gain, values - gain @ gain.T, label_gain, label_values


def _weights(attention: AttentionMap, scores):
    """The map's weights over the last axis. A map normalised over the tokens by `jax.nn.softmax` of log f rather than
    `AttentionMap.weights`, whose overflow guard finds the largest term by an equality test: compiled with the
    solves' options (`flowsim._compile`), XLA's fusion rounded one side differently, the test failed, and the
    gradient lost that term (the field off by 2e-3 at H = S = 2, measured). softmax's shift by the stop-gradient
    maximum cannot overflow but where rounding in lam * score exceeds 700, i.e. scores beyond ~1e18."""
    if attention.normalised:
        return jax.nn.softmax(attention.log_per_token(scores), axis=-1)
    return attention.weights(scores)


def rule_risk(
    layout: HeadsLayout, y: Float[Array, " n"], attention: AttentionMap, rule: GaussianRule, lam, mu, c, eps, L: int
) -> Float[Array, ""]:
    """The risk at one state y by a rule over the L x H standardised scores (module docstring): traceable.

    **Arguments:** as `closed_form_risk`; `attention` the map; `rule` a `GaussianRule` of dimension L H.
    """
    H, S = layout.heads, layout.locations
    factor, gain, value_covariance, label_gain, label_values = _conditioning(layout, y)
    u = rule.points.reshape(-1, L, H)
    informative = jnp.arange(L) < S
    spike = jnp.where(informative, mu, 0.0)[:, None]  # (L, 1)
    scale = jnp.where(informative, c, 1.0)[:, None]
    location = jnp.minimum(jnp.arange(L), S - 1)  # token j < S is location j's; noise tokens take no target
    kappa, theta = y[layout.kappa].T[location], y[layout.theta].T[location]  # (L, H)
    scores = spike * kappa + scale * (u @ factor.T)  # (P, L, H)
    weights = jnp.swapaxes(_weights(attention, lam * jnp.swapaxes(scores, -1, -2)), -1, -2)  # over tokens
    value_means = spike * theta + scale * (u @ gain.T)
    label_mean = c * jnp.einsum("pjh,hj->p", u[:, :S], label_gain)
    residual = label_mean - jnp.sum(weights * value_means, axis=(-1, -2))
    value_variance = jnp.einsum("plh,hg,plg->p", scale**2 * weights, value_covariance, weights)
    label_variance = c**2 * jnp.sum(1 - jnp.sum(label_gain**2, axis=0))
    label_covariance = c**2 * jnp.einsum("pjh,hj->p", weights[:, :S], label_values)
    conditional = residual**2 + eps**2 + label_variance + value_variance - 2 * label_covariance
    return rule.weights @ conditional
