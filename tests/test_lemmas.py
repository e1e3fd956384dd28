"""Each lemma of derivations/lemmas.py against numerical quadrature over a grid of (a, b).

Quadrature of smooth integrands against the Gaussian density reaches ~1e-12 with
scipy's adaptive quad (epsabs 1e-13), so the lemmas are asserted to 1e-10.
"""

import functools
import itertools

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special

from flowsim.derivations.gaussian import GaussianBlock, expectation
from flowsim.derivations.lemmas import (
    ErfDerivative,
    OwensT,
    Zeta,
    erf_derivative_closed,
    gaussian_exp_moment,
    mean_erf,
    mean_erf_derivative,
    mean_erf_pair,
)

A, B, Z = sp.symbols("a b z", real=True)
GRID = list(itertools.product([-2.0, -0.5, 0.0, 0.7, 3.0], [0.0, 0.3, 1.0, 2.5]))
TOL = 1e-10


def _zeta_quadrature(a, b):
    return _gauss_mean(lambda z: special.erf(a + b * z) ** 2)


def _numeric(expr):
    """Lambdify an expression of (a, b), with the project's special functions (once per expression)."""
    return _lambdified(expr)


@functools.cache
def _lambdified(expr):
    modules = [{"OwensT": special.owens_t, "Zeta": _zeta_quadrature, "erf": special.erf}, "numpy"]
    return sp.lambdify((A, B), expr, modules=modules)


def _gauss_mean(f):
    density = lambda z: f(z) * np.exp(-(z**2) / 2) / np.sqrt(2 * np.pi)  # noqa: E731
    return integrate.quad(density, -np.inf, np.inf, epsabs=1e-13, epsrel=1e-13, limit=200)[0]


@functools.cache
def _erf_derivative(n):
    """The n-th derivative of erf as a NumPy function (lambdified once per n)."""
    x = sp.Symbol("x")
    return sp.lambdify(x, erf_derivative_closed(n, x), modules=[{"erf": special.erf}, "numpy"])


@functools.cache
def _mean_erf_derivative(n):
    """The lemma's closed form, derived once per n (the grid's points share it)."""
    return mean_erf_derivative(n, A, B)


@functools.cache
def _mean_erf_pair(i, j):
    """The lemma's closed form, derived once per (i, j)."""
    return mean_erf_pair(i, j, A, B)


@pytest.mark.parametrize(("a", "b"), GRID)
def test_mean_erf(a, b):
    expected = _gauss_mean(lambda z: special.erf(a + b * z))
    assert _numeric(mean_erf(A, B))(a, b) == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize(("a", "b"), GRID)
def test_zeta_through_owens_t(a, b):
    closed = _numeric(Zeta(A, B).rewrite(OwensT))(a, b)
    assert closed == pytest.approx(_zeta_quadrature(a, b), abs=TOL)


@pytest.mark.parametrize("b", [0.0, 0.3, 1.0, 2.5])
def test_zeta_at_zero_is_arcsine(b):
    arcsine = 2 / np.pi * np.arcsin(2 * b**2 / (1 + 2 * b**2))
    assert float(Zeta(0, sp.Float(b))) == pytest.approx(arcsine, abs=1e-15)
    assert arcsine == pytest.approx(_zeta_quadrature(0.0, b), abs=TOL)


@pytest.mark.parametrize(("a", "b"), GRID)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_mean_erf_derivative(n, a, b):
    f = _erf_derivative(n)
    expected = _gauss_mean(lambda z: f(a + b * z))
    assert _numeric(_mean_erf_derivative(n))(a, b) == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize(("a", "b"), GRID)
@pytest.mark.parametrize(("i", "j"), [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (2, 2), (1, 3)])
def test_mean_erf_pair(i, j, a, b):
    f, g = _erf_derivative(i), _erf_derivative(j)
    expected = _gauss_mean(lambda z: f(a + b * z) * g(a + b * z))
    assert _numeric(_mean_erf_pair(i, j))(a, b) == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize(("a", "b"), GRID)
def test_zeta_derivatives(a, b):
    """d zeta/da and d zeta/db of the Zeta function equal central differences of quadrature."""
    h = 1e-4
    d_da = (_zeta_quadrature(a + h, b) - _zeta_quadrature(a - h, b)) / (2 * h)
    d_db = (_zeta_quadrature(a, b + h) - _zeta_quadrature(a, b - h)) / (2 * h)
    assert _numeric(sp.diff(Zeta(A, B), A))(a, b) == pytest.approx(d_da, abs=1e-7)
    assert _numeric(sp.diff(Zeta(A, B), B))(a, b) == pytest.approx(d_db, abs=1e-7)


@pytest.mark.parametrize(("a", "b"), GRID)
@pytest.mark.parametrize("c", [0.5, 2.0])
def test_gaussian_exp_moment(a, b, c):
    poly = 1 - 2 * Z + 3 * Z**2 + Z**3
    expected = _gauss_mean(lambda z: (1 - 2 * z + 3 * z**2 + z**3) * np.exp(-c * (a + b * z) ** 2))
    closed = sp.lambdify((A, B), gaussian_exp_moment(poly, Z, A, B, c))(a, b)
    assert closed == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize(("a", "b"), GRID)
def test_stein_integration_by_parts(a, b):
    """E[Z^2 erf(a + bZ)] and E[Z erf(a + bZ)^2], reduced by Stein's lemma, against quadrature."""
    block = GaussianBlock(key=Z, residuals=(), covariance=())
    erf = ErfDerivative(0, A + B * Z)
    for integrand, f in (
        (Z**2 * erf, lambda z: z**2 * special.erf(a + b * z)),
        (Z * erf**2, lambda z: z * special.erf(a + b * z) ** 2),
        (Z**3 * erf**2, lambda z: z**3 * special.erf(a + b * z) ** 2),
    ):
        assert _numeric(expectation(integrand, [block]))(a, b) == pytest.approx(_gauss_mean(f), abs=TOL)


def test_wick_moments():
    """Fourth and mixed moments of correlated residuals by Isserlis, against the exact formula."""
    r1, r2 = sp.symbols("r1 r2", real=True)
    s11, s12, s22 = sp.Rational(2), sp.Rational(1, 3), sp.Rational(5, 4)
    block = GaussianBlock(key=None, residuals=(r1, r2), covariance=((s11, s12), (s12, s22)))
    assert expectation(r1**4, [block]) == 3 * s11**2
    assert expectation(r1**2 * r2**2, [block]) == s11 * s22 + 2 * s12**2
    assert expectation(r1**3 * r2, [block]) == 3 * s11 * s12
    assert expectation(r1**3, [block]) == 0
