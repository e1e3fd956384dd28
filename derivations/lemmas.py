"""The table of one-dimensional Gaussian lemmas that closes every expectation.

Z is a standard normal variable and `a`, `b` are real (b may be zero). Every
expectation the derivations need is reduced (by `derivations.gaussian`) to one
of the following, each checked numerically in tests/test_lemmas.py:

1. E[erf(a + bZ)]                = erf(a / sqrt(1 + 2b^2))
2. E[erf(a + bZ)^2]              = zeta(a, b) = 1 - 8 T(sqrt(2) a / sqrt(1 + 2b^2), 1 / sqrt(1 + 4b^2))
                                   with Owen's T function; zeta(0, b) = (2/pi) asin(2b^2 / (1 + 2b^2))
3. E[erf(a + bZ) erf'(a + bZ)]   = (1/2) d zeta / da, in closed form (erf times a Gaussian)
4. E[p(Z) exp(-c (a + bZ)^2)]    = exp(-c a^2 / (1 + 2cb^2)) / sqrt(1 + 2cb^2) E[p(mu + sigma W)]
                                   for a polynomial p, with mu = -2abc / (1 + 2cb^2),
                                   sigma^2 = 1 / (1 + 2cb^2) (completing the square)
5. E[Z h(Z)]                     = E[h'(Z)] (Stein's lemma, Gaussian integration by parts)
6. E[W1 ... W2n] for centred jointly Gaussian W: the sum over pairings of products of
   covariances (Isserlis/Wick); odd moments vanish.

Derivatives of erf are kept symbolic as `ErfDerivative(n, x)` during the
reduction, so that integration by parts in Z terminates, and are closed at the end:
erf^(n)(x) = (2/sqrt(pi)) (-1)^(n-1) H_{n-1}(x) exp(-x^2) for n >= 1 (physicists'
Hermite polynomials), which lemma 4 integrates.
"""

import sympy as sp

__all__ = [
    "ErfDerivative",
    "OwensT",
    "Zeta",
    "erf_derivative_closed",
    "gaussian_exp_moment",
    "mean_erf",
    "mean_erf_derivative",
    "mean_erf_pair",
    "merge_exponentials",
    "merged_terms",
    "normal_moment",
]


class OwensT(sp.Function):
    """Owen's T function T(h, a) = (1/2pi) int_0^a exp(-h^2 (1 + x^2) / 2) / (1 + x^2) dx."""

    nargs = 2

    @classmethod
    def eval(cls, h, a):
        if h.is_zero:
            return sp.atan(a) / (2 * sp.pi)
        return None

    def fdiff(self, argindex=1):
        h, a = self.args
        if argindex == 1:
            # d/dh: the integrand's h-derivative integrates to an erf.
            return -sp.exp(-(h**2) / 2) * sp.erf(a * h / sp.sqrt(2)) / (2 * sp.sqrt(2 * sp.pi))
        if argindex == 2:
            return sp.exp(-(h**2) * (1 + a**2) / 2) / (2 * sp.pi * (1 + a**2))
        raise sp.ArgumentIndexError(self, argindex)


class Zeta(sp.Function):
    """zeta(a, b) = E[erf(a + bZ)^2] (lemma 2), with its derivatives in closed form.

    Kept as a function of its own so that the generated code calls `zeta(a, b)`
    (one Owen's T evaluation) and every derivative is a closed form free of T.
    """

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if a.is_zero:
            return 2 / sp.pi * sp.asin(2 * b**2 / (1 + 2 * b**2))
        if a.could_extract_minus_sign():
            return cls(-a, b)  # erf is odd, so its square is even in a
        return None

    def fdiff(self, argindex=1):
        a, b = self.args
        if argindex == 1:
            return 2 * mean_erf_pair(0, 1, a, b)
        if argindex == 2:
            # d/db E[erf(a+bZ)^2] = 2 E[Z erf erf'] = 2b E[erf'^2 + erf erf''] = b d^2/da^2 zeta
            A = sp.Dummy("A")
            return b * sp.diff(2 * mean_erf_pair(0, 1, A, b), A).subs(A, a)
        raise sp.ArgumentIndexError(self, argindex)

    def _eval_rewrite_as_OwensT(self, a, b, **kwargs):
        return 1 - 8 * OwensT(sp.sqrt(2) * a / sp.sqrt(1 + 2 * b**2), 1 / sp.sqrt(1 + 4 * b**2))

    def _latex(self, printer):
        a, b = (printer._print(arg) for arg in self.args)
        return rf"\zeta\left({a};\, {b}\right)"


class ErfDerivative(sp.Function):
    """erf^(n)(x), the n-th derivative of erf, kept unevaluated during reductions."""

    nargs = 2

    def fdiff(self, argindex=2):
        if argindex != 2:
            raise sp.ArgumentIndexError(self, argindex)
        n, x = self.args
        return ErfDerivative(n + 1, x)

    def _latex(self, printer):
        n, x = self.args
        return rf"\operatorname{{erf}}^{{({printer._print(n)})}}\left({printer._print(x)}\right)"


def erf_derivative_closed(n, x):
    """erf^(n)(x) as an explicit expression (erf itself for n = 0)."""
    if n == 0:
        return sp.erf(x)
    return 2 / sp.sqrt(sp.pi) * (-1) ** (n - 1) * sp.hermite(n - 1, x) * sp.exp(-(x**2))


def normal_moment(n):
    """E[W^n] for W ~ N(0, 1): (n - 1)!! for even n, 0 for odd n."""
    return sp.factorial2(n - 1) if n % 2 == 0 else sp.Integer(0)


def gaussian_exp_moment(poly, z, a, b, c):
    """Lemma 4: E[poly(Z) exp(-c (a + bZ)^2)] for a polynomial `poly` in the symbol z."""
    scale = 1 + 2 * c * b**2
    mu = -2 * a * b * c / scale
    w = sp.Dummy("w")
    shifted = sp.Poly(sp.expand(poly.subs(z, mu + w / sp.sqrt(scale))), w)
    moment = sum(coeff * normal_moment(k) for (k,), coeff in shifted.terms())
    return sp.exp(-c * a**2 / scale) / sp.sqrt(scale) * moment


class HeldExp(sp.Function):
    """exp(x) held as an opaque factor: `sp.expand` would move exp(-x) into a denominator as exp(x)."""

    nargs = 1


def merged_terms(expr) -> list:
    """The terms of `expr` expanded, each with its exponentials merged into one `HeldExp`.

    The Stein reduction multiplies exp(-a^2/q) by exp(-a^2/(q q4)); merged, this is
    exp(-2a^2/q4), the form of lemma 4, so generated code has fewer exp calls and
    never multiplies a large exp(x) by a small exp(-y).
    """
    terms = []
    for term in sp.Add.make_args(sp.expand(expr.replace(sp.exp, HeldExp))):
        exponent, others = sp.Integer(0), []
        for factor in sp.Mul.make_args(term):
            base, power = factor.as_base_exp()
            if isinstance(base, HeldExp):
                exponent += base.args[0] * power
            else:
                others.append(factor)
        merged = sp.exp(sp.factor(sp.cancel(exponent))) if exponent != 0 else 1
        terms.append(sp.Mul(*others) * (HeldExp(merged.args[0]) if merged != 1 else 1))
    return terms


def merge_exponentials(expr):
    """`expr` with the exponentials of each term merged (see `merged_terms`)."""
    return sp.Add(*merged_terms(expr)).replace(HeldExp, sp.exp)


def mean_erf(a, b):
    """Lemma 1: E[erf(a + bZ)]."""
    return sp.erf(a / sp.sqrt(1 + 2 * b**2))


def mean_erf_derivative(n, a, b):
    """E[erf^(n)(a + bZ)]: the n-th a-derivative of lemma 1 (differentiation under E)."""
    A = sp.Dummy("A")
    return sp.diff(mean_erf(A, b), A, n).subs(A, a)


def mean_erf_pair(i, j, a, b):
    """E[erf^(i)(a + bZ) erf^(j)(a + bZ)] for i, j >= 0, from lemmas 2-4.

    Pairs with an undifferentiated erf are reduced by d/da E[erf erf^(j-1)] =
    E[erf' erf^(j-1)] + E[erf erf^(j)]; pairs of two derivatives are Gaussian
    times a polynomial and close with lemma 4.
    """
    i, j = sorted((i, j))
    if (i, j) == (0, 0):
        return Zeta(a, b)
    if (i, j) == (0, 1):
        # Lemma 3: half the a-derivative of 1 - 8 T(h(a), c), with the T derivative in closed form.
        q = 1 + 2 * b**2
        return 2 / sp.sqrt(sp.pi * q) * sp.exp(-(a**2) / q) * sp.erf(a / sp.sqrt(q * (1 + 4 * b**2)))
    if i == 0:
        A = sp.Dummy("A")
        lower = mean_erf_pair(0, j - 1, A, b)
        return merge_exponentials(sp.diff(lower, A) - mean_erf_pair(1, j - 1, A, b)).subs(A, a)
    z, x = sp.Dummy("z"), sp.Dummy("x")
    hermite_product = sp.expand(4 / sp.pi * (-1) ** (i + j) * sp.hermite(i - 1, x) * sp.hermite(j - 1, x)).subs(
        x, a + b * z
    )
    return gaussian_exp_moment(hermite_product, z, a, b, 2)
