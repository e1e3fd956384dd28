"""The attention weight maps w: R^L -> R^L of single-location regression (docs/science.md section 7).

T(X) = sum_l w_l(lam chi) z_l with chi_l = <X_l, k>, z_l = <X_l, v>. Every map is an `AttentionMap`: a
per-token function f and how its values become weights over the L tokens:

| map | f(x) | w_l | reference |
|---|---|---|---|
| erf | erf(x) | f(x_l) | Marion et al., ICLR 2025 |
| linear | 1 + x | f(x_l) | Duranthon et al., 2025 |
| softmax | e^x | f(x_l) / sum_j f(x_j) | Duranthon et al., 2025 |
| softplus | log(1 + e^x) | f(x_l) / sum_j f(x_j) | Duranthon et al., 2025 |
| sigmoid | 1 / (1 + e^-x) | f(x_l) | Ramapuram et al., 2024 |
| relu | max(0, x) | f(x_l) / L | Wortsman et al., 2023 |

A researcher's own map is one more `AttentionMap`, and every function that takes `attention=` takes it.

The population risk by a rule (`flowsim.tasks.slr._maps`) needs the weights only through the
informative token's weight w_1 and the noise tokens' S1 = sum_{l>=2} w_l u_l and S2 = sum_{l>=2} w_l^2.
The noise tokens' part of those does not depend on the overlaps (their scores are the rule's points),
so it is computed once per point (`noise_statistics`) and shared by every state of a batch;
`informative_weights` completes it with the informative token's score.
"""

import dataclasses
import functools
import math
import types
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf
from jaxtyping import Array, Float

from flowsim._checks import InvalidInput

__all__ = [
    "ATTENTION_MAPS",
    "NORMALISATIONS",
    "SCORE_GRID",
    "AttentionMap",
    "as_attention_map",
    "attention_weights",
    "check_scores",
    "informative_weights",
    "noise_statistics",
]

#: How a map's per-token values f(x_l) become weights: as they are, divided by their sum over the tokens,
#: or divided by the number of tokens L.
NORMALISATIONS = ("none", "tokens", "length")

#: The scores at which a map is checked when it is made: -100 to 100 in steps of 0.1 (lam <X_l, k> stays
#: within it at the paper's sizes: |lam chi| < 60 for lam <= 8, d = 80, a score within 4 standard deviations).
SCORE_GRID = np.linspace(-100.0, 100.0, 2001)

#: Score magnitudes a decade at which `check_scores` checks a map beyond `SCORE_GRID` (20: neighbours 12% apart).
BEYOND_GRID_PER_DECADE = 20

#: f is odd if |f(x) + f(-x)| <= ODD_TOLERANCE max(1, max |f|) on the grid (round-off of an odd formula).
ODD_TOLERANCE = 1e-12


class AttentionMap(eqx.Module):
    """An attention weight map w: R^L -> R^L made from a per-token function f (docs/science.md section 7).

    w_l(x) = f(x_l) (normalisation "none"), f(x_l) / sum_j f(x_j) ("tokens"; computed from log f, so that
    e^x and other fast-growing f do not overflow at large scores) or f(x_l) / L ("length").

    The map is checked when it is made, on `SCORE_GRID` (-100 to 100 by 0.1): f must be finite there and so
    must its derivative (the flow differentiates it); a map normalised over the tokens needs f > 0 (log f
    finite). A `Problem` checks it again on the scores it meets, where they reach beyond (`check_scores`).
    Whether it is odd (w(-x) = -w(x), which makes (k, v) -> (-k, -v) a symmetry of the task, as for erf) is
    found on the same grid, or checked there if declared.

    A map is static in every jitted function: programs are compiled once per map. Two maps are equal when
    their name, functions and normalisation are: functions compare by identity, so define a map once and
    reuse it (a lambda written again is a new function, hence a new map and a new compilation).

    **Arguments:**

    - `name`: how tables, figures and errors name the map (e.g. "sigmoid").
    - `f`: the per-token function, elementwise and written with `jax.numpy` (e.g. `jax.nn.sigmoid`).
    - `normalisation`: one of `NORMALISATIONS`: "none" (default), "tokens" or "length".
    - `log_f`: log f, for a map normalised over the tokens (e.g. `lambda x: x` for softmax); give it
      instead of f or with it (then both must agree). Without it, log f is taken as `jnp.log(f(x))`.
    - `odd`: whether w(-x) = -w(x) (default None: found on the grid, to `ODD_TOLERANCE`).
    - `check`: check the map on the grid (default). The built-in maps skip it when flowsim is imported (it
      costs about a second of compilation); tests/test_maps.py checks them.

    **Raises:** `InvalidInput` (a ValueError) naming the problem and the score where it appears.

    A kink in f (ReLU's at 0, a cap) is allowed, but the rule over the scores then makes the risk only
    piecewise smooth in kappa (continuous, its gradient not): the flow's kappa component jumps where a rule
    point's informative score crosses the kink (docs/own-attention-map.md shows it on a phase portrait).

    ```python
    capped = slr.AttentionMap("capped softmax", log_f=lambda x: jnp.minimum(x, 1.0), normalisation="tokens")
    problem = slr.Problem(20, 3, 1.0, 1.0, 0.1, attention=capped)
    ```
    """

    name: str = eqx.field(static=True)
    f: Callable | None = eqx.field(static=True, default=None)
    normalisation: str = eqx.field(static=True, default="none")
    log_f: Callable | None = eqx.field(static=True, default=None)
    odd: bool | None = eqx.field(static=True, default=None)
    check: dataclasses.InitVar[bool] = True

    def __post_init__(self, check: bool):
        if check:
            odd = _check(self)
            if self.odd is not None and self.odd != odd:
                found = "is odd" if odd else f"is not odd (|f(x) + f(-x)| > {ODD_TOLERANCE:g} max |f| on the grid)"
                raise InvalidInput(f"AttentionMap {self.name!r}: declared odd = {self.odd}, but its weight map {found}")
            self.odd = odd
        elif self.odd is None:
            raise InvalidInput(f"AttentionMap {self.name!r}: a map made with check=False must declare odd")

    @property
    def normalised(self) -> bool:
        """Whether the weights are divided by their sum over the tokens (softmax-like)."""
        return self.normalisation == "tokens"

    def per_token(self, x):
        """f(x), elementwise (e^{log f(x)} for a map given by its log only)."""
        return jnp.exp(self.log_f(x)) if self.f is None else self.f(x)

    def log_per_token(self, x):
        """log f(x), elementwise, for a map normalised over the tokens."""
        return jnp.log(self.f(x)) if self.log_f is None else self.log_f(x)

    def weights(self, scores: Float[Array, "... L"]) -> Float[Array, "... L"]:
        """The weights w(scores) along the last axis (the tokens); scores are lam <X_l, k>."""
        if self.normalised:
            return _normalise(self.log_per_token(scores))[1]
        values = self.per_token(scores)
        return values / scores.shape[-1] if self.normalisation == "length" else values

    def __repr__(self) -> str:
        return f"AttentionMap({self.name!r}, normalisation={self.normalisation!r})"


def _check(attention: AttentionMap) -> bool:
    """Check a map on `SCORE_GRID` (ValueError naming the problem); return whether it is odd."""
    if not isinstance(attention.name, str) or not attention.name.strip():
        raise InvalidInput(f"AttentionMap.name must be a non-empty string, got {attention.name!r}")
    where = f"AttentionMap {attention.name!r}"
    if attention.normalisation not in NORMALISATIONS:
        raise InvalidInput(f"{where}: normalisation must be one of {NORMALISATIONS}, got {attention.normalisation!r}")
    for field in ("f", "log_f"):
        if getattr(attention, field) is not None and not callable(getattr(attention, field)):
            raise InvalidInput(f"{where}: {field} must be a function of the scores, got {getattr(attention, field)!r}")
    if attention.normalised:
        if attention.f is None and attention.log_f is None:
            raise InvalidInput(f"{where}: give f or log_f (weights normalised over the tokens need one of them)")
    elif attention.f is None or attention.log_f is not None:
        raise InvalidInput(
            f"{where}: normalisation {attention.normalisation!r} needs f and takes no log_f "
            "(log_f serves the maps normalised over the tokens, normalisation 'tokens')"
        )
    values = {}
    if attention.f is not None:
        values["f"] = _evaluate(where, "f", attention.f)
        bad = values["f"] <= 0
        if attention.normalised and bad.any():
            raise InvalidInput(
                f"{where}: weights normalised over the tokens need f > 0 at every score, "
                f"but f({SCORE_GRID[np.argmax(bad)]:g}) = {values['f'][np.argmax(bad)]:g}"
            )
    if attention.normalised:
        values["log f"] = _evaluate(where, "log f", attention.log_per_token)
        if attention.f is not None and attention.log_f is not None:
            mismatch = np.abs(np.exp(values["log f"] - np.log(values["f"])) - 1) > 1e-10
            if mismatch.any():
                x = SCORE_GRID[np.argmax(mismatch)]
                raise InvalidInput(f"{where}: log_f is not log f: at x = {x:g}, exp(log_f(x)) differs from f(x)")
    if attention.normalised:
        return False  # positive weights summing to 1 are never odd
    f = values["f"]
    return bool(np.abs(f + f[::-1]).max() <= ODD_TOLERANCE * max(1.0, np.abs(f).max()))


@functools.lru_cache(maxsize=256)  # a problem is made again and again (a sweep's, a schedule's at(t)): check once
def check_scores(attention: AttentionMap, bound: float, meets: str) -> None:
    """Check a map on the scores a run meets, beyond `SCORE_GRID` (checked when it was made): f, or log f for a map
    normalised over the tokens, finite with a finite derivative at every score in [-bound, bound].

    Past `SCORE_GRID` the scores are taken at `BEYOND_GRID_PER_DECADE` magnitudes a decade, of both signs: a map
    finite on [-100, 100] and NaN or infinite beyond (e^x overflows past 709) is so on an interval of magnitudes,
    which the grid meets. `Problem` checks a researcher's map so; the built-in ones are finite at every score.

    **Arguments:** `attention`; `bound`: the largest score magnitude the run meets; `meets`: which run, and why it
    meets scores that large, for the error (e.g. "a problem at lam = 50, d = 20 meets scores up to 1e3").

    **Raises:** `InvalidInput` naming the map, the first score where it is not finite, and `meets`.
    """
    if bound <= SCORE_GRID[-1]:
        return
    decades = math.log10(bound / SCORE_GRID[-1])
    magnitudes = np.geomspace(SCORE_GRID[-1], bound, max(2, math.ceil(BEYOND_GRID_PER_DECADE * decades) + 1))
    grid = np.concatenate([-magnitudes[::-1], magnitudes])
    where = f"AttentionMap {attention.name!r}"
    label, function = ("log f", attention.log_per_token) if attention.normalised else ("f", attention.f)
    demand = f"{meets}: it must be finite at every score from {-bound:.3g} to {bound:.3g}"
    _evaluate(where, label, function, grid, demand)


def _evaluate(where: str, label: str, function, grid: np.ndarray = SCORE_GRID, demand: str = "") -> np.ndarray:
    """The function's values on `grid`, checked finite with a finite derivative (ValueError otherwise, saying
    `demand`: by default, finite on the whole grid)."""
    demand = demand or f"it must be finite at every score from {grid[0]:g} to {grid[-1]:g}"
    scores = jnp.asarray(grid)
    try:
        # f acts elementwise, so its Jacobian is diagonal: one forward-mode pass gives every f'(x).
        values, slopes = (np.asarray(a) for a in jax.jvp(function, (scores,), (jnp.ones_like(scores),)))
    except Exception as error:  # what a researcher's function raises is theirs: say which one failed, and how
        raise InvalidInput(
            f"{where}: {label} must be an elementwise function written with jax.numpy; "
            f"on an array of scores it raised {type(error).__name__}: {error}"
        ) from error
    if values.shape != grid.shape:
        raise InvalidInput(
            f"{where}: {label} must act elementwise, but on scores of shape {grid.shape} it returned shape "
            f"{values.shape}"
        )
    if not jnp.issubdtype(values.dtype, jnp.floating):  # integers have no derivative; complex weights are no weights
        raise InvalidInput(f"{where}: {label} must return real floating-point values, but it returned {values.dtype}")
    for what, array in ((label, values), (f"the derivative of {label}", slopes)):
        bad = ~np.isfinite(array)
        if bad.any():
            raise InvalidInput(
                f"{where}: {what} is not finite at x = {grid[np.argmax(bad)]:g} ({array[np.argmax(bad)]}); {demand}"
            )
    return values


def _log_softplus(x):
    """log softplus(x), finite at every finite x. softplus(x) = log(1 + e^x) underflows to 0 below x ~ -745
    (softplus attention's risk was NaN from lam ~ 150 at L = 3); there log softplus(x) = x - e^x / 2 + O(e^{2x}),
    which below x = -40 is x to double precision (e^x / 2 < 3e-18, under half an ulp of x)."""
    low = x < -40.0
    return jnp.where(low, x, jnp.log(jax.nn.softplus(jnp.where(low, 0.0, x))))


#: The built-in maps by name (the command line's --attention choices); "erf" is the paper's (closed-form risk).
#: Made unchecked (import time); tests/test_maps.py remakes each with check=True and compares.
ATTENTION_MAPS = types.MappingProxyType(
    {
        attention.name: attention
        for attention in (
            AttentionMap("erf", erf, odd=True, check=False),
            AttentionMap("softmax", normalisation="tokens", log_f=lambda x: x, odd=False, check=False),
            AttentionMap("linear", lambda x: 1.0 + x, odd=False, check=False),
            AttentionMap(
                "softplus",
                jax.nn.softplus,
                "tokens",
                log_f=_log_softplus,
                odd=False,
                check=False,
            ),
            AttentionMap("sigmoid", jax.nn.sigmoid, odd=False, check=False),
            AttentionMap("relu", jax.nn.relu, "length", odd=False, check=False),
        )
    }
)
#: The map with the closed-form risk and flow of docs/science.md section 3.
ERF = ATTENTION_MAPS["erf"]


def as_attention_map(attention, name: str = "attention") -> AttentionMap:
    """`attention` as an `AttentionMap`: a map passes through, a name of `ATTENTION_MAPS` gives the built-in one.

    **Raises:** ValueError "{name} must be one of (...) or a flowsim.slr.AttentionMap, got ...".
    """
    if isinstance(attention, AttentionMap):
        return attention
    if isinstance(attention, str) and attention in ATTENTION_MAPS:
        return ATTENTION_MAPS[attention]
    raise InvalidInput(
        f"{name} must be one of {tuple(ATTENTION_MAPS)} or a flowsim.slr.AttentionMap, got {attention!r}"
    )


def attention_weights(attention: AttentionMap | str, scores: Float[Array, "... L"]) -> Float[Array, "... L"]:
    """The weights w(scores) of an attention map, along the last axis (the tokens).

    **Arguments:**

    - `attention`: an `AttentionMap` or the name of a built-in one (`ATTENTION_MAPS`).
    - `scores`: lam <X_l, k>, shape (..., L).

    **Returns:** the weights, shape (..., L).
    """
    return as_attention_map(attention).weights(scores)


def noise_statistics(attention: AttentionMap, lam, u: Float[Array, "... n"], L: int) -> tuple[Array, Array, Array]:
    """The noise tokens' part of the weight statistics, from their standardised scores u (scores lam u).

    **Returns:** for a map normalised over the tokens, (log sum_l f_l, sum_l p_l u_l, sum_l p_l^2) with
    p_l = f_l / sum f; for the others (0, sum_l w_l u_l, sum_l w_l^2) with w_l = f_l (or f_l / L for
    normalisation "length"); f_l = f(lam u_l). Each of shape (...).
    """
    if attention.normalised:
        log_total, p = _normalise(attention.log_per_token(lam * u))
        return log_total, jnp.sum(p * u, axis=-1), jnp.sum(p * p, axis=-1)
    w = _unnormalised(attention, lam * u, L)
    return jnp.zeros(w.shape[:-1]), jnp.sum(w * u, axis=-1), jnp.sum(w * w, axis=-1)


def informative_weights(attention: AttentionMap, score, statistics, L: int) -> tuple[Array, Array, Array]:
    """(w_1, S1, S2) from the informative token's score lam chi_1 and the noise tokens' `noise_statistics`."""
    log_total, first, second = statistics
    if attention.normalised:
        # w_1 = f_1 / (f_1 + sum f) and the noise tokens share 1 - w_1 in proportions p_l.
        log_ratio = attention.log_per_token(score) - log_total
        w1, rest = jax.nn.sigmoid(log_ratio), jax.nn.sigmoid(-log_ratio)
        return w1, rest * first, rest**2 * second
    return _unnormalised(attention, score, L), first, second


def _normalise(log_values: Float[Array, "... L"]) -> tuple[Float[Array, "..."], Float[Array, "... L"]]:
    """(log sum_l e^{a_l}, e^{a_l} / sum_j e^{a_j}) along the last axis, finite for any finite a, however large.

    Shifted by the largest a_l, as `jax.nn.logsumexp` and `jax.nn.softmax` are, but with the largest term's shift
    set to exactly 0 and every other one capped at 0. Compiled, XLA may fuse a score lam u into the shift as one
    multiply-add, which leaves the largest term's shift at the product's rounding error instead of 0: about 1e4 at
    lam = 1e20, whose exponential overflows (softmax's risk was NaN from lam ~ 1e20 at L = 3). The gradient is
    theirs: the largest term's shift keeps its derivative, its value only is pinned.
    """
    largest = jax.lax.stop_gradient(jnp.max(log_values, axis=-1, keepdims=True))
    shift = log_values - largest
    shift = jnp.where(log_values == largest, shift - jax.lax.stop_gradient(shift), jnp.minimum(shift, 0.0))
    terms = jnp.exp(shift)
    total = jnp.sum(terms, axis=-1)  # >= 1: the largest term is e^0
    return largest[..., 0] + jnp.log(total), terms / total[..., None]


def _unnormalised(attention: AttentionMap, scores, L: int):
    values = attention.per_token(scores)
    return values / L if attention.normalisation == "length" else values
