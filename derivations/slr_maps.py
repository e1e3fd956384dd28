"""Single-location regression with any attention weight map: the risk as an expectation over the scores.

For a predictor T = sum_l w_l z_l whose weights w = w(lam chi) depend on the scores chi_l = <X_l, k>
only (erf, softmax, linear, softplus attention: docs/science.md section 7), condition on the scores.
Given the informative position J0 = 1 (the weight maps are permutation-equivariant, so every J0 gives
the same risk) the tokens are independent Gaussians, and:

- the informative token's score is chi_1 = s kappa + gamma u_1, a noise token's chi_l = u_l, with
  u ~ N(0, I_L): the standardised scores;
- given its score, each value z_l = <X_l, v> is Gaussian, and so is the label Y = <X_1, v*> + eps xi
  given chi_1: their conditional means and (co)variances follow from the joint covariance of
  (chi_1, z_1, Y), here derived by Gaussian conditioning from the overlaps.

So E[(Y - T)^2 | u] is a quadratic in the weights, and the risk is its expectation over u ~ N(0, I_L):
an L-dimensional integral, left to a rule (`flowsim.quadrature`). The integrand needs the weights only
through w_1 (the informative token's), S1 = sum_{l >= 2} w_l u_l and S2 = sum_{l >= 2} w_l^2.

The conditional risk is a polynomial in (w1, S1, S2, u1) whose coefficients hold the overlaps, and only
w1, S1 and S2 depend on them (through kappa alone, in the informative token's score). So the risk is a
linear combination of the rule's means of (monomial in the weights) x u1^b: a few functions of kappa,
everything else in closed form (`weight_factors`, `score_powers`, `risk_from_moments`). Their
derivatives in kappa are the only ones the rule must carry, and the means are one matrix product.
"""

import sympy as sp

from . import flow
from .codegen import GeneratedFunction, render_module
from .flow import OVERLAPS, eta, kappa, nu, rho, theta

__all__ = ["GRADIENT", "OUTPUT_FILES", "conditional_risk", "outputs", "projected_flow", "risk_by_factor"]

d, gamma = sp.symbols("d gamma", positive=True)
eps = sp.Symbol("eps", nonnegative=True)
s = sp.Symbol("s", positive=True)
u1, w1, S1 = sp.symbols("u1 w1 S1", real=True)
S2 = sp.Symbol("S2", nonnegative=True)


def _condition(mean: sp.Matrix, covariance: sp.Matrix, known: int, value: sp.Expr):
    """Mean and covariance of the other coordinates of a Gaussian vector given coordinate `known` = value."""
    others = [i for i in range(mean.rows) if i != known]
    gain = covariance[others, known] / covariance[known, known]
    conditional_mean = mean[others, 0] + gain * (value - mean[known, 0])
    conditional_cov = covariance[others, others] - gain * covariance[known, others]
    return conditional_mean.applyfunc(sp.expand), conditional_cov.applyfunc(sp.expand)


#: The gradient of a risk with respect to the overlaps, (dR/dkappa, ..., dR/drho).
GRADIENT = sp.symbols("g_kappa g_nu g_theta g_eta g_rho", real=True)


def projected_flow() -> tuple[sp.Expr, ...]:
    """The projected gradient flow on the overlaps (`flow.flow`) of any risk R(kappa, ..., rho), in terms
    of its gradient `GRADIENT`: linear in it, with coefficients in the overlaps alone."""
    risk = sp.Function("R")(*OVERLAPS)
    partials = {sp.Derivative(risk, overlap): g for overlap, g in zip(OVERLAPS, GRADIENT, strict=True)}
    return tuple(sp.collect(sp.expand(component.subs(partials)), GRADIENT) for component in flow.flow(risk))


def conditional_risk() -> sp.Expr:
    """E[(Y - sum_l w_l z_l)^2 | u] in u1, w1, S1, S2, the overlaps, s, gamma and eps."""
    # The informative token X_1 = s k* + gamma G projected on (k, v, v*), plus the label noise.
    mean = sp.Matrix([s * kappa, s * theta, 0])
    covariance = gamma**2 * sp.Matrix([[1, rho, eta], [rho, 1, nu], [eta, nu, 1]]) + sp.diag(0, 0, eps**2)
    (mean_z1, mean_y), cov = _condition(mean, covariance, 0, s * kappa + gamma * u1)
    var_z1, cov_yz1, var_y = cov[0, 0], cov[0, 1], cov[1, 1]
    # A noise token X_l ~ N(0, I): z_l given chi_l = u_l has mean rho u_l, variance 1 - rho^2.
    (mean_zl,), (var_zl,) = _condition(sp.Matrix([0, 0]), sp.Matrix([[1, rho], [rho, 1]]), 0, 1)
    # sum_{l >= 2} w_l E[z_l | u] = S1 mean_zl (mean_zl is per unit of u_l), sum w_l^2 Var = S2 var_zl.
    mean_t = w1 * mean_z1 + S1 * mean_zl
    var_t = w1**2 * var_z1 + S2 * var_zl
    cov_yt = w1 * cov_yz1  # the label is independent of the noise tokens
    return sp.expand(var_y + mean_y**2 - 2 * (cov_yt + mean_y * mean_t) + var_t + mean_t**2)


def risk_by_factor() -> tuple[list[sp.Expr], int, dict[tuple[int, int], sp.Expr]]:
    """The conditional risk as sum over (k, b) of c_kb(overlaps, s, gamma, eps) x F_k(w1, S1, S2) x u1^b.

    **Returns:** the weight factors F_k (distinct monomials in w1, S1, S2, in a fixed order), the largest
    power of u1, and the coefficients c_kb by (k, b) (zero ones left out).
    """
    polynomial = sp.Poly(conditional_risk(), w1, S1, S2, u1)
    factors: list[sp.Expr] = []
    coefficients: dict[tuple[int, int], sp.Expr] = {}
    for (a, c, e, b), coefficient in polynomial.terms():
        factor = w1**a * S1**c * S2**e
        if factor not in factors:
            factors.append(factor)
        coefficients[factors.index(factor), b] = coefficient
    return factors, polynomial.degree(u1), coefficients


#: Paths of the generated files, relative to the repository root.
GENERATED_MODULE = "flowsim/tasks/slr/_generated_maps.py"
OUTPUT_FILES = (GENERATED_MODULE,)

_FLOW_DOC = """The projected gradient flow on the overlaps of a risk whose gradient is known.

**Arguments:**

- `kappa, nu, theta, eta, rho`: the overlaps.
- `g_kappa, ..., g_rho`: the risk's partial derivatives with respect to them (e.g. by `jax.grad`).

All arguments broadcast against each other.

**Returns:** d/dt (kappa, nu, theta, eta, rho), shape (..., 5): the flow of k and v on their spheres,
dk/dt = -(I - k k^T) grad_k R and likewise for v, seen on the overlaps.
"""

_DOC = """E[(Y - T)^2 | u] for T = sum_l w_l <X_l, v> with weights depending on the scores only.

**Arguments:**

- `u1`: the informative token's standardised score, chi_1 = s kappa + gamma u1 (J0 = 1).
- `w1`: its weight; `S1`: sum over the noise tokens of w_l u_l (their scores are u_l);
  `S2`: sum over the noise tokens of w_l^2.
- `kappa, nu, theta, eta, rho`: the overlaps <k,k*>, <v,v*>, <v,k*>, <k,v*>, <k,v>.
- `d, gamma, eps`: dimension (s = sqrt(d/2)), informative-token scale, label-noise level.

All arguments broadcast against each other.

**Returns:** the conditional risk; its mean over u ~ N(0, I_L) is the population risk.
"""


_FACTORS_DOC = """The monomials in the weights, w1^a S1^c S2^e, of which (times powers of u1) the conditional risk
is a linear combination.

**Arguments:** as `conditional_risk` (broadcast against each other).

**Returns:** shape (..., {count}): factor k; `risk_from_moments` takes the rule's means of factor k times u1^b.
"""

_POWERS_DOC = """The powers u1^b, b = 0 ... {degree}, of the informative token's standardised score.

**Returns:** shape (..., {size}).
"""

_MOMENTS_DOC = """The population risk from the means over u ~ N(0, I_L) of the weight factors times powers of u1.

**Arguments:**

- `M{{k}}_{{b}}`: the mean of `weight_factors`' factor k times u1^b, k = 0 ... {last}, b = 0 ... {degree}
  (row-major); they depend on the overlaps through kappa alone (the attention map's weights).
- `kappa, nu, theta, eta, rho`, `d, gamma, eps`: as `conditional_risk`.

**Returns:** the population risk: the mean of `conditional_risk`, which is linear in these means.
"""


def outputs() -> dict[str, str]:
    """Derive the conditional risk, and the same as a combination of the means of its monomials.

    **Returns:** the text of each file of `OUTPUT_FILES`, by path relative to the repository root.
    """
    risk = sp.collect(conditional_risk(), [w1, S1, S2])
    function = GeneratedFunction(
        "conditional_risk", (u1, w1, S1, S2, *OVERLAPS, d, gamma, eps), risk, _DOC, (("s", "jnp.sqrt(d / 2)"),)
    )
    factors, degree, coefficients = risk_by_factor()
    means = [[sp.Symbol(f"M{k}_{b}", real=True) for b in range(degree + 1)] for k in range(len(factors))]
    formats = {"count": len(factors), "last": len(factors) - 1, "degree": degree, "size": degree + 1}
    weight_factors = GeneratedFunction("weight_factors", (w1, S1, S2), tuple(factors), _FACTORS_DOC.format(**formats))
    powers = GeneratedFunction(
        "score_powers", (u1,), tuple(u1**b for b in range(degree + 1)), _POWERS_DOC.format(**formats)
    )
    by_means = sp.Add(*(c * means[k][b] for (k, b), c in coefficients.items()))
    from_moments = GeneratedFunction(
        "risk_from_moments",
        (*(mean for row in means for mean in row), *OVERLAPS, d, gamma, eps),
        by_means,
        _MOMENTS_DOC.format(**formats),
        (("s", "jnp.sqrt(d / 2)"),),
    )
    projection = GeneratedFunction("projected_flow", (*OVERLAPS, *GRADIENT), projected_flow(), _FLOW_DOC)
    module = render_module(
        "Single-location regression with any attention weight map: generated from derivations/slr_maps.py.",
        [function, weight_factors, powers, from_moments, projection],
    )
    return {GENERATED_MODULE: module}
