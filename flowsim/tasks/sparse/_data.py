"""Sparse Boolean targets on long inputs (docs/science.md section 8): bits, hidden supports, labels, training sets.

x in {0, 1}^T has independent Bernoulli(p) bits; the label is y = g(x_I) for a hidden support I of s positions
and g one of `FUNCTIONS`. For the AND, p = 2^(-1/s) makes P(y = 1) = 1/2. A training set that does not
identify the target among the s-sparse functions of the same kind is redrawn (Edelman et al.'s protocol):
`identifies` decides it exactly by enumerating the candidate supports.
"""

import functools
import itertools
import math
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, PRNGKeyArray

from flowsim._checks import Allowed, InvalidInput, as_key, at_least, check_choice, check_count, python_scalar

__all__ = ["FUNCTIONS", "SparseTarget", "evaluate_target", "identifies", "sample_bits", "training_set"]

#: The largest support size: g's truth table (2^s entries) is built whole.
MAX_SUPPORT = 24
#: The Boolean functions g of the s relevant bits.
FUNCTIONS = ("and", "or", "majority", "parity", "random")
#: The most candidate supports `identifies` enumerates for a function without a shortcut.
MAX_ENUMERATED = 2_000_000
#: Samples are drawn by a program compiled per power of two of at least this many rows, the rows asked for kept:
#: one program serves every m up to it (the bits of m samples are the first m rows of any larger draw).
_SMALLEST_DRAW = 64
_SHARE = Allowed("a number in (0, 1)", lambda x: 0 < x < 1)


class SparseTarget(eqx.Module):
    """The data model: input length T, support size s, the function g and the bits' probability p.

    **Arguments:**

    - `T`: input length, an integer >= 2; `s`: support size, an integer in [1, T].
    - `function`: one of `FUNCTIONS` ("random": a truth table drawn with the support).
    - `p`: P(bit = 1), in (0, 1); default 2^(-1/s) for the AND (balanced labels), 1/2 otherwise.
    """

    T: int = eqx.field(static=True, converter=python_scalar)
    s: int = eqx.field(static=True, converter=python_scalar)
    function: str = eqx.field(static=True, default="and")
    p: float | None = eqx.field(static=True, default=None, converter=python_scalar)

    def __post_init__(self):
        # Before the converters: s may still be a NumPy integer.
        if self.p is None and isinstance(self.s, numbers.Integral) and not isinstance(self.s, bool) and self.s >= 1:
            self.p = 2.0 ** (-1.0 / int(self.s)) if self.function == "and" else 0.5

    def __check_init__(self):
        at_least(2).check("SparseTarget.T", self.T)
        at_least(1).check("SparseTarget.s", self.s)
        if self.s > self.T:
            raise InvalidInput(f"SparseTarget.s must be at most T = {self.T}, got {self.s}")
        if self.s > MAX_SUPPORT:
            raise InvalidInput(
                f"SparseTarget.s must be at most {MAX_SUPPORT} (g's truth table has 2^s entries), got {self.s}"
            )
        check_choice("SparseTarget.function", self.function, FUNCTIONS)
        _SHARE.check("SparseTarget.p", self.p)

    def draw_support(self, key: PRNGKeyArray) -> tuple[Int[Array, " s"], Bool[Array, " table"]]:
        """A support I (s distinct positions, sorted) and, for "random", a truth table of g (2^s entries).

        **Returns:** (support, table); the table is g's for every function (index: the bits of x_I, first bit
        most significant), so that every label is `table[index]`.
        """
        return _draw_support(self, as_key(key))

    def truth_table(self, key) -> Bool[Array, " table"]:
        """g on all 2^s inputs (index i: bit j of x_I is bit s-1-j of i)."""
        inputs = (np.arange(2**self.s)[:, None] >> np.arange(self.s)[::-1]) & 1
        if self.function == "and":
            table = inputs.all(axis=1)
        elif self.function == "or":
            table = inputs.any(axis=1)
        elif self.function == "majority":
            table = 2 * inputs.sum(axis=1) > self.s
        elif self.function == "parity":
            table = inputs.sum(axis=1) % 2 == 1
        else:
            return jax.random.bernoulli(as_key(key), 0.5, (2**self.s,))
        return jnp.asarray(table)


@functools.partial(jax.jit, static_argnums=0)
def _draw_support(target: SparseTarget, key):
    """`SparseTarget.draw_support`, compiled once per target."""
    key_support, key_table = jax.random.split(key)
    support = jnp.sort(jax.random.choice(key_support, target.T, (target.s,), replace=False))
    return support, target.truth_table(key_table)


def sample_bits(target: SparseTarget, key: PRNGKeyArray, m: int) -> Bool[Array, "m T"]:
    """m inputs of T independent Bernoulli(p) bits."""
    return jnp.asarray(_draw(target, as_key(key), m)[0])


def evaluate_target(x: Bool[Array, "... T"], support: Int[Array, " s"], table: Bool[Array, " table"]):
    """y = g(x_I): the truth table at the index whose bits are x_I (first support position most significant)."""
    return _evaluate(jnp.asarray(x), jnp.asarray(support), jnp.asarray(table))


@jax.jit
def _evaluate(x, support, table):
    bits = jnp.take(x, support, axis=-1).astype(jnp.int32)
    index = jnp.sum(bits << jnp.arange(support.shape[0] - 1, -1, -1), axis=-1)
    return table[index]


def _draw(target: SparseTarget, key, m: int, support=None, table=None) -> tuple[np.ndarray, np.ndarray | None]:
    """m samples as a NumPy array (m, T), and their labels if a support and table are given (else None).

    Drawn by `_draw_rows` at the next power of two of at least `_SMALLEST_DRAW` rows, of which the first m are
    kept: with JAX's partitionable Threefry (its default) element (i, j) of a draw of shape (rows, T) depends
    only on i T + j, so these are the bits of `jax.random.bernoulli(key, p, (m, T))`, and a search over many m
    compiles a handful of programs instead of one per m.
    """
    m = check_count("m", m, 0)
    rows = max(_SMALLEST_DRAW, 1 << max(0, m - 1).bit_length())
    labelled = support is not None
    if labelled:
        support, table = jnp.asarray(support), jnp.asarray(table)
    x, y = _draw_rows(target.p, key, support, table, rows, target.T, labelled)
    return np.asarray(x)[:m], (np.asarray(y)[:m] if labelled else None)


@functools.partial(jax.jit, static_argnums=(4, 5, 6))
def _draw_rows(p, key, support, table, rows: int, T: int, labelled: bool):
    x = jax.random.bernoulli(key, p, (rows, T))
    return x, (_evaluate(x, support, table) if labelled else None)


def identifies(target: SparseTarget, x: np.ndarray, y: np.ndarray, support: np.ndarray, table: np.ndarray) -> bool:
    """Whether (x, y) identifies the target among the s-sparse functions of its kind: no other support J
    (and, for "random", no other truth table) is consistent with every sample.

    AND: a consistent J lies in the columns that are 1 on every positive sample, and must put a 0 in every
    negative one (`_another_cover` searches them by pairs); OR: the same on complemented bits and labels. The other
    functions: every s-subset of the T positions is tried (at most `MAX_ENUMERATED`).

    **Raises:** ValueError when the enumeration would exceed `MAX_ENUMERATED` subsets.
    """
    x, y = np.asarray(x, bool), np.asarray(y, bool)
    support = tuple(int(i) for i in np.asarray(support))
    if target.function in ("and", "or"):
        if target.function == "or":
            x, y = ~x, ~y
        candidates = np.flatnonzero(x[y].all(axis=0))
        return not _another_cover(x[~y][:, candidates], candidates, target.s, support)
    if math.comb(target.T, target.s) > MAX_ENUMERATED:
        raise InvalidInput(
            f"identifying a {target.function} of s = {target.s} among T = {target.T} positions enumerates "
            f"C(T, s) = {math.comb(target.T, target.s):.3g} supports, more than {MAX_ENUMERATED}"
        )
    powers = 1 << np.arange(target.s - 1, -1, -1)
    table = np.asarray(table, bool)
    for chunk in _subsets(target.T, target.s):
        index = (x[:, chunk].astype(np.int64) * powers).sum(axis=-1)  # (m, subsets)
        for j, subset in enumerate(chunk):
            if tuple(subset) == support:
                continue
            if target.function == "random":
                if _is_a_function(index[:, j], y):
                    return False
            elif np.array_equal(table[index[:, j]], y):
                return False
    return True


def _another_cover(ones: np.ndarray, candidates: np.ndarray, s: int, support: tuple) -> bool:
    """Whether s of the candidate columns other than `support` put a 0 in every row of `ones` (the negatives' bits
    at the candidate columns): another AND consistent with the samples.

    The columns J = P + {b, d} are searched by their first s - 2 (P, in lexicographic order): for each P, the rows
    that P leaves without a 0 must each have a 0 at b or at d, so the pairs (b, d) after P that fit are the zeros
    of W^T W, W those rows' bits (the count of rows where both b and d are 1). One product per P instead of a
    test per J: C(c, s - 2) products for C(c, s) subsets of c candidates.
    """
    c = len(candidates)
    if c < s:
        return False
    if s == 1:
        found = np.flatnonzero(~ones.any(axis=0))
        return any((int(candidates[j]),) != support for j in found)
    for prefix in itertools.combinations(range(c), s - 2):
        start = prefix[-1] + 1 if prefix else 0
        rows = ones[:, list(prefix)].all(axis=1) if prefix else slice(None)
        bits = ones[rows, start:].astype(np.float64)
        for b, d in zip(*np.nonzero(np.triu(bits.T @ bits == 0, 1)), strict=True):
            if tuple(int(j) for j in candidates[[*prefix, start + b, start + d]]) != support:
                return True
    return False


def _is_a_function(index: np.ndarray, y: np.ndarray) -> bool:
    """Whether the labels are a function of the index (no index with both labels)."""
    ones = np.zeros(index.max() + 1, bool)
    zeros = np.zeros(index.max() + 1, bool)
    ones[index[y]] = True
    zeros[index[~y]] = True
    return not (ones & zeros).any()


def _subsets(n: int, s: int, chunk: int = 65_536):
    """All s-subsets of range(n) in lexicographic order, as arrays (k, s) of at most `chunk` rows.

    The first blocks are small and grow fourfold up to `chunk`: a search that stops at its first hit (most calls of
    `identifies` that do not identify) builds a few hundred subsets, not a full block.
    """
    combinations, size = itertools.combinations(range(n), s), min(256, chunk)
    while len(block := np.fromiter(itertools.chain.from_iterable(itertools.islice(combinations, size)), np.int64)):
        yield block.reshape(-1, s)
        size = min(4 * size, chunk)


def training_set(
    target: SparseTarget, support, table, key: PRNGKeyArray, m: int, *, max_draws: int = 1000
) -> tuple[Bool[Array, "m T"], Bool[Array, " m"], int]:
    """m labelled samples that identify the target, redrawn until they do (Edelman et al.'s protocol).

    **Returns:** (x, y, draws): the samples and how many sets were drawn.

    **Raises:** RuntimeError if `max_draws` sets in a row fail to identify it (m too small to ever do so).
    """
    key = as_key(key)
    support, table = np.asarray(support), np.asarray(table)
    for draw in range(1, max_draws + 1):
        x, y = _draw(target, jax.random.fold_in(key, draw), m, support, table)
        if identifies(target, x, y, support, table):
            return jnp.asarray(x), jnp.asarray(y), draw
    raise RuntimeError(f"{max_draws} training sets of m = {m} samples in a row did not identify the target")
