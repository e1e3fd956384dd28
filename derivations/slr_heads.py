"""Several attention heads on data with several informative locations: each token's moments of the heads' terms.

Model (docs/heads.md). A sequence of L tokens in R^d; S informative positions J_1..J_S (distinct,
uniform); the informative token of location j is x = mu k*_j + c g (mu the spike, sqrt(d/2) for Marion et al.'s
data; c the spread gamma), every other token x = g, with g ~ N(0, I_d); the 2S targets (k*_j, v*_j) orthonormal;
label y = sum_j <x_{J_j}, v*_j> + eps xi. H heads: f(X) = sum_h sum_l erf(lam <x_l, k_h>) <x_l, v_h>.

The tokens are independent, so the risk (assembled in flowsim/tasks/slr/_heads_risk.py) needs, for one token
and one or two heads, the moments of A = sum_h erf(lam chi_h) z_h with chi_h = <x, k_h>, z_h = <x, v_h> and of
the token's label part Q = <x, v*> (informative tokens):

- E[erf(lam chi_1) z_1], E[Q erf(lam chi_1) z_1], E[erf(lam chi_1)^2 z_1^2] (one head, as in derivations/slr.py),
- E[erf(lam chi_1) erf(lam chi_2) z_1 z_2] (two heads: the new term).

**Reduction.** The centred projections W = (<g,k_1>, <g,k_2>, <g,v_1>, <g,v_2>, <g,v*>) are jointly Gaussian,
their covariance the Gram matrix of (k_1, k_2, v_1, v_2, v*), i.e. the order parameters. Multivariate Stein
(Gaussian integration by parts), E[W_a F(W)] = sum_b Cov(W_a, W_b) E[d F / d W_b], removes the polynomial
factors one by one (no conditioning: nothing is inverted, so equal keys k_1 = k_2 are no singularity), leaving
E[erf^(i)(Y_1) erf^(j)(Y_2)] with Y_h = lam chi_h:

- one head (or the same head twice): lemmas 1-4 of derivations/lemmas.py;
- two heads: the derivatives in the means a = E[Y] of P(a_1, a_2, B) = E[erf(Y_1) erf(Y_2)], Y ~ N(a, B)
  (`ErfPair`). Every derivative is a closed form: Price's theorem gives dP/dB_12 = E[erf'(Y_1) erf'(Y_2)], a
  Gaussian integral, and dP/da_1 = E[erf'(Y_1) erf(Y_2)] is a Gaussian times an erf (completing the square in
  Y_1, then lemma 1). P itself is the arcsine law at a = 0 (noise tokens), and otherwise the integral of
  dP/dB_12 from B_12 = 0 (where P = erf(a_1 / sqrt(1 + 2 B_11)) erf(a_2 / sqrt(1 + 2 B_22))); with
  B_12 = sqrt((1 + 2 B_11)(1 + 2 B_22)) sin(phi) / 2 it reads
      P = erf(alpha_1) erf(alpha_2)
          + (2/pi) int_0^phi* exp(-(alpha_1^2 + alpha_2^2 - 2 alpha_1 alpha_2 sin phi) / cos^2 phi) dphi,
  alpha_h = a_h / sqrt(1 + 2 B_hh), sin phi* = 2 B_12 / sqrt((1 + 2 B_11)(1 + 2 B_22)) (a bivariate normal
  probability: no elementary closed form). The generated code calls `erf_pair`, which takes that integral by a
  Gauss-Legendre rule of stated, tested error (flowsim/tasks/slr/_erf_pair.py).
"""

import functools

import sympy as sp

from .codegen import GeneratedFunction, render_module
from .lemmas import HeldExp, mean_erf_derivative, mean_erf_pair, merged_terms

__all__ = ["OUTPUT_FILES", "ErfPair", "head_moments", "outputs"]

lam, c = sp.symbols("lam c", positive=True)
mu = sp.Symbol("mu", nonnegative=True)
kappa1, theta1, kappa2, theta2 = sp.symbols("kappa1 theta1 kappa2 theta2", real=True)
rho1, rho2, kk, kv, vk, vv = sp.symbols("rho1 rho2 kk kv vk vv", real=True)
eta1, nu1 = sp.symbols("eta1 nu1", real=True)
# One head's overlaps, as the one-head functions name them.
kappa, nu, theta, eta, rho = sp.symbols("kappa nu theta eta rho", real=True)
_ONE_HEAD = {kappa1: kappa, nu1: nu, theta1: theta, eta1: eta, rho1: rho}

#: The centred coordinates W: keys of heads 1 and 2, values of heads 1 and 2, the label direction.
KEY1, KEY2, VALUE1, VALUE2, LABEL = range(5)
#: Their covariance: the Gram matrix of (k_1, k_2, v_1, v_2, v*); kv = <k_1, v_2>, vk = <v_1, k_2>. The label
#: direction's overlaps with head 2 never enter (one-head label moments only).
COVARIANCE = sp.Matrix(
    [
        [1, kk, rho1, kv, eta1],
        [kk, 1, vk, rho2, 0],
        [rho1, vk, 1, vv, nu1],
        [kv, rho2, vv, 1, 0],
        [eta1, 0, nu1, 0, 1],
    ]
)


def _mean_slope(a1, a2, b11, b12, b22):
    """dP/da_1 = E[erf'(Y_1) erf(Y_2)]: erf'(Y_1) = (2/sqrt(pi)) e^{-Y_1^2} tilts Y_1 to N(a_1 / p_1, b_11 / p_1)
    (p_1 = 1 + 2 b_11) with mass e^{-a_1^2 / p_1} / sqrt(p_1); Y_2 given Y_1 is Gaussian, so under the tilt
    Y_2 ~ N(a_2 - 2 b_12 a_1 / p_1, b_22 - 2 b_12^2 / p_1), and lemma 1 closes E[erf(Y_2)]."""
    p1 = 1 + 2 * b11
    determinant = p1 * (1 + 2 * b22) - 4 * b12**2
    argument = (a2 * p1 - 2 * b12 * a1) / sp.sqrt(p1 * determinant)
    return 2 / sp.sqrt(sp.pi * p1) * sp.exp(-(a1**2) / p1) * sp.erf(argument)


def _cross_slope(a1, a2, b11, b12, b22):
    """dP/dB_12 = E[erf'(Y_1) erf'(Y_2)] = (4/pi) E[e^{-Y^T Y}] = (4/pi) det(I + 2B)^(-1/2) e^{-a^T (I + 2B)^-1 a}."""
    p1, p2 = 1 + 2 * b11, 1 + 2 * b22
    determinant = p1 * p2 - 4 * b12**2
    quadratic = (a1**2 * p2 - 4 * b12 * a1 * a2 + a2**2 * p1) / determinant
    return 4 / (sp.pi * sp.sqrt(determinant)) * sp.exp(-quadratic)


class ErfPair(sp.Function):
    """P(a_1, a_2, b_11, b_12, b_22) = E[erf(Y_1) erf(Y_2)] for Y ~ N((a_1, a_2), [[b_11, b_12], [b_12, b_22]]).

    Its derivatives are closed forms (module docstring); at a = 0 it is the arcsine law, and where b_12 = 0 a
    product of two lemma-1 means. The generated code calls `erf_pair` (flowsim/tasks/slr/_erf_pair.py).
    """

    nargs = 5

    @classmethod
    def eval(cls, a1, a2, b11, b12, b22):
        if a1.is_zero and a2.is_zero:
            return 2 / sp.pi * sp.asin(2 * b12 / sp.sqrt((1 + 2 * b11) * (1 + 2 * b22)))
        if b12.is_zero:
            return sp.erf(a1 / sp.sqrt(1 + 2 * b11)) * sp.erf(a2 / sp.sqrt(1 + 2 * b22))
        return None

    def fdiff(self, argindex=1):
        a1, a2, b11, b12, b22 = self.args
        if argindex == 1:
            return _mean_slope(a1, a2, b11, b12, b22)
        if argindex == 2:
            return _mean_slope(a2, a1, b22, b12, b11)
        if argindex == 4:
            return _cross_slope(a1, a2, b11, b12, b22)
        # The heat equation: dP/dB_hh = (1/2) d^2 P / da_h^2.
        if argindex == 3:
            A = sp.Dummy("A")
            return sp.diff(_mean_slope(A, a2, b11, b12, b22), A).subs(A, a1) / 2
        if argindex == 5:
            A = sp.Dummy("A")
            return sp.diff(_mean_slope(A, a1, b22, b12, b11), A).subs(A, a2) / 2
        raise sp.ArgumentIndexError(self, argindex)

    def _jaxcode(self, printer):
        return f"erf_pair({', '.join(printer._print(argument) for argument in self.args)})"


class _Token:
    """One token x = mu u + c g and the heads' scores lam <x, k_h> = lam (mu kappa_h + c W_h), as the reduction
    needs them: the erf factors' means and variances."""

    def __init__(self, mean: sp.Expr, scale: sp.Expr):
        self.mean, self.scale = mean, scale
        self.score_means = (lam * mean * kappa1, lam * mean * kappa2)

    @functools.cache  # noqa: B019 (one token per derivation; the memo is the Stein recursion's)
    def expect(self, polynomial: tuple[int, ...], erfs: tuple[tuple[int, int], ...]) -> sp.Expr:
        """E[prod_{a in polynomial} W_a * prod_{(h, n) in erfs} erf^(n)(lam (mu kappa_h + c W_h))].

        Multivariate Stein on the first polynomial factor: each other factor W_b it meets contributes
        Cov(W_a, W_b), each erf factor of the head whose key is W_b contributes lam c erf^(n+1).
        """
        if not polynomial:
            return self._close(erfs)
        first, rest = polynomial[0], polynomial[1:]
        total = sp.Integer(0)
        for b in range(COVARIANCE.rows):
            covariance = COVARIANCE[first, b]
            if covariance == 0:
                continue
            for i, factor in enumerate(rest):
                if factor == b:
                    total += covariance * self.expect(rest[:i] + rest[i + 1 :], erfs)
            for i, (head, order) in enumerate(erfs):
                if b == head:  # the key of head h is W_h (KEY1 = 0, KEY2 = 1)
                    raised = tuple(sorted((*erfs[:i], (head, order + 1), *erfs[i + 1 :])))
                    total += covariance * lam * self.scale * self.expect(rest, raised)
        return total

    def _close(self, erfs: tuple[tuple[int, int], ...]) -> sp.Expr:
        """E[prod erf^(n)(Y_h)] with no polynomial factor left: lemmas 1-4 for one head, `ErfPair` for two."""
        spread = lam * self.scale  # the standard deviation of Y_h
        if not erfs:
            return sp.Integer(1)
        heads = {head for head, _ in erfs}
        if len(erfs) == 1:
            ((head, order),) = erfs
            return mean_erf_derivative(order, self.score_means[head], spread)
        if len(erfs) == 2 and len(heads) == 1:
            (head, i), (_, j) = erfs
            return mean_erf_pair(i, j, self.score_means[head], spread)
        if len(erfs) == 2:
            (_, i), (_, j) = erfs
            a1, a2 = sp.Dummy("a1"), sp.Dummy("a2")
            variance = spread**2
            pair = ErfPair(a1, a2, variance, variance * kk, variance)
            derivative = sp.diff(pair, *([a1] * i), *([a2] * j)) if i + j else pair
            return derivative.subs({a1: self.score_means[0], a2: self.score_means[1]})
        raise NotImplementedError("a token's moments hold at most two erf factors")

    def moment(self, integrand: sp.Expr, erfs: tuple[tuple[int, int], ...]) -> sp.Expr:
        """E[integrand(W) * prod erf(lam chi_h)] for a polynomial integrand in the symbols of `W_SYMBOLS`."""
        polynomial = sp.Poly(sp.expand(integrand), *W_SYMBOLS)
        total = sp.Integer(0)
        for powers, coefficient in polynomial.terms():
            factors = tuple(a for a, power in enumerate(powers) for _ in range(power))
            total += coefficient * self.expect(factors, erfs)
        return total


#: Symbols standing for the coordinates W in integrands.
W_SYMBOLS = sp.symbols("w1 w2 y1 y2 q", real=True)


def head_moments(mean: sp.Expr, scale: sp.Expr) -> dict[str, sp.Expr]:
    """A token's moments of the heads' terms, for a token x = mean u + scale g (u its target direction k*).

    **Returns:** by name: "mean" E[erf(lam chi_1) z_1], "label" E[Q erf(lam chi_1) z_1] (Q = <x, v*> =
    scale <g, v*>), "square" E[erf(lam chi_1)^2 z_1^2], "pair" E[erf(lam chi_1) erf(lam chi_2) z_1 z_2], with
    z_h = mean theta_h + scale <g, v_h>.
    """
    token = _Token(mean, scale)
    _, _, y1, y2, q = W_SYMBOLS
    z1, z2 = mean * theta1 + scale * y1, mean * theta2 + scale * y2
    one, both, squared = ((0, 0),), ((0, 0), (1, 0)), ((0, 0), (0, 0))
    return {
        "mean": token.moment(z1, one),
        "label": token.moment(scale * q * z1, one),
        "square": token.moment(z1**2, squared),
        "pair": token.moment(z1 * z2, both),
    }


def _simplified(expr: sp.Expr) -> sp.Expr:
    """`codegen.tidy` without its proof that exponents are non-positive, which SymPy cannot give here.

    Terms are grouped by their special-function factors, the coefficients factored, and each term's exponentials
    merged into one (`lemmas.merged_terms`): the two-head terms' exponent is then minus a positive semidefinite
    quadratic form in the scores' means, e.g. -a^T (I + 2B)^-1 a, never a large exp(x) times a small exp(-y)
    (tests/test_heads_flow.py evaluates them at d = 1e8).
    """
    groups: dict[sp.Expr, sp.Expr] = {}
    for term in merged_terms(expr):
        special = sp.Mul(*(f for f in sp.Mul.make_args(term) if _transcendental(f)))
        groups[special] = groups.get(special, 0) + term / special
    return sp.Add(*(sp.factor(coefficient) * special for special, coefficient in groups.items())).replace(
        HeldExp, sp.exp
    )


def _transcendental(factor: sp.Expr) -> bool:
    base = factor.base if factor.is_Pow else factor
    return isinstance(base, sp.Function)


# The task's generated files.

#: Paths of the generated files, relative to the repository root.
GENERATED_MODULE = "flowsim/tasks/slr/_generated_heads.py"
OUTPUT_FILES = (GENERATED_MODULE,)

_TOKEN_DOCS = {
    "informative": "the informative token of a location, x = mu k* + c g (mu the spike, c the spread)",
    "noise": "a noise token, x = g ~ N(0, I)",
}
_WHAT = {
    "mean": "E[erf(lam chi) z] for one head: chi = <x, k>, z = <x, v>",
    "label": "E[Q erf(lam chi) z] for one head, Q = <x, v*> the token's part of the label",
    "square": "E[erf(lam chi)^2 z^2] for one head",
    "pair": "E[erf(lam chi_1) erf(lam chi_2) z_1 z_2] for two heads",
}
_ARGUMENTS = {
    "mean": "`kappa, theta, rho`: <k, k*>, <v, k*>, <k, v>",
    "label": "`kappa, nu, theta, eta, rho`: <k, k*>, <v, v*>, <v, k*>, <k, v*>, <k, v>",
    "square": "`kappa, theta, rho`: <k, k*>, <v, k*>, <k, v>",
    "pair": (
        "`kappa1, theta1, rho1`, `kappa2, theta2, rho2`: each head's <k_h, k*>, <v_h, k*>, <k_h, v_h>;\n"
        "  `kk, kv, vk, vv`: <k_1, k_2>, <k_1, v_2>, <v_1, k_2>, <v_1, v_2>"
    ),
}
_NOISE_ARGUMENTS = {
    "mean": "`rho`: <k, v>",
    "square": "`rho`: <k, v>",
    "pair": "`rho1, rho2`: each head's <k_h, v_h>; `kk, kv, vk, vv`: <k_1, k_2>, <k_1, v_2>, <v_1, k_2>, <v_1, v_2>",
}


def _doc(token: str, name: str) -> str:
    arguments = (_ARGUMENTS if token == "informative" else _NOISE_ARGUMENTS)[name]
    parameters = "`lam, mu, c`: inverse temperature, spike, spread" if token == "informative" else "`lam`"
    return (
        f"{_WHAT[name]}, for {_TOKEN_DOCS[token]}.\n\n**Arguments:**\n\n- {arguments}.\n- {parameters}.\n\n"
        "All arguments broadcast against each other.\n"
    )


def _functions() -> list[GeneratedFunction]:
    pair_overlaps = (rho2, kk, kv, vk, vv)
    informative = head_moments(mu, c)
    noise = {name: expr.subs(mu, 0).subs(c, 1) for name, expr in head_moments(sp.Integer(0), sp.Integer(1)).items()}
    one = {
        "mean": (kappa, theta, rho),
        "label": (kappa, nu, theta, eta, rho),
        "square": (kappa, theta, rho),
    }
    functions = []
    for name in ("mean", "label", "square", "pair"):
        expr = informative[name] if name == "pair" else informative[name].subs(_ONE_HEAD)
        arguments = (kappa1, theta1, rho1, kappa2, theta2, *pair_overlaps) if name == "pair" else one[name]
        arguments = (*arguments, lam, mu, c)
        functions.append(
            GeneratedFunction(f"informative_{name}", arguments, _simplified(expr), _doc("informative", name))
        )
    for name in ("mean", "square", "pair"):
        expr = noise[name] if name == "pair" else noise[name].subs(_ONE_HEAD)
        arguments = (rho1, *pair_overlaps) if name == "pair" else (rho,)
        functions.append(GeneratedFunction(f"noise_{name}", (*arguments, lam), _simplified(expr), _doc("noise", name)))
    return functions


def outputs() -> dict[str, str]:
    """Derive each token's moments of the heads' terms.

    **Returns:** the text of each file of `OUTPUT_FILES`, by path relative to the repository root.
    """
    module = render_module(
        "Several heads, several informative locations: each token's moments, generated from derivations/slr_heads.py.",
        _functions(),
        imports="from flowsim.tasks.slr._erf_pair import erf_pair\n",
    )
    return {GENERATED_MODULE: module}
