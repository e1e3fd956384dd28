"""The order parameters of H unit heads against the 2S targets of S informative locations (docs/heads.md).

The vectors are the family F = (k*_1, v*_1, ..., k*_S, v*_S, k_1, v_1, ..., k_H, v_H) of R^d, the targets
orthonormal and every head vector a unit vector; the state is the entries of their Gram matrix that are not fixed:

- per head h and location j: kappa_hj = <k_h, k*_j>, nu_hj = <v_h, v*_j>, theta_hj = <v_h, k*_j>,
  eta_hj = <k_h, v*_j> (slr.Problem's order), then rho_h = <k_h, v_h>;
- per pair of heads h < h': kk = <k_h, k_h'>, kv = <k_h, v_h'>, vk = <v_h, k_h'>, vv = <v_h, v_h'>.

H (4S + 1) + 4 H (H - 1) / 2 numbers: 22 for H = S = 2, and for H = S = 1 exactly slr.Problem's five overlaps in
their order. Every state coordinate is an entry (a, b) of the Gram matrix G of F: `HeadsLayout.rows, cols`.
"""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from flowsim._checks import InvalidInput, as_key, check_count
from flowsim.tasks.slr._init import chi_square
from flowsim.tasks.slr._overlaps import OVERLAP_NAMES

__all__ = [
    "HeadsLayout",
    "heads_layout",
    "heads_overlaps",
    "injective_assignments",
    "specialised_state",
    "sphere_states",
]

_SYMBOL = {"kappa": r"\kappa", "nu": r"\nu", "theta": r"\theta", "eta": r"\eta", "rho": r"\rho"}
_INNER = {"kappa": ("k", "k^*"), "nu": ("v", "v^*"), "theta": ("v", "k^*"), "eta": ("k", "v^*")}
_PAIR = {"kk": ("k", "k"), "kv": ("k", "v"), "vk": ("v", "k"), "vv": ("v", "v")}


class HeadsLayout:
    """Where each order parameter sits in the state vector and in the Gram matrix of F (module docstring).

    **Fields:** `heads` H and `locations` S; `names` (the state's coordinates), `labels` and `symbols`
    (mathtext, by name); index arrays into the state: `kappa`, `nu`, `theta`, `eta` (H, S), `rho` (H,), and
    `kk`, `kv`, `vk`, `vv` (pairs,) for the `pairs` (h, h') with h < h'; `rows`, `cols` (n,): the entry of G
    each coordinate is; `size` = 2S + 2H, the family's size; `target(j, kind)` and `head(h, kind)` (kind 0 for
    a key, 1 for a value): a vector's index in F.
    """

    def __init__(self, heads: int, locations: int):
        self.heads, self.locations = heads, locations
        self.size = 2 * locations + 2 * heads
        plain = heads == 1 and locations == 1
        wide = max(heads, locations) > 9

        def index(*numbers):
            return "_".join(str(n) for n in numbers) if wide else "".join(str(n) for n in numbers)

        names, labels, symbols, rows, cols = [], {}, {}, [], []
        per_head = {name: np.zeros((heads, locations), int) for name in ("kappa", "nu", "theta", "eta")}
        self.rho = np.zeros(heads, int)

        def add(name, symbol, label, a, b):
            names.append(name)
            symbols[name], labels[name] = symbol, f"${symbol} = {label}$"
            rows.append(a)
            cols.append(b)
            return len(names) - 1

        for h in range(heads):
            for j in range(locations):
                for kind in ("kappa", "nu", "theta", "eta"):
                    head_vector, target_vector = _INNER[kind]
                    suffix = "" if plain else index(h + 1, j + 1)
                    name = kind if plain else f"{kind}_{suffix}"
                    symbol = _SYMBOL[kind] + ("" if plain else f"_{{{suffix}}}")
                    head_index = "" if plain else f"_{h + 1}"
                    target_index = "" if plain else f"_{j + 1}"
                    label = rf"\langle {head_vector}{head_index}, {target_vector}{target_index}\rangle"
                    a = self.head(h, 0 if head_vector == "k" else 1)
                    b = self.target(j, 0 if target_vector == "k^*" else 1)
                    per_head[kind][h, j] = add(name, symbol, label, a, b)
            suffix = "" if plain else f"_{{{h + 1}}}"
            label = rf"\langle k{'' if plain else f'_{h + 1}'}, v{'' if plain else f'_{h + 1}'}\rangle"
            self.rho[h] = add("rho" if plain else f"rho_{h + 1}", _SYMBOL["rho"] + suffix, label, *self._kv(h))
        self.kappa, self.nu, self.theta, self.eta = (per_head[kind] for kind in ("kappa", "nu", "theta", "eta"))
        self.pairs = tuple(itertools.combinations(range(heads), 2))
        pair_index = {kind: np.zeros(len(self.pairs), int) for kind in _PAIR}
        for p, (h, g) in enumerate(self.pairs):
            for kind, (first, second) in _PAIR.items():
                suffix = index(h + 1, g + 1)
                label = rf"\langle {first}_{h + 1}, {second}_{g + 1}\rangle"
                a, b = self.head(h, 0 if first == "k" else 1), self.head(g, 0 if second == "k" else 1)
                pair_index[kind][p] = add(f"{kind}_{suffix}", rf"{kind}_{{{suffix}}}", label, a, b)
        self.kk, self.kv, self.vk, self.vv = (pair_index[kind] for kind in _PAIR)
        self.names = OVERLAP_NAMES if plain else tuple(names)
        if plain:
            assert tuple(names) == OVERLAP_NAMES
        self.labels, self.symbols = labels, symbols
        self.rows, self.cols = np.array(rows), np.array(cols)
        self.pair_first = np.array([h for h, _ in self.pairs], int)
        self.pair_second = np.array([g for _, g in self.pairs], int)
        # G as a gather from (y, 1, 0): the state's entry at (a, b) and (b, a), 1 on the diagonal, 0 between targets.
        n = len(names)
        self.gram_index = np.full((self.size, self.size), n + 1)
        self.gram_index[np.diag_indices(self.size)] = n
        self.gram_index[self.rows, self.cols] = self.gram_index[self.cols, self.rows] = np.arange(n)
        self.is_head = (np.arange(self.size) >= 2 * locations).astype(float)

    @property
    def dimension(self) -> int:
        return len(self.names)

    def target(self, j: int, kind: int) -> int:
        return 2 * j + kind

    def head(self, h: int, kind: int) -> int:
        return 2 * self.locations + 2 * h + kind

    def _kv(self, h: int) -> tuple[int, int]:
        return self.head(h, 0), self.head(h, 1)

    def gram(self, y: Float[Array, "... n"]) -> Float[Array, "... m m"]:
        """The Gram matrix of F at states y (its diagonal 1, the targets' block the identity)."""
        return self.symmetric(y, 1.0)

    def symmetric(self, y: Float[Array, "... n"], diagonal: float = 0.0) -> Float[Array, "... m m"]:
        """The symmetric m x m matrix holding y's coordinates at their entries (a, b) and (b, a), `diagonal` on the
        diagonal and 0 between distinct targets (a gather: no scatter in compiled loops)."""
        y = jnp.asarray(y)
        ends = jnp.broadcast_to(jnp.array([diagonal, 0.0], y.dtype), (*y.shape[:-1], 2))
        return jnp.concatenate([y, ends], axis=-1)[..., self.gram_index]

    def entries(self, gram: Float[Array, "... m m"]) -> Float[Array, "... n"]:
        """The state of a Gram matrix of F."""
        return gram[..., self.rows, self.cols]

    def unrealizable(self, ys, *, atol: float = 1e-10) -> dict[int, str]:
        """Which rows of ys (batch, n) unit heads cannot have: a non-finite entry, or a Gram matrix of F that is
        not positive semidefinite (to atol), and why."""
        ys = np.asarray(ys, dtype=float).reshape(-1, self.dimension)
        finite = np.isfinite(ys).all(axis=-1)
        problems = {int(i): "has a non-finite entry" for i in np.flatnonzero(~finite)}
        if finite.any():
            smallest = np.linalg.eigvalsh(np.asarray(self.gram(ys[finite])))[:, 0]
            for i, value in zip(np.flatnonzero(finite), smallest, strict=True):
                if value < -atol:
                    problems[int(i)] = (
                        f"is not realizable: the Gram matrix of the targets and heads has eigenvalue {value:.3g} < 0 "
                        "(it must be positive semidefinite)"
                    )
        return problems


@functools.cache
def heads_layout(heads: int, locations: int) -> HeadsLayout:
    """The `HeadsLayout` of H heads and S locations (made once per pair)."""
    return HeadsLayout(check_count("heads", heads, 1), check_count("locations", locations, 1))


def heads_overlaps(k, v, k_star, v_star) -> Float[Array, "... n"]:
    """The state (order parameters) of explicit vectors.

    **Arguments:**

    - `k`, `v`: the heads' keys and values, shape (..., H, d), unit vectors.
    - `k_star`, `v_star`: the targets, shape (S, d), orthonormal (the data seam's k*_j = e_{2j-1}, v*_j = e_{2j}:
      `jnp.eye(d)[0::2][:S]` and `jnp.eye(d)[1::2][:S]`).

    **Returns:** the state, shape (..., n), in `heads_layout(H, S)`'s order.
    """
    k, v = jnp.asarray(k, float), jnp.asarray(v, float)
    k_star, v_star = jnp.asarray(k_star, float), jnp.asarray(v_star, float)
    if k.shape != v.shape or k.ndim < 2 or k_star.ndim != 2 or k_star.shape != v_star.shape:
        raise InvalidInput(
            f"k, v must have one shape (..., H, d) and k_star, v_star one shape (S, d), got {k.shape}, {v.shape}, "
            f"{k_star.shape}, {v_star.shape}"
        )
    if k.shape[-1] != k_star.shape[-1]:
        raise InvalidInput(f"the heads' dimension {k.shape[-1]} differs from the targets' {k_star.shape[-1]}")
    layout = heads_layout(k.shape[-2], k_star.shape[0])
    targets = jnp.stack([k_star, v_star], axis=1).reshape(-1, k.shape[-1])
    heads = jnp.stack([k, v], axis=-2).reshape(*k.shape[:-2], -1, k.shape[-1])
    family = jnp.concatenate([jnp.broadcast_to(targets, (*heads.shape[:-2], *targets.shape)), heads], axis=-2)
    return layout.entries(family @ jnp.swapaxes(family, -1, -2))


def sphere_states(key, layout: HeadsLayout, d: int, n: int) -> Float[Array, "n dim"]:
    """n states of 2H head vectors drawn independently and uniformly on the sphere of R^d, with their exact law
    and without d-dimensional vectors.

    A Gaussian vector's coordinates on the 2S targets are Gaussian; the Gram matrix of the 2H vectors' parts in
    the complement (dimension d - 2S) is Wishart with d - 2S degrees of freedom, drawn by the Bartlett
    decomposition (its lower-triangular factor: chi(d - 2S - i) on the diagonal, N(0, 1) below); normalising gives
    the unit vectors' Gram matrix. Needs d >= 2S + 2H.
    """
    m = 2 * layout.heads
    free = d - 2 * layout.locations
    if free < m:
        raise InvalidInput(f"d must be at least 2S + 2H = {2 * layout.locations + m} for these heads, got {d}")
    key_targets, key_below, key_chi = jax.random.split(as_key(key), 3)
    on_targets = jax.random.normal(key_targets, (n, m, 2 * layout.locations))
    below = jnp.tril(jax.random.normal(key_below, (n, m, m)), -1)
    chi = jnp.sqrt(chi_square(key_chi, jnp.arange(free, free - m, -1), (n, m)))
    factor = below + chi[..., None] * jnp.eye(m)
    heads_gram = on_targets @ jnp.swapaxes(on_targets, -1, -2) + factor @ jnp.swapaxes(factor, -1, -2)
    norms = jnp.sqrt(jnp.diagonal(heads_gram, axis1=-2, axis2=-1))
    gram = jnp.zeros((n, layout.size, layout.size))
    targets = 2 * layout.locations
    gram = gram.at[:, :targets, :targets].set(jnp.eye(targets))
    gram = gram.at[:, targets:, :targets].set(on_targets / norms[..., None])
    gram = gram.at[:, :targets, targets:].set(jnp.swapaxes(on_targets / norms[..., None], -1, -2))
    gram = gram.at[:, targets:, targets:].set(heads_gram / (norms[..., :, None] * norms[..., None, :]))
    return layout.entries(gram)


def specialised_state(layout: HeadsLayout, assignment) -> np.ndarray:
    """The state where head h is (k*_{assignment[h]}, v*_{assignment[h]}) (None: a head orthogonal to every target
    and to the other heads, its own k and v orthogonal): a specialised oracle when the assignment is injective."""
    y = np.zeros(layout.dimension)
    for h, j in enumerate(assignment):
        if j is not None:
            y[layout.kappa[h, j]] = y[layout.nu[h, j]] = 1.0
    for p, (h, g) in enumerate(layout.pairs):
        if assignment[h] is not None and assignment[h] == assignment[g]:
            y[layout.kk[p]] = y[layout.vv[p]] = 1.0
    return y


def injective_assignments(layout: HeadsLayout) -> list[tuple]:
    """Every assignment of heads to distinct locations (H <= S), or of the locations to distinct heads with the
    other heads unassigned (H > S)."""
    H, S = layout.heads, layout.locations
    if H <= S:
        return list(itertools.permutations(range(S), H))
    found = []
    for chosen in itertools.permutations(range(H), S):
        assignment = [None] * H
        for j, h in enumerate(chosen):
            assignment[h] = j
        found.append(tuple(assignment))
    return found
