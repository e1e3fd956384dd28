"""Expectations over independent standard Gaussians by a fixed rule: E[f(Z)] ~ sum_i w_i f(z_i), Z ~ N(0, I_m).

A task whose risk is an m-dimensional Gaussian expectation without a closed form (the attention
weights of several scores, for instance) evaluates it with one of these rules. The points are fixed
when the rule is made, so the approximated risk is a smooth deterministic function of the task's
state, which `jax.grad` differentiates like any other.

- `gauss_hermite(m, order)`: the product of `order`-point Gauss-Hermite rules (probabilists'
  weight e^{-z^2/2}), order^m points. Exact for every polynomial of degree <= 2 order - 1 in each
  coordinate; for a smooth integrand the error falls faster than any power of `order`.
- `sobol(m, points, seed)`: a scrambled Sobol' point set (scipy.stats.qmc) through the normal
  quantile, equal weights. Its error falls about as 1 / points (up to log factors) for a smooth
  integrand, against 1 / sqrt(points) for Monte Carlo: the choice for larger m.
- `default_rule(m)`: Gauss-Hermite of the highest order (at least 8) whose product has at most
  `MAX_PRODUCT_POINTS` points (order 64, 64, 16, 8 for m = 1..4), else Sobol'.

Errors at given sizes are measured in tests/test_quadrature.py against closed forms.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float
from scipy.special import ndtri

from flowsim._checks import InvalidInput, at_least, check_count

__all__ = [
    "MAX_PRODUCT_POINTS",
    "SOBOL_DIMENSIONS",
    "GaussianRule",
    "cached_rule",
    "default_rule",
    "gauss_hermite",
    "product",
    "sobol",
]

#: The most points `default_rule` spends on a product rule before it takes a Sobol' set instead.
MAX_PRODUCT_POINTS = 4096
#: The lowest and highest orders of `default_rule`'s product rule, and the size of its Sobol' set.
MIN_ORDER, MAX_ORDER, DEFAULT_SOBOL_POINTS = 8, 64, 2**14
#: The most dimensions of scipy's Sobol' sequences (`scipy.stats.qmc.Sobol`).
SOBOL_DIMENSIONS = 21201


class GaussianRule(eqx.Module):
    """A rule for E[f(Z)], Z ~ N(0, I_m): points (size, m) and weights (size,) summing to 1.

    **Fields:** `points`, `weights`; `name`: how it was made (e.g. "gauss-hermite(3, order 8)").
    """

    points: Float[Array, "size m"]
    weights: Float[Array, " size"]
    name: str = eqx.field(static=True)

    @property
    def dimension(self) -> int:
        return self.points.shape[1]

    @property
    def size(self) -> int:
        return self.points.shape[0]

    def expectation(self, f, *args):
        """sum_i w_i f(z_i, *args): `f` maps one point (m,) to a pytree of arrays; vmapped over the points."""
        values = jax.vmap(f, (0, *([None] * len(args))))(self.points, *args)
        return jax.tree.map(lambda v: jnp.tensordot(self.weights, v, axes=1), values)


def gauss_hermite(m: int, order: int) -> GaussianRule:
    """The product Gauss-Hermite rule of `order` points per coordinate, order**m points.

    **Arguments:**

    - `m`: the dimension (>= 1); `order`: points per coordinate (>= 1).

    **Returns:** a `GaussianRule`, exact for polynomials of degree <= 2 order - 1 in each coordinate.

    **Raises:** ValueError if order**m exceeds 2**24 points (use `sobol`).
    """
    m, order = check_count("m", m, 1), check_count("order", order, 1)
    if order**m > 2**24:
        raise InvalidInput(
            f"a product rule of order {order} in m = {m} dimensions has {order}^{m} = {order**m:.3g} points, "
            "more than 2**24: lower order, or use sobol(m, points)"
        )
    nodes, weights = np.polynomial.hermite_e.hermegauss(order)
    weights = weights / math.sqrt(2 * math.pi)
    grids = np.meshgrid(*([nodes] * m), indexing="ij")
    points = np.stack([grid.ravel() for grid in grids], axis=-1)
    products = np.prod(np.stack(np.meshgrid(*([weights] * m), indexing="ij")).reshape(m, -1), axis=0)
    return GaussianRule(jnp.asarray(points), jnp.asarray(products), f"gauss-hermite({m}, order {order})")


def sobol(m: int, points: int = DEFAULT_SOBOL_POINTS, seed: int = 0) -> GaussianRule:
    """A scrambled Sobol' point set mapped to N(0, I_m), equal weights.

    **Arguments:**

    - `m`: the dimension (>= 1).
    - `points`: a power of 2 (the balance properties of a Sobol' set hold for powers of 2).
    - `seed`: the scrambling's seed: the same seed gives the same points.

    **Returns:** a `GaussianRule`.
    """
    m = check_count("m", m, 1)
    if m > SOBOL_DIMENSIONS:
        raise InvalidInput(f"m must be at most {SOBOL_DIMENSIONS} (scipy's Sobol' sequences' dimensions), got {m}")
    points = at_least(2).check("points", points)
    if points & (points - 1):
        raise InvalidInput(f"points must be a power of 2 (a Sobol' set's balance needs it), got {points}")
    from scipy.stats import qmc  # here, not at import: scipy.stats takes 0.65 s to import, a third of flowsim's

    uniform = qmc.Sobol(d=m, scramble=True, rng=np.random.default_rng(seed)).random_base2(int(math.log2(points)))
    # Scrambled points lie strictly inside (0, 1): the quantile is finite.
    normal = ndtri(uniform)
    name = f"sobol({m}, {points} points, seed {seed})"
    return GaussianRule(jnp.asarray(normal), jnp.full(points, 1.0 / points), name)


def cached_rule(make):
    """`functools.cache` for a function that makes a rule (immutable, so made once per arguments).

    The rule is made with concrete arrays even when it is first asked for inside a trace (`jax.jit`, `jax.vmap`,
    `jax.grad`): there `jnp.asarray` gives a tracer, which the cache would keep and hand, leaked, to later calls.
    """

    @functools.cache
    @functools.wraps(make)
    def cached(*arguments, **keywords):
        with jax.ensure_compile_time_eval():
            return make(*arguments, **keywords)

    return cached


@cached_rule  # the Sobol' set is drawn once per dimension
def default_rule(m: int, points: int = DEFAULT_SOBOL_POINTS) -> GaussianRule:
    """The product Gauss-Hermite rule of the highest order <= `MAX_ORDER` with at most `MAX_PRODUCT_POINTS`
    points, if that order is at least `MIN_ORDER` (m <= 4), else a Sobol' set of `points` points.

    Errors of the attention maps' risks at given sizes are in docs/science.md section 7.
    """
    m = check_count("m", m, 1)
    order = min(MAX_ORDER, math.floor(MAX_PRODUCT_POINTS ** (1 / m) + 1e-9))
    if order >= MIN_ORDER:
        return gauss_hermite(m, order)
    return sobol(m, points)


def product(first: GaussianRule, second: GaussianRule) -> GaussianRule:
    """The product of two rules: E[f(Z1, Z2)] over independent Z1 ~ N(0, I_m1), Z2 ~ N(0, I_m2).

    Points are (first's coordinates, then second's), first.size x second.size of them. A rule of different
    orders per coordinate (many points where the integrand varies, one where it does not) is made this way.
    """
    points = jnp.concatenate(
        [jnp.repeat(first.points, second.size, axis=0), jnp.tile(second.points, (first.size, 1))], axis=1
    )
    weights = jnp.outer(first.weights, second.weights).ravel()
    return GaussianRule(points, weights, f"{first.name} x {second.name}")
