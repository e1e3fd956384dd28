"""Symbolic Gaussian expectations, reduced to the lemma table.

An expectation is taken over independent *blocks* of Gaussian variables. A
block models the projections of one Gaussian vector (one token, or the label
noise): a *key*, a standard normal variable that is the only one allowed inside
erf, and *residuals*, centred and jointly Gaussian with a given covariance and
independent of the key (what remains of the other projections once the key is
conditioned on). Integrands are polynomials in all variables times products of
`ErfDerivative(n, a + b * key)`.

The reduction of one term: split the factors by block (independent blocks
factorise), take the residual moments by Isserlis/Wick (lemma 6), integrate the
powers of the key by parts (Stein, lemma 5) until none is left, and close the
remaining erf products with lemmas 1-4.
"""

from collections import Counter
from dataclasses import dataclass
from functools import cache

import sympy as sp

from .lemmas import ErfDerivative, mean_erf_derivative, mean_erf_pair

__all__ = ["GaussianBlock", "expectation"]


@dataclass(frozen=True)
class GaussianBlock:
    """An independent group of Gaussian variables.

    **Arguments:**

    - `key`: the standard normal variable erf may depend on (affinely), or None.
    - `residuals`: centred Gaussian variables independent of `key`.
    - `covariance`: their covariance matrix (a tuple of tuples of SymPy expressions).
    """

    key: sp.Symbol | None
    residuals: tuple[sp.Symbol, ...]
    covariance: tuple[tuple[sp.Expr, ...], ...]

    @property
    def symbols(self) -> frozenset:
        return frozenset(self.residuals) | ({self.key} if self.key is not None else frozenset())


def expectation(expr: sp.Expr, blocks: list[GaussianBlock]) -> sp.Expr:
    """E[expr] over the independent `blocks`, reduced to the lemma table.

    **Arguments:**

    - `expr`: polynomial in the block variables times products of `ErfDerivative`.
    - `blocks`: the independent Gaussian blocks; other symbols are constants.

    **Returns:** the expectation as a SymPy expression free of the block variables.
    """
    owner = {symbol: block for block in blocks for symbol in block.symbols}
    total = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(expr)):
        per_block = {block: sp.Integer(1) for block in blocks}
        constant = sp.Integer(1)
        for factor in sp.Mul.make_args(term):
            holders = {owner[s] for s in factor.free_symbols if s in owner}
            if not holders:
                constant *= factor
            elif len(holders) == 1:
                per_block[holders.pop()] *= factor
            else:
                raise NotImplementedError(f"factor {factor} mixes independent blocks")
        for block, part in per_block.items():
            constant *= _block_expectation(part, block)
        total += constant
    return total


def _block_expectation(part: sp.Expr, block: GaussianBlock) -> sp.Expr:
    residual_powers = Counter()
    key_power = 0
    erf_orders = []
    erf_argument = None
    for factor in sp.Mul.make_args(part):
        if factor == 1:
            continue
        base, exponent = factor.as_base_exp()
        if base in block.residuals:
            residual_powers[base] += int(exponent)
        elif base == block.key:
            key_power += int(exponent)
        elif isinstance(base, ErfDerivative) and exponent.is_Integer and exponent > 0:
            order, argument = base.args
            if erf_argument is not None and argument != erf_argument:
                raise NotImplementedError("erf factors of one block must share their argument")
            erf_argument = argument
            erf_orders += [int(order)] * int(exponent)
        elif factor.free_symbols & block.symbols:
            raise NotImplementedError(f"cannot integrate factor {factor}")
        else:
            raise AssertionError(f"constant factor {factor} reached a block")
    residual_part = _wick(residual_powers, block)
    if residual_part == 0:
        return sp.Integer(0)
    if erf_argument is None:
        a = b = sp.Integer(0)
    else:
        b = sp.diff(erf_argument, block.key)
        a = sp.expand(erf_argument - b * block.key)
        if b.free_symbols & {block.key} or a.free_symbols & block.symbols:
            raise NotImplementedError(f"erf argument {erf_argument} is not affine in the key")
    return residual_part * _stein(key_power, tuple(sorted(erf_orders)), a, b)


@cache
def _stein(power: int, erf_orders: tuple[int, ...], a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """E[Z^power prod_i erf^(n_i)(a + bZ)] by Stein's lemma E[Z h(Z)] = E[h'(Z)]."""
    if power == 0:
        return _close(erf_orders, a, b)
    # h(Z) = Z^(power-1) prod_i erf^(n_i)(a + bZ); h' differentiates the power or one erf factor.
    result = (power - 1) * _stein(power - 2, erf_orders, a, b) if power >= 2 else sp.Integer(0)
    for i in range(len(erf_orders)):
        raised = (*erf_orders[:i], erf_orders[i] + 1, *erf_orders[i + 1 :])
        result += b * _stein(power - 1, tuple(sorted(raised)), a, b)
    return result


def _close(erf_orders: tuple[int, ...], a: sp.Expr, b: sp.Expr) -> sp.Expr:
    if len(erf_orders) == 0:
        return sp.Integer(1)
    if len(erf_orders) == 1:
        return mean_erf_derivative(erf_orders[0], a, b)
    if len(erf_orders) == 2:
        return mean_erf_pair(*erf_orders, a, b)
    raise NotImplementedError("the lemma table closes products of at most two erf factors")


def _wick(powers: Counter, block: GaussianBlock) -> sp.Expr:
    """E[prod r_i^(k_i)] for centred jointly Gaussian residuals (Isserlis/Wick)."""
    index = {r: i for i, r in enumerate(block.residuals)}
    factors = [index[r] for r, k in sorted(powers.items(), key=lambda rk: index[rk[0]]) for _ in range(k)]
    return _pairings(tuple(factors), block.covariance)


@cache
def _pairings(factors: tuple[int, ...], covariance) -> sp.Expr:
    if not factors:
        return sp.Integer(1)
    if len(factors) % 2:
        return sp.Integer(0)
    first, rest = factors[0], factors[1:]
    return sum(
        covariance[first][partner] * _pairings(rest[:j] + rest[j + 1 :], covariance) for j, partner in enumerate(rest)
    )
