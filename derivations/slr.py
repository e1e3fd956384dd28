"""Single-location regression: the population risk from the model's definition.

Model (SPEC.md sections 1-2). Tokens X_1..X_L in R^d; the informative one
X_J ~ N(s k*, gamma^2 I) with s = sqrt(d/2), the others N(0, I); label
Y = <X_J, v*> + xi, xi ~ N(0, eps^2); predictor T = sum_l erf(lam <X_l, k>) <X_l, v>.

Only the projections of a token on (k, v, v*) enter the loss. Conditioning on
the key projection z = <Z, k> of a token's Gaussian part Z, the other projections
are <Z, v> = rho z + r_v and <Z, v*> = eta z + r_*, with (r_v, r_*) centred,
independent of z, and covariance [[1 - rho^2, nu - rho eta], [nu - rho eta, 1 - eta^2]].

By exchangeability the risk given J is the same for every J; take J = 1 and
expand (Y - T)^2 over ordered token pairs (l, m):
  (J, J): 1 pair; (J, noise) and (noise, J): 2(L - 1); (noise, same noise): L - 1;
  (noise, other noise): (L - 1)(L - 2); the label pairs with the informative token
  and with each noise token.
Two independent copies of a noise token represent "different noise tokens".
"""

import sympy as sp

from derivations.gaussian import GaussianBlock, expectation
from derivations.lemmas import ErfDerivative

__all__ = ["OVERLAPS", "PARAMETERS", "population_risk", "risk_pieces"]

kappa, nu, theta, eta, rho = OVERLAPS = sp.symbols("kappa nu theta eta rho", real=True)
d, L, lam, gamma = sp.symbols("d L lam gamma", positive=True)
eps = sp.Symbol("eps", nonnegative=True)
PARAMETERS = (d, L, lam, gamma, eps)
#: s = sqrt(d/2), the informative token's mean along k*; kept as a symbol for readability.
s = sp.Symbol("s", positive=True)


def _token(name: str, mean_k: sp.Expr, mean_v: sp.Expr, scale: sp.Expr, with_label: bool):
    """Projections (<X,k>, <X,v>, <X,v*>) of a token and its Gaussian block."""
    z, r_v, r_star = sp.symbols(f"z_{name} r_v{name} r_star{name}", real=True)
    if with_label:
        residuals = (r_v, r_star)
        covariance = ((1 - rho**2, nu - rho * eta), (nu - rho * eta, 1 - eta**2))
        label = scale * (eta * z + r_star)
    else:
        residuals, covariance, label = (r_v,), ((1 - rho**2,),), None
    block = GaussianBlock(key=z, residuals=residuals, covariance=covariance)
    on_k = mean_k + scale * z
    on_v = mean_v + scale * (rho * z + r_v)
    return block, on_k, on_v, label


def _attention_term(on_k: sp.Expr, on_v: sp.Expr) -> sp.Expr:
    """One token's contribution erf(lam <X, k>) <X, v> to the predictor T."""
    return ErfDerivative(0, lam * on_k) * on_v


def risk_pieces() -> dict[str, sp.Expr]:
    """The population risk as named expectations, weighted by their pair counts.

    **Returns:** a dict from a description of each group of token pairs to its
    contribution; their sum is E[(Y - T)^2] as a function of the overlaps.
    """
    informative, on_k, on_v, label_signal = _token("J", s * kappa, s * theta, gamma, True)
    noise, n_on_k, n_on_v, _ = _token("1", 0, 0, 1, False)
    other_noise, m_on_k, m_on_v, _ = _token("2", 0, 0, 1, False)
    xi = sp.Symbol("xi", real=True)
    label_noise = GaussianBlock(key=None, residuals=(xi,), covariance=((eps**2,),))
    blocks = [informative, noise, other_noise, label_noise]

    residual = label_signal + xi - _attention_term(on_k, on_v)  # Y minus the informative token's term
    noise_term = _attention_term(n_on_k, n_on_v)
    other_noise_term = _attention_term(m_on_k, m_on_v)
    return {
        "label and informative token": expectation(residual**2, blocks),
        "label and informative token with a noise token": -2 * (L - 1) * expectation(residual * noise_term, blocks),
        "noise token with itself": (L - 1) * expectation(noise_term**2, blocks),
        "two different noise tokens": (L - 1) * (L - 2) * expectation(noise_term * other_noise_term, blocks),
    }


def population_risk() -> sp.Expr:
    """The population risk E[(Y - T)^2] in the overlaps, d, L, lam, gamma, eps (s = sqrt(d/2))."""
    return sum(risk_pieces().values())
