"""Sparse Boolean targets on long inputs (docs/science.md section 8): bits, hidden supports, labels, training sets.

x in {0, 1}^T has independent Bernoulli(p) bits; the label is y = g(x_I) for a hidden support I of s positions
and g one of `FUNCTIONS`. For the AND, p = 2^(-1/s) makes P(y = 1) = 1/2. A training set that does not
identify the target among the s-sparse functions of the same kind is redrawn (Edelman et al.'s protocol):
`identifies` decides it exactly by enumerating the candidate supports.
"""

import itertools
import math
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, PRNGKeyArray

from flowsim._checks import Allowed, InvalidInput, as_key, at_least, check_choice, python_scalar

__all__ = ["FUNCTIONS", "SparseTarget", "evaluate_target", "identifies", "sample_bits", "training_set"]

#: The largest support size: g's truth table (2^s entries) is built whole.
MAX_SUPPORT = 24
#: The Boolean functions g of the s relevant bits.
FUNCTIONS = ("and", "or", "majority", "parity", "random")
#: The most candidate supports `identifies` enumerates for a function without a shortcut.
MAX_ENUMERATED = 2_000_000
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
        key_support, key_table = jax.random.split(as_key(key))
        support = jnp.sort(jax.random.choice(key_support, self.T, (self.s,), replace=False))
        return support, self.truth_table(key_table)

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


def sample_bits(target: SparseTarget, key: PRNGKeyArray, m: int) -> Bool[Array, "m T"]:
    """m inputs of T independent Bernoulli(p) bits."""
    return jax.random.bernoulli(as_key(key), target.p, (m, target.T))


def evaluate_target(x: Bool[Array, "... T"], support: Int[Array, " s"], table: Bool[Array, " table"]):
    """y = g(x_I): the truth table at the index whose bits are x_I (first support position most significant)."""
    bits = jnp.take(x, support, axis=-1).astype(jnp.int32)
    index = jnp.sum(bits << jnp.arange(support.shape[0] - 1, -1, -1), axis=-1)
    return table[index]


def identifies(target: SparseTarget, x: np.ndarray, y: np.ndarray, support: np.ndarray, table: np.ndarray) -> bool:
    """Whether (x, y) identifies the target among the s-sparse functions of its kind: no other support J
    (and, for "random", no other truth table) is consistent with every sample.

    AND: a consistent J lies in the columns that are 1 on every positive sample, and must put a 0 in every
    negative one; OR: the same on complemented bits and labels. The other functions: every s-subset of the T
    positions is tried (at most `MAX_ENUMERATED`).

    **Raises:** ValueError when the enumeration would exceed `MAX_ENUMERATED` subsets.
    """
    x, y = np.asarray(x, bool), np.asarray(y, bool)
    support = tuple(int(i) for i in np.asarray(support))
    if target.function in ("and", "or"):
        if target.function == "or":
            x, y = ~x, ~y
        candidates = np.flatnonzero(x[y].all(axis=0))
        zeros = ~x[~y][:, candidates]  # negatives: where each candidate column is 0
        for chunk in _subsets(len(candidates), target.s):
            consistent = zeros[:, chunk].any(axis=2).all(axis=0) if len(zeros) else np.ones(len(chunk), bool)
            for found in chunk[consistent]:
                if tuple(candidates[found]) != support:
                    return False
        return True
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


def _is_a_function(index: np.ndarray, y: np.ndarray) -> bool:
    """Whether the labels are a function of the index (no index with both labels)."""
    ones = np.zeros(index.max() + 1, bool)
    zeros = np.zeros(index.max() + 1, bool)
    ones[index[y]] = True
    zeros[index[~y]] = True
    return not (ones & zeros).any()


def _subsets(n: int, s: int, chunk: int = 65_536):
    """All s-subsets of range(n) in lexicographic order, as arrays (k, s) of at most `chunk` rows."""
    combinations = itertools.combinations(range(n), s)
    while block := list(itertools.islice(combinations, chunk)):
        yield np.array(block, dtype=np.int64).reshape(-1, s)


def training_set(
    target: SparseTarget, support, table, key: PRNGKeyArray, m: int, *, max_draws: int = 1000
) -> tuple[Bool[Array, "m T"], Bool[Array, " m"], int]:
    """m labelled samples that identify the target, redrawn until they do (Edelman et al.'s protocol).

    **Returns:** (x, y, draws): the samples and how many sets were drawn.

    **Raises:** RuntimeError if `max_draws` sets in a row fail to identify it (m too small to ever do so).
    """
    key = as_key(key)
    for draw in range(1, max_draws + 1):
        x = sample_bits(target, jax.random.fold_in(key, draw), m)
        y = evaluate_target(x, support, table)
        if identifies(target, np.asarray(x), np.asarray(y), np.asarray(support), np.asarray(table)):
            return x, y, draw
    raise RuntimeError(f"{max_draws} training sets of m = {m} samples in a row did not identify the target")
