"""The single-location regression family with free norms: the follow-up's models (docs/follow-up-models.md).

Duranthon, Marion, Boyer, Loureiro and Zdeborova (ICLR 2026) take k and v as free vectors of R^D, with
seven order parameters: a = <k,k*>, b = <k,v*>, c = <v,k*>, e = <v,v*>, Q_k = |k|^2, Q_v = |v|^2,
Q_kv = <k,v>. The predictor is f(X) = sum_l w_l(s) z_l with scores s_l = <x_l, k> and values z_l = <x_l, v>;
the label is y = q_j + Delta xi with q_l = <x_l, v*> and j the relevant position.

Two things are derived here, from the model's definition:

- **Each token's conditional moments.** Every token is Gaussian, so given the coordinates a rule integrates over
  (its standardised score, and for max-SLR its projection on k*), the token's q and z are Gaussian. Their means,
  variances and covariance follow by Gaussian conditioning from the token's covariance with (k*, v*, k, v), that
  is from the Gram matrix of the seven. A *spiked* token is N(mu k*, gamma^2 I) (mu = 0, gamma = 1: a plain
  noise token; mu = sqrt(nu): spiked-SLR; mu = sqrt(d/2): Marion et al.'s); a rule conditions it on its score
  alone, s = mu a + gamma sqrt(Q_k) u. A *max-SLR* token is N(0, I) whose projection p = <x, k*> also decides the
  location: a rule conditions it on (p, h) with s = a p + sigma h, sigma^2 = Q_k - a^2 (the part of k off k*).
- **The gradient flow on the seven.** dk/dt = -grad_k R - r k and dv/dt = -grad_v R - r v (ridge r, no
  projection), with grad_k R = R_a k* + R_b v* + 2 R_Qk k + R_Qkv v and grad_v R = R_c k* + R_e v* + 2 R_Qv v +
  R_Qkv k by the chain rule; each order parameter's derivative is an inner product (e.g. dQ_kv/dt =
  <dk/dt, v> + <k, dv/dt>), taken with the Gram matrix, as derivations/flow.py does on the spheres.

The conditional risk given the moments (a quadratic in the weights) is short enough to be written once in
flowsim/tasks/slr/_family_risk.py; its expectation over the coordinates is a rule's (`flowsim.quadrature`).
"""

import sympy as sp

from .codegen import GeneratedFunction, render_module

__all__ = ["FREE_GRADIENT", "ORDER_PARAMETERS", "OUTPUT_FILES", "free_flow", "max_token", "outputs", "spiked_token"]

a, b, c, e, Q_k, Q_v, Q_kv = ORDER_PARAMETERS = sp.symbols("a b c e Q_k Q_v Q_kv", real=True)
#: The gradient of a risk with respect to the seven, (dR/da, ..., dR/dQ_kv).
FREE_GRADIENT = sp.symbols("g_a g_b g_c g_e g_Qk g_Qv g_Qkv", real=True)
ridge = sp.Symbol("ridge", nonnegative=True)
mu, gamma, sigma = sp.symbols("mu gamma sigma", positive=True)
u, p, h = sp.symbols("u p h", real=True)

# Coefficient vectors in the family (k*, v*, k, v), and its Gram matrix.
K_STAR, V_STAR, K, V = (sp.Matrix([int(i == j) for j in range(4)]) for i in range(4))
GRAM = sp.Matrix([[1, 0, a, c], [0, 1, b, e], [a, b, Q_k, Q_kv], [c, e, Q_kv, Q_v]])


def _inner(x: sp.Matrix, y: sp.Matrix) -> sp.Expr:
    return (x.T * GRAM * y)[0, 0]


def free_flow() -> tuple[sp.Expr, ...]:
    """d/dt of the seven under the gradient flow of R + (ridge / 2)(|k|^2 + |v|^2), linear in `FREE_GRADIENT`."""
    g_a, g_b, g_c, g_e, g_qk, g_qv, g_qkv = FREE_GRADIENT
    dk = -(g_a * K_STAR + g_b * V_STAR + 2 * g_qk * K + g_qkv * V) - ridge * K
    dv = -(g_c * K_STAR + g_e * V_STAR + 2 * g_qv * V + g_qkv * K) - ridge * V
    rates = (
        _inner(dk, K_STAR),
        _inner(dk, V_STAR),
        _inner(dv, K_STAR),
        _inner(dv, V_STAR),
        2 * _inner(dk, K),
        2 * _inner(dv, V),
        _inner(dk, V) + _inner(K, dv),
    )
    return tuple(sp.collect(sp.expand(rate), (*FREE_GRADIENT, ridge)) for rate in rates)


def _conditional(covariance: sp.Matrix, known: list[int], values: sp.Matrix, means: sp.Matrix):
    """Mean and covariance of the other coordinates of a Gaussian vector given the `known` ones = values."""
    others = [i for i in range(covariance.rows) if i not in known]
    gain = covariance[others, known] * covariance[known, known].inv()
    mean = means[others, 0] + gain * (values - means[known, 0])
    return mean, covariance[others, others] - gain * covariance[known, others]


def _moments(mean: sp.Matrix, covariance: sp.Matrix, score: sp.Expr) -> tuple[sp.Expr, ...]:
    """(s, E[q], E[z], Var q, Var z, Cov(q, z)) from the conditional law of (q, z); q, z the first two coordinates."""
    simplified = [sp.factor(sp.expand(x)) for x in (mean[0], mean[1], covariance[0, 0], covariance[1, 1])]
    return (score, *simplified, sp.factor(sp.expand(covariance[0, 1])))


def spiked_token() -> tuple[sp.Expr, ...]:
    """A token N(mu k*, gamma^2 I) given its standardised score u: s = mu a + gamma sqrt(Q_k) u."""
    # (q, z, s) = (<x, v*>, <x, v>, <x, k>): means mu (0, c, a), covariance gamma^2 x their Gram.
    covariance = gamma**2 * sp.Matrix([[1, e, b], [e, Q_v, Q_kv], [b, Q_kv, Q_k]])
    score = mu * a + gamma * sp.sqrt(Q_k) * u
    mean, conditional = _conditional(covariance, [2], sp.Matrix([score]), sp.Matrix([0, mu * c, mu * a]))
    return _moments(mean, conditional, score)


def max_token() -> tuple[sp.Expr, ...]:
    """A token N(0, I) given p = <x, k*> and its score s = a p + sigma h (sigma^2 = Q_k - a^2 > 0)."""
    # (q, z, p, s) = (<x, v*>, <x, v>, <x, k*>, <x, k>), covariance their Gram; Q_k written a^2 + sigma^2.
    covariance = sp.Matrix([[1, e, 0, b], [e, Q_v, c, Q_kv], [0, c, 1, a], [b, Q_kv, a, a**2 + sigma**2]])
    score = a * p + sigma * h
    mean, conditional = _conditional(covariance, [2, 3], sp.Matrix([p, score]), sp.zeros(4, 1))
    return _moments(mean, conditional, score)


def _token_doc(given: str) -> str:
    return f"""One token's score and the conditional law of its q = <x, v*> and z = <x, v>, {given}.

**Returns:** (s, E[q], E[z], Var q, Var z, Cov(q, z)) on a last axis of size 6; arguments broadcast.
"""


_FLOW_DOC = """The gradient flow of R + (ridge / 2)(|k|^2 + |v|^2) on the seven order parameters.

**Arguments:** the seven (a, b, c, e, Q_k, Q_v, Q_kv); the risk's partial derivatives with respect to them
(`g_a` ... `g_Qkv`, e.g. by `jax.grad`); the ridge r >= 0. All broadcast against each other.

**Returns:** d/dt (a, b, c, e, Q_k, Q_v, Q_kv), shape (..., 7).
"""

#: Paths of the generated files, relative to the repository root.
GENERATED_MODULE = "flowsim/tasks/slr/_generated_family.py"
OUTPUT_FILES = (GENERATED_MODULE,)


def outputs() -> dict[str, str]:
    """Derive the token moments and the free-norm flow.

    **Returns:** the text of each file of `OUTPUT_FILES`, by path relative to the repository root.
    """
    functions = [
        GeneratedFunction(
            "spiked_token",
            (u, *ORDER_PARAMETERS, mu, gamma),
            spiked_token(),
            _token_doc("for a token N(mu k*, gamma^2 I) given its standardised score u"),
        ),
        GeneratedFunction(
            "max_token",
            (p, h, *ORDER_PARAMETERS, sigma),
            max_token(),
            _token_doc("for a token N(0, I) given p = <x, k*> and h, its score being a p + sigma h"),
        ),
        GeneratedFunction("free_flow", (*ORDER_PARAMETERS, *FREE_GRADIENT, ridge), free_flow(), _FLOW_DOC),
    ]
    module = render_module(
        "The single-location regression family with free norms: generated from derivations/slr_family.py.",
        functions,
    )
    return {GENERATED_MODULE: module}
