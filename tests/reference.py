"""Independent references for the tests: the published closed forms (docs/science.md), in NumPy/SciPy.

Nothing here is imported by flowsim: these formulas are typed from the paper's
statement, not generated, so agreement with the SymPy derivation is a real check.
"""

import math

import numpy as np
from scipy import integrate, special


def zeta(t, b):
    """E[erf(t + bZ)^2] by Owen's T (scipy)."""
    return 1 - 8 * special.owens_t(np.sqrt(2) * t / np.sqrt(1 + 2 * b**2), 1 / np.sqrt(1 + 4 * b**2))


def published_risk(m, d, L, lam, gamma, eps):
    """The population risk of docs/science.md section 3 (authors' closed form)."""
    kappa, nu, theta, eta, rho = np.moveaxis(np.asarray(m, dtype=float), -1, 0)
    g, s = gamma**2, math.sqrt(d / 2)
    q, q4 = 1 + 2 * lam**2 * g, 1 + 4 * lam**2 * g
    a = lam * s * kappa / math.sqrt(q)
    C = 2 * lam / math.sqrt(math.pi * (1 + 2 * lam**2))

    def erf1(x):
        return 2 / math.sqrt(math.pi) * np.exp(-(x**2))

    def erf2(x):
        return -4 * x / math.sqrt(math.pi) * np.exp(-(x**2))

    return (
        eps**2
        + (L - 1) * zeta(0.0, lam)
        + g
        - 2
        * (
            g * nu * special.erf(a)
            + lam * g * s * eta * theta * erf1(a) / math.sqrt(q)
            + lam**2 * g**2 * eta * rho * erf2(a) / q
        )
        + (s**2 * theta**2 + g) * zeta(lam * s * kappa, lam * gamma)
        + 4
        * lam
        * g
        * s
        * (theta * rho - lam**2 * g * rho**2 * kappa / q)
        / math.sqrt(q)
        * special.erf(a / math.sqrt(q4))
        * erf1(a)
        + 4
        / math.sqrt(math.pi)
        * lam**2
        * g**2
        * rho**2
        / (q * math.sqrt(q4))
        * erf1(lam * math.sqrt(d) * kappa / math.sqrt(q4))
        + (L - 1) * 8 / math.pi * lam**2 * rho**2 / (math.sqrt(1 + 4 * lam**2) * (1 + 2 * lam**2))
        + (L - 1) * (L - 2) * 4 * lam**2 * rho**2 / (math.pi * (1 + 2 * lam**2))
        + 2 * (L - 1) * C * rho * (s * theta * special.erf(a) + lam * g * rho * erf1(a) / math.sqrt(q))
    )


def published_oracle_risk(d, L, lam, gamma, eps):
    """docs/science.md section 4 by quadrature: eps^2 + g E[(1 - erf(lam (s + gamma Z)))^2] + (L - 1) zeta(0; lam)."""
    s = math.sqrt(d / 2)
    integrand = lambda z: (1 - special.erf(lam * (s + gamma * z))) ** 2 * np.exp(-(z**2) / 2)  # noqa: E731
    mean = integrate.quad(integrand, -np.inf, np.inf, epsabs=1e-14, epsrel=1e-13, limit=200)[0] / math.sqrt(2 * math.pi)
    return eps**2 + gamma**2 * mean + (L - 1) * 2 / math.pi * math.asin(2 * lam**2 / (1 + 2 * lam**2))


def random_realizable_overlaps(rng, n):
    """n overlap points of random unit k, v in R^4 with k* = e1, v* = e2 (always realizable).

    Each vector mixes the hidden directions with a random direction at a random
    strength, so points range from near the oracle to near-orthogonal.
    """
    points = []
    for _ in range(n):
        k, v = (_random_unit(rng) for _ in range(2))
        kappa, eta = k[0], k[1]
        theta, nu = v[0], v[1]
        points.append([kappa, nu, theta, eta, k @ v])
    return np.array(points)


def _random_unit(rng):
    x = rng.normal(size=4) * rng.uniform(0.05, 1.0, size=4)
    return x / np.linalg.norm(x)
