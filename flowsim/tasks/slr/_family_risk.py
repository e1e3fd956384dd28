"""The population risk of the SLR family in the seven order parameters, by a rule over each token's coordinates.

The seven are (a, b, c, e, Q_k, Q_v, Q_kv) = (<k,k*>, <k,v*>, <v,k*>, <v,v*>, |k|^2, |v|^2, <k,v>). Given each
token's coordinates (spiked tokens: its standardised score u; max-SLR: p = <x, k*> and h, the part of its score
off k*), the tokens' q = <x, v*> and z = <x, v> are independent Gaussians whose means, variances and covariance
are generated (derivations/slr_family.py). With the weights w = w(s) of the scores and the location's law pi
(spiked: the first token; max-SLR: softmax(nu p)), the risk given the coordinates is

    Delta^2 + sum_l pi_l (Var q_l - 2 w_l Cov(q_l, z_l) + (E q_l - M)^2) + sum_l w_l^2 Var z_l,  M = sum_l w_l E z_l,

and the population risk is its mean over the coordinates (a rule per length, `flowsim.quadrature`), averaged
over the length law. The relevant position is the first token in spiked data: the predictor is symmetric under
a permutation of the tokens, so every position gives the same risk.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from flowsim._checks import InvalidInput
from flowsim.quadrature import GaussianRule, default_rule, gauss_hermite, product
from flowsim.tasks.slr import _generated_family as generated
from flowsim.tasks.slr._attention import AttentionMap
from flowsim.tasks.slr._family import DataModel

__all__ = [
    "SEVEN",
    "bayes_risk",
    "bayes_rules",
    "check_rules",
    "coordinates",
    "default_rules",
    "family_risk",
    "location_law",
]

#: The seven order parameters, in the order of the state.
SEVEN = ("a", "b", "c", "e", "Q_k", "Q_v", "Q_kv")


def coordinates(data: DataModel, L: int) -> int:
    """The number of standard normals a rule integrates over at length L: L (spiked tokens) or 2L (max-SLR)."""
    return L if data.spiked else 2 * L


def default_rules(data: DataModel) -> tuple[GaussianRule, ...]:
    """One rule per length of the law: `flowsim.quadrature.default_rule` of the coordinates' dimension."""
    return tuple(default_rule(coordinates(data, L)) for L in data.lengths.values)


def bayes_rules(data: DataModel, order: int = 48) -> tuple[GaussianRule, ...]:
    """Rules for `bayes_risk`, whose integrand depends on p alone: Gauss-Hermite of `order` in each p (one point
    in each h), at most about 1e5 points (order lowered for long sequences)."""
    rules = []
    for L in data.lengths.values:
        per = max(2, min(order, int(1e5 ** (1 / L))))
        rule = gauss_hermite(L, per)
        rules.append(rule if data.spiked else product(rule, gauss_hermite(L, 1)))
    return tuple(rules)


def check_rules(data: DataModel, rules) -> tuple[GaussianRule, ...]:
    """`rules` (one `GaussianRule` per length, of that length's dimension), or the defaults for None."""
    if rules is None:
        return default_rules(data)
    rules = tuple(rules)
    if len(rules) != len(data.lengths.values):
        raise InvalidInput(f"rules must give one rule per length {data.lengths.values}, got {len(rules)}")
    for L, rule in zip(data.lengths.values, rules, strict=True):
        if not isinstance(rule, GaussianRule) or rule.dimension != coordinates(data, L):
            raise InvalidInput(
                f"rules: the rule for L = {L} must be a GaussianRule of dimension {coordinates(data, L)} "
                f"({'one score per token' if data.spiked else 'p and h per token'}), got {rule!r}"
            )
    return rules


def _positive_root(x):
    """(sqrt(x) where x > 0 else 1, whether x > 0): a root safe to divide by, and differentiable where it is used."""
    positive = x > 0
    return jnp.sqrt(jnp.where(positive, x, 1.0)), positive


def token_moments(data: DataModel, seven, point, L: int) -> Float[Array, "L 6"]:
    """(s, E q, E z, Var q, Var z, Cov(q, z)) of each token given the rule's point (its coordinates).

    A zero |k| (spiked) or a k along k* (max-SLR, sigma = 0) leaves a score with no part to condition on: the
    conditional law is then the limit (the numerators vanish with it, the Gram matrix being PSD), computed with a
    unit divisor and the score's vanishing part set to zero.
    """
    a, b, c, e, q_k, q_v, q_kv = seven
    if data.spiked:
        root, positive = _positive_root(q_k)
        q_k_safe = jnp.where(positive, q_k, 1.0)
        spike = jnp.zeros(L).at[0].set(data.tokens.spike)
        spread = jnp.ones(L).at[0].set(data.tokens.spread)
        moments = generated.spiked_token(point, a, b, c, e, q_k_safe, q_v, q_kv, spike, spread)
        score = spike * a + jnp.where(positive, root, 0.0) * spread * point
    else:
        p, h = point[:L], point[L:]
        sigma, positive = _positive_root(q_k - a**2)
        moments = generated.max_token(p, h, a, b, c, e, q_k, q_v, q_kv, sigma)
        score = a * p + jnp.where(positive, sigma, 0.0) * h
    return moments.at[:, 0].set(score)


def location_law(data: DataModel, point, L: int) -> Float[Array, " L"]:
    """P(relevant position = l | the coordinates): the first token (spiked), softmax(nu p) (max-SLR)."""
    if data.spiked:
        return jnp.zeros(L).at[0].set(1.0)
    return jax.nn.softmax(data.tokens.nu * point[:L])


def conditional_risk(moments, weights, law, noise) -> Float[Array, ""]:
    """E[(y - f)^2 | coordinates] from the tokens' moments (L, 6), the weights (L,) and the location's law (L,)."""
    _, mean_q, mean_z, var_q, var_z, cov = jnp.moveaxis(moments, -1, 0)
    prediction = jnp.sum(weights * mean_z)
    miss = var_q - 2 * weights * cov + (mean_q - prediction) ** 2
    return noise**2 + jnp.sum(law * miss) + jnp.sum(weights**2 * var_z)


def _risk_at_length(data, attention: AttentionMap, seven, rule: GaussianRule, L: int):
    def at(point):
        moments = token_moments(data, seven, point, L)
        return conditional_risk(moments, attention.weights(moments[:, 0]), location_law(data, point, L), data.noise)

    return rule.expectation(at)


def family_risk(data: DataModel, attention: AttentionMap, seven: Float[Array, "7"], rules) -> Float[Array, ""]:
    """The population risk E[(y - f(X))^2] at one point of the seven (traceable, unchecked).

    **Arguments:** the data model; the attention map; the seven (a, b, c, e, Q_k, Q_v, Q_kv); one rule per length
    of the data's length law (`check_rules`).

    **Returns:** the risk, a scalar: sum over L of P(L) times the rule's mean of the conditional risk.
    """
    lengths = data.lengths
    return sum(
        probability * _risk_at_length(data, attention, seven, rule, L)
        for L, probability, rule in zip(lengths.values, lengths.probabilities, rules, strict=True)
    )


def bayes_risk(data: DataModel, rules=None) -> Float[Array, ""]:
    """The Bayes risk Delta^2 + E[Var(<x_j, v*> | X)] = Delta^2 + 1 - E[sum_l pi_l^2], pi the location's posterior.

    Given X every q_l = <x_l, v*> is known and N(0, 1) independent of the location, so the posterior variance
    of q_j is sum_l pi_l q_l^2 - (sum_l pi_l q_l)^2, of mean 1 - E[sum_l pi_l^2]. The posterior: softmax(spike p)
    for spiked tokens of spread 1 (p_l = <x_l, k*>, the relevant one's N(spike, 1)), softmax(nu p) for max-SLR.

    **Arguments:** the data model (spiked tokens need spread 1: otherwise the posterior depends on |x_l|, not on
    order parameters); `rules` (default `bayes_rules(data)`: product Gauss-Hermite rules in p).

    **Returns:** the Bayes risk.
    """
    if data.spiked and data.tokens.spread != 1:
        raise InvalidInput(
            f"bayes_risk: spiked tokens need spread 1 (got {float(data.tokens.spread):g}); with another spread the "
            "location's posterior depends on each token's norm (Marion et al.'s data: slr.bayes_risk)"
        )
    rules = bayes_rules(data) if rules is None else check_rules(data, rules)
    total = data.noise**2
    for L, probability, rule in zip(data.lengths.values, data.lengths.probabilities, rules, strict=True):

        def purity(point, L=L):
            if data.spiked:
                spike = data.tokens.spike
                posterior = jax.nn.softmax(spike * (point[:L] + jnp.zeros(L).at[0].set(spike)))
            else:
                posterior = location_law(data, point, L)
            return jnp.sum(posterior**2)

        total = total + probability * (1.0 - rule.expectation(purity))
    return total
