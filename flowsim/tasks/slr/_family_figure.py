"""The follow-up's Figure 2 with dynamics: each map's population optimum, and where the flow goes from small starts.

Duranthon et al. (ICLR 2026, Figure 2) plot the population risk of each attention map at its best (k, v) against nu
for spiked-SLR (L = 2), max-SLR (L = 2) and max-SLR (L ~ uniform{1, 2, 3}), against the Bayes risk. They give no
dynamics. `figure_two` adds them: beside each optimum (`population_optimum`), the fixed points that the gradient flow
on the seven order parameters reaches from random small starts, each with its share of the starts, and the time the
flow takes to come within a stated distance of softmax's Bayes point (`basin_shares`).

The rules. Every max-SLR integrand is symmetric under a permutation of the tokens (all are exchangeable), and a
spiked one under a permutation of all but the relevant (first) token, so a product rule over the tokens is summed
over each orbit of its points once (`token_rule`: the same value, about L! times fewer points at L = 3). Every
optimum that the search finds lies on the plane k || k*, v || v* (docs/follow-up-models.md), where a score has no
part off k* and a max-SLR rule needs no point in h: there the optimum is polished with a finer rule, the one
that also gives the Bayes risk (`FigureRules`).
"""

import functools
import itertools
import math
import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from flowsim._checks import POSITIVE, InvalidInput, as_key, check_count
from flowsim._compile import filter_jit, traced
from flowsim._memory import Cost, Need, check_work, float_bytes
from flowsim._task import images
from flowsim.fixedpoints import classify
from flowsim.integrate import solve_flow
from flowsim.quadrature import GaussianRule, cached_rule
from flowsim.results import unit_name
from flowsim.tasks.slr._attention import AttentionMap, as_attention_map
from flowsim.tasks.slr._family import DataModel, Lengths, max_slr, spiked_slr
from flowsim.tasks.slr._family_fast import RuleMoments, fast_risk
from flowsim.tasks.slr._family_problem import FamilyProblem, bayes_point, seven_from_vectors
from flowsim.tasks.slr._family_risk import bayes_risk, check_rules

__all__ = [
    "FIGURE_TWO_MAPS",
    "FIGURE_TWO_NAMES",
    "FIGURE_TWO_NUS",
    "FIGURE_TWO_SETTINGS",
    "Basins",
    "EndGroup",
    "FigureRules",
    "FigureTwo",
    "FigureTwoRow",
    "Optimum",
    "basin_shares",
    "bayes_distance",
    "figure_two",
    "figure_two_figure",
    "figure_two_records",
    "figure_two_text",
    "figure_two_work",
    "population_optimum",
    "token_rule",
]

#: The three data models of their Figure 2, by name, as functions of nu.
FIGURE_TWO_SETTINGS: dict[str, Callable[[float], DataModel]] = {
    "spiked-SLR, L = 2": lambda nu: spiked_slr(nu, 2),
    "max-SLR, L = 2": lambda nu: max_slr(nu, 2),
    "max-SLR, L ~ uniform{1, 2, 3}": lambda nu: max_slr(nu, Lengths.uniform(1, 3)),
}
#: Short names of the settings (`flowsim optima --settings`).
FIGURE_TWO_NAMES = {
    "spiked": "spiked-SLR, L = 2",
    "max": "max-SLR, L = 2",
    "max-variable": "max-SLR, L ~ uniform{1, 2, 3}",
}
FIGURE_TWO_MAPS = ("softmax", "linear", "softplus", "erf")
#: nu from 0.5 to 5 (their Cor. 4.3 compares linear attention's excess with L / ((L - 1) nu) at the largest).
FIGURE_TWO_NUS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)

#: The seven are on the plane k || k*, v || v* when b, c, Q_kv, Q_k - a^2 and Q_v - e^2 are below this, relative
#: to max(1, Q_k, Q_v) (BFGS stops at about 1e-9 relative steps: what it leaves there is round-off).
PLANE_TOL = 1e-6


# --- rules summed over the orbits of the tokens' permutations --------------------------------------------------


def token_rule(data: DataModel, L: int, order: int, h_order: int = 1) -> GaussianRule:
    """The product Gauss-Hermite rule over the L tokens' coordinates, each orbit of the tokens' permutations once.

    Spiked tokens have one coordinate each (the standardised score), of `order` points; max-SLR tokens two, p of
    `order` points and h of `h_order` (one point, h = 0, is exact where the score has no part off k*). The
    integrand of `family_risk` and of `bayes_risk` is symmetric under every permutation of the exchangeable tokens
    (max-SLR: all; spiked: all but the first, the relevant one), so the product rule's sum is the sum over
    multisets of the exchangeable tokens' nodes, each weighted by its multiplicity: the same value, with
    C(K + L - 1, L) points instead of K^L (K nodes a token).

    **Arguments:** the data model; the length L; the orders (>= 1).

    **Returns:** a `GaussianRule` of the dimension `family_risk` takes at length L (L, or 2L for max-SLR).
    """
    L, order, h_order = check_count("L", L, 1), check_count("order", order, 1), check_count("h_order", h_order, 1)
    return _token_rule(bool(data.spiked), L, order, h_order if not data.spiked else 1)


@cached_rule  # a sweep asks for the same few many times
def _token_rule(spiked: bool, L: int, order: int, h_order: int) -> GaussianRule:
    nodes, weights = np.polynomial.hermite_e.hermegauss(order)
    weights = weights / math.sqrt(2 * math.pi)
    if spiked:
        token_nodes, token_weights = nodes[:, None], weights
    else:
        h_nodes, h_weights = np.polynomial.hermite_e.hermegauss(h_order)
        h_weights = h_weights / math.sqrt(2 * math.pi)
        token_nodes = np.stack(np.meshgrid(nodes, h_nodes, indexing="ij"), -1).reshape(-1, 2)
        token_weights = np.outer(weights, h_weights).ravel()
    fixed = 1 if spiked else 0  # the relevant token of spiked data is not exchangeable with the others
    free = L - fixed
    # Each multiset of nodes as a nondecreasing row; its orderings: free! / prod over its runs of (run length)!,
    # and prod (run length)! is the product over the row of each entry's place in its run (1, 2, ...).
    combinations = list(itertools.combinations_with_replacement(range(len(token_weights)), free))
    multisets = np.array(combinations, int).reshape(len(combinations), free)
    place = np.ones_like(multisets)
    for j in range(1, free):
        place[:, j] = np.where(multisets[:, j] == multisets[:, j - 1], place[:, j - 1] + 1, 1)
    counts = math.factorial(free) / np.prod(place, axis=1)
    weight = counts * np.prod(token_weights[multisets], axis=1)
    tokens = token_nodes[multisets]  # (orbits, free, coordinates)
    if fixed:
        first = np.repeat(token_nodes[:, None], len(multisets), axis=0)
        tokens = np.concatenate([first, np.tile(tokens, (len(token_weights), 1, 1))], axis=1)
        weight = np.outer(token_weights, weight).ravel()
    # Token coordinates to the rule's layout: all first coordinates (u, or p), then all second ones (h).
    points = np.concatenate([tokens[..., i] for i in range(tokens.shape[-1])], axis=1)
    name = f"gauss-hermite over the tokens' orbits (L = {L}, order {order}" + (
        ")" if spiked else f" in p, {h_order} in h)"
    )
    return GaussianRule(jnp.asarray(points), jnp.asarray(weight), name)


def _orbits(data: DataModel, L: int, order: int, h_order: int) -> int:
    """The points of `token_rule(data, L, order, h_order)`, counted without making it."""
    nodes = order if data.spiked else order * h_order
    free = L - 1 if data.spiked else L
    return math.comb(nodes + free - 1, free) * (order if data.spiked else 1)


def _order_within(data: DataModel, L: int, order: int, h_order: int, most: int) -> int:
    """The highest order <= `order` whose `token_rule` has at most `most` points (at least 2)."""
    while order > 2 and _orbits(data, L, order, h_order) > most:
        order -= 1
    return order


class FigureRules(eqx.Module):
    """The rules `figure_two` uses (`token_rule`), given by their orders and most points.

    **Fields:**

    - `search`: the order per token coordinate (spiked: u; max-SLR: p) of the rule of the optimum's search in R^4
      and of the flow; `search_h`: its order in each max-SLR token's h (2: exact to cubic terms in the part of the
      score off k*, which the flow from small starts loses by t ~ 10); `search_points`: the most points a length's
      rule may have (its order is lowered until it has no more: by default order 32 in spiked-SLR at L = 2, 22 in
      max-SLR at L = 2, 8 at L = 3).
    - `fine`, `fine_points`: the same for the rule on the plane k || k*, v || v* (one point in h, exact there),
      which polishes the optimum and gives the Bayes risk.
    """

    search: int = 32
    search_h: int = 2
    search_points: int = 1024
    fine: int = 64
    fine_points: int = 50_000

    def __check_init__(self):
        for name in ("search", "search_h", "search_points", "fine", "fine_points"):
            check_count(f"FigureRules.{name}", getattr(self, name), 1)

    def _rules(self, data: DataModel, order: int, h_order: int, most: int) -> tuple[GaussianRule, ...]:
        return tuple(
            token_rule(data, L, _order_within(data, L, order, h_order, most), h_order) for L in data.lengths.values
        )

    def for_search(self, data: DataModel) -> tuple[GaussianRule, ...]:
        """One rule per length of the data's length law: the search's and the flow's."""
        return self._rules(data, self.search, self.search_h, self.search_points)

    def for_plane(self, data: DataModel) -> tuple[GaussianRule, ...]:
        """One rule per length: the polish's on the plane, and the Bayes risk's."""
        return self._rules(data, self.fine, 1, self.fine_points)


# --- the population optimum -------------------------------------------------------------------------------------


class Optimum(eqx.Module):
    """A map's population optimum over the seven, the best of a search from many starts.

    **Fields:**

    - `risk`: the best risk (polished on the plane with the fine rule where `polished`, else the search rule's;
      NaN where every search ran away).
    - `seven`: where it is, (7,).
    - `search_sevens`, `search_risks`: where each start's search ended, and its risk there (the search rule).
    - `near_best`: how many starts' search ends lie within `tol` of `seven` (`relative_distance`).
    - `runaway`: how many starts' searches ran off to |k|^2 or |v|^2 above `RUNAWAY` (a minimum at infinity, or an
      artefact of the rule where the scores are too steep for it: either way not a candidate).
    - `tol`: the tolerance of `near_best`, and of telling search ends apart.
    - `on_plane`: whether the best search end lies on the plane k || k*, v || v* (to `PLANE_TOL`).
    - `polished`: whether it was polished there with `plane_rules`.
    - `failed`: starts whose search did not converge within its step budget (their end still counts).
    """

    risk: float
    seven: np.ndarray
    search_sevens: np.ndarray
    search_risks: np.ndarray
    near_best: int
    runaway: int
    tol: float
    on_plane: bool
    polished: bool
    failed: int

    @property
    def starts(self) -> int:
        return len(self.search_risks)


_EYE = np.eye(4)


def _vector_risk(x, moments: RuleMoments):
    """The risk at (k, v) = (x[:4], x[4:]) in R^4, k* = e1, v* = e2: every valid seven is realised (D >= 4)."""
    eye = jnp.asarray(_EYE)
    return fast_risk(moments, seven_from_vectors(x[:4], x[4:], eye[0], eye[1]))


def _plane_seven(x):
    a, e = x[0], x[1]
    zero = jnp.zeros_like(a)
    return jnp.stack([a, zero, zero, e, a**2, e**2, zero])


#: BFGS's Cauchy tolerances on the 8 coordinates of (k, v) and on the risk: a relative step of 1e-8 leaves the risk
#: within ~1e-16 of its minimum along the well-curved directions.
_RTOL, _ATOL = 1e-8, 1e-10


@filter_jit
def _search(x0, data, attention, rules, max_steps):
    solver = optx.BFGS(rtol=_RTOL, atol=_ATOL)
    moments = RuleMoments(data, attention, rules)  # `family_risk`'s sums, regrouped (flowsim/tasks/slr/_family_fast.py)

    def one(x):
        solution = optx.minimise(lambda x, _: _vector_risk(x, moments), solver, x, max_steps=max_steps, throw=False)
        x = solution.value
        eye = jnp.asarray(_EYE)
        seven = seven_from_vectors(x[:4], x[4:], eye[0], eye[1])
        return seven, fast_risk(moments, seven), solution.result == optx.RESULTS.successful

    return jax.vmap(one)(x0)


@filter_jit
def _polish(x0, data, attention, rules, max_steps):
    solver = optx.BFGS(rtol=_RTOL, atol=_ATOL)
    moments = RuleMoments(data, attention, rules)

    def one(x):
        def risk(x, _):
            return fast_risk(moments, _plane_seven(x))

        solution = optx.minimise(risk, solver, x, max_steps=max_steps, throw=False)
        seven = _plane_seven(solution.value)
        return seven, fast_risk(moments, seven)

    return jax.vmap(one)(x0)


def on_plane(seven) -> np.ndarray:
    """Whether seven (..., 7) lie on the plane k || k*, v || v* (b = c = Q_kv = 0, Q_k = a^2, Q_v = e^2;
    `PLANE_TOL`)."""
    a, b, c, e, q_k, q_v, q_kv = np.moveaxis(np.asarray(seven, dtype=float), -1, 0)
    off = np.max(np.abs([b, c, q_kv, q_k - a**2, q_v - e**2]), axis=0)
    return off <= PLANE_TOL * np.maximum(1.0, np.maximum(q_k, q_v))


def relative_distance(ys, y) -> np.ndarray:
    """max over the seven of |ys - y| / max(1, |y|): the distance `population_optimum` and `basin_shares` use."""
    return np.max(np.abs(np.asarray(ys, dtype=float) - y) / np.maximum(1.0, np.abs(y)), axis=-1)


#: A search end with |k|^2 or |v|^2 above RUNAWAY max(1, |k|^2 at softmax's Bayes point) ran away.
RUNAWAY = 100.0


def _candidates(sevens, risks, allowed, tol: float, count: int) -> list[int]:
    """The starts of the `count` lowest distinct allowed search ends (further apart than tol), lowest first."""
    chosen: list[int] = []
    for i in np.argsort(np.where(allowed, risks, np.inf)):
        if not allowed[i] or len(chosen) == count:
            break
        if all(relative_distance(sevens[i], sevens[j]) > tol for j in chosen):
            chosen.append(int(i))
    return chosen


def population_optimum(
    data: DataModel,
    attention: AttentionMap | str,
    *,
    starts: int = 8,
    key,
    rules=None,
    plane_rules=None,
    candidates: int = 3,
    tol: float = 0.05,
    max_steps: int = 500,
) -> Optimum:
    """A map's population optimum over the seven (free norms, ridge 0): BFGS (optimistix) from many starts.

    The risk depends on (k, v) only through the seven, and any D >= 4 realises every valid seven, so the search
    runs over k, v in R^4 (k* = e1, v* = e2), which is always realisable: no constraint on the seven is needed.
    Starts: k ~ N(0, s^2 I / 4), s = max(1, |k| at softmax's Bayes point), and v ~ N(0, I / 4), so that |k| and |v|
    are of the sizes the optima take. Searches that run away (`RUNAWAY`) are counted, not candidates: a rule
    cannot resolve scores that steep, and its risk there can fall below the Bayes risk.

    With `plane_rules`, the `candidates` lowest distinct search ends that lie on the plane k || k*, v || v* are
    each polished there by BFGS over (a, e) with those rules (a max-SLR rule with one point in h is exact on the
    plane), and the lowest polished one is the optimum; without, the lowest search end.

    **Arguments:**

    - `data`, `attention`: the data model and the map (an `AttentionMap` or a built-in map's name).
    - `starts`: the number of starts (>= 1); `key`: a PRNG key or seed.
    - `rules`: the search's rules, one per length (default `slr.FamilyProblem`'s defaults).
    - `plane_rules`: the rules of the polish on the plane (one per length), or None: no polish.
    - `candidates`: how many distinct search ends are polished (>= 1).
    - `tol`: search ends closer than this (`relative_distance`) are the same point; `near_best` counts those within
      it of the optimum.
    - `max_steps`: BFGS's step budget per start.

    **Returns:** an `Optimum`; its risk and seven are NaN where every search ran away or ended at a non-finite
    risk (a sweep goes on; the table says so).
    """
    attention = as_attention_map(attention, "attention")
    starts, candidates = check_count("starts", starts, 1), check_count("candidates", candidates, 1)
    tol = float(POSITIVE.check("tol", tol))
    max_steps = check_count("max_steps", max_steps, 1)
    rules = check_rules(data, rules)
    target = float(bayes_point(data)[0])
    scale = max(1.0, abs(target)) if math.isfinite(target) else 1.0
    k0, v0 = jax.random.normal(as_key(key), (2, starts, 4))
    x0 = jnp.concatenate([scale * k0 / 2, v0 / 2], axis=1)
    sevens, risks, converged = (np.asarray(x) for x in _search(x0, traced(data), attention, rules, max_steps))
    bounded = np.isfinite(sevens).all(axis=1) & (np.maximum(sevens[:, 4], sevens[:, 5]) <= RUNAWAY * scale**2)
    chosen = _candidates(sevens, risks, bounded & np.isfinite(risks), tol, candidates)
    if not chosen:  # no finite optimum this rule can resolve: said by a NaN risk, with every start counted
        failed = int(np.sum(~converged))
        return Optimum(math.nan, np.full(7, np.nan), sevens, risks, 0, int(np.sum(~bounded)), tol, False, False, failed)
    best, risk, seven, polished = chosen[0], float(risks[chosen[0]]), sevens[chosen[0]], False
    planar = [i for i in chosen if on_plane(sevens[i])]
    if plane_rules is not None and planar:
        plane_rules = check_rules(data, plane_rules)
        # Padded to `candidates` rows (the first repeated): one compiled polish whatever the number of candidates.
        rows = planar + [planar[0]] * (candidates - len(planar))
        x0 = jnp.asarray(sevens[rows][:, [0, 3]])
        polished_sevens, polished_risks = (
            np.asarray(x) for x in _polish(x0, traced(data), attention, plane_rules, max_steps)
        )
        j = int(np.nanargmin(polished_risks[: len(planar)]))
        best, risk, seven, polished = planar[j], float(polished_risks[j]), polished_sevens[j], True
    # Up to the task's symmetries (an odd map's optimum comes in pairs (k, v), (-k, -v)).
    symmetries = FamilyProblem(data, attention, rules=rules).symmetries
    near = np.min(relative_distance(symmetries[:, None] * sevens, seven), axis=0) <= tol
    return Optimum(
        risk,
        seven,
        sevens,
        risks,
        int(np.sum(near)),
        int(np.sum(~bounded)),
        tol,
        bool(on_plane(sevens[best])),
        polished,
        int(np.sum(~converged)),
    )


# --- where the flow goes from small starts -----------------------------------------------------------------------


def bayes_distance(problem: FamilyProblem, ys) -> np.ndarray:
    """The distance (`relative_distance`) of states (..., 7) to softmax's Bayes point, from the nearest of their
    images under the task's symmetries."""
    return np.min(relative_distance(images(problem, ys), bayes_point(problem.data)), axis=0)


class EndGroup(eqx.Module):
    """Flow end points that lie together (within the basins' tol of the first, up to the task's symmetries).

    **Fields:** `point` (7,): the first member's end; `count`, `share`: its members; `risk`: the first member's
    risk there (the flow's rule); `settled`: whether every member moved less than `SETTLED` (`relative_distance`)
    over the last saved interval; `kind`: "sink", "saddle", "source" or "non-hyperbolic" from the eigenvalues of
    the Jacobian at `point` (`flowsim.fixedpoints.classify`), or "moving" if not settled; `eigenvalues`: those.
    """

    point: np.ndarray
    count: int
    share: float
    risk: float
    settled: bool
    kind: str
    eigenvalues: np.ndarray


#: An end point that moved less than this (`relative_distance`) over the last saved interval (t_end / 1.5 to
#: t_end at the default saves) has settled.
SETTLED = 1e-6
#: Real parts of the Jacobian's eigenvalues within this of zero, relative to the largest, count as zero.
_BAND = 1e-6


class Basins(eqx.Module):
    """Where the flow from n small starts ended.

    **Fields:**

    - `groups`: the `EndGroup`s, by share (a settled group is a fixed point the flow reached; a moving one, starts
      still on their way at t_end).
    - `labels`: (n,) each start's group (index into `groups`), or -1 where its solve failed.
    - `at_bayes`: (n,) whether the end point is within `tol` of softmax's Bayes point (`bayes_distance`).
    - `time_to_bayes`: (n,) the first saved time within `tol` of it (inf if never).
    - `end_points`: (n, 7); `failed`: solves that failed; `steps`: the most solver steps of a start.
    - `tol`, `t_end`: the neighbourhood's size and the horizon.
    - `bayes`: softmax's Bayes point (7,); `symmetries`: the task's, as signs (group, 7).
    """

    groups: list[EndGroup]
    labels: np.ndarray
    at_bayes: np.ndarray
    time_to_bayes: np.ndarray
    end_points: np.ndarray
    failed: int
    steps: int
    tol: float
    t_end: float
    bayes: np.ndarray
    symmetries: np.ndarray

    @property
    def n(self) -> int:
        return len(self.labels)

    @property
    def bayes_share(self) -> float:
        return float(np.mean(self.at_bayes))

    def distance(self, ys, y) -> np.ndarray:
        """`relative_distance` of states ys (..., 7) to y, from the nearest of their images under the symmetries
        (inf for a state that is not finite)."""
        ys = np.asarray(ys, dtype=float)
        ys = np.where(np.isfinite(ys).all(axis=-1, keepdims=True), ys, np.inf)
        mirrored = self.symmetries.reshape((len(self.symmetries),) + (1,) * (ys.ndim - 1) + (7,)) * ys
        return np.min(relative_distance(mirrored, y), axis=0)

    def share_near(self, y) -> float:
        """The share of end points within `tol` of y (up to the symmetries)."""
        return float(np.mean(self.distance(self.end_points, y) <= self.tol))


def _log_times(t_end: float, saves: int) -> np.ndarray:
    """t = 0, then `saves` times log-spaced from 1e-2 to t_end."""
    return np.concatenate([[0.0], np.logspace(-2, math.log10(t_end), saves)])


#: `_inside` raises |k|^2 to at least a^2 + b^2 + _EDGE max(1, |k|^2) in max-SLR.
_EDGE = 1e-8


def _inside(problem: FamilyProblem, y: np.ndarray) -> np.ndarray:
    """A max-SLR state moved just inside the realizable set, |k|^2 >= a^2 + b^2 + `_EDGE` max(1, |k|^2), where the
    Jacobian is the limit of its values inside; elsewhere the state itself.

    Max-SLR's rule reads the score's part off k* through sigma = sqrt(Q_k - a^2), and where sigma^2 <= 0 (k || k*,
    where every max-SLR flow ends, reached to round-off from either side) the field's derivative in Q_k is lost: the
    Jacobian there has a zero column and a spurious eigenvalue. Just inside, its eigenvalues no longer depend on
    how far (measured at |k|^2 - a^2 - b^2 from 1e-8 to 1e-4 of |k|^2: the same to 1e-3).
    """
    if problem.data.spiked:
        return y
    y = np.array(y, dtype=float)
    y[4] = max(y[4], y[0] ** 2 + y[1] ** 2 + _EDGE * max(1.0, abs(y[4])))
    return y


def _group(near, ends: np.ndarray, ok: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Greedy grouping of the ok end points: each joins the first group whose first member it is `near`."""
    firsts: list[int] = []
    labels = np.full(len(ends), -1)
    for i in np.flatnonzero(ok):
        for j, first in enumerate(firsts):
            if near(ends[i], ends[first]):
                labels[i] = j
                break
        else:
            firsts.append(int(i))
            labels[i] = len(firsts) - 1
    return firsts, labels


def basin_shares(
    problem: FamilyProblem,
    *,
    n: int = 8,
    key,
    t_end: float = 1e5,
    tol: float = 0.05,
    saves: int = 41,
    rtol: float = 1e-3,
    atol: float = 1e-3,
) -> Basins:
    """The flow on the seven from n small starts (`problem.initial_states(key, n, "small")`): where it ends, and when
    it comes near softmax's Bayes point.

    End points are grouped when they lie within `tol` of each other (`relative_distance`, up to the task's
    symmetries); a group whose members have stopped moving (`SETTLED`) is a fixed point, classified by the
    eigenvalues of the Jacobian there. (Not by Newton's method, `flowsim.fixedpoints.attractors`: max-SLR's rule
    takes the score's part off k* through sqrt(Q_k - a^2), whose derivative the field loses where every max-SLR
    flow ends, k || k*: the Jacobian there has a zero column and Newton's steps diverge.) Each start's time to the
    Bayes point's neighbourhood is the first of the saved times (log-spaced, `saves` of them from 1e-2 to t_end)
    at which `bayes_distance` <= tol.

    **Arguments:**

    - `problem`: a `FamilyProblem` with free norms (its rules are the flow's).
    - `n`: the starts (>= 1); `key`: a PRNG key or seed.
    - `t_end`: the horizon (> 0); `tol`: the groups' and the neighbourhood's size (relative, `relative_distance`).
    - `saves`: the saved times (>= 2); `rtol`, `atol`: the Rodas5 solve's tolerances (loose: the groups are
      `tol` = 5% wide and the times read on a grid of ratio 1.5; benchmarks/family_sweep.py finds the same groups
      and times at rtol 1e-4, atol 1e-6, with 3 to 7 times the steps in max-SLR, whose field is not smooth at
      k || k*, `_inside`).

    **Returns:** a `Basins`.
    """
    if not isinstance(problem, FamilyProblem) or not problem.free:
        raise InvalidInput("basin_shares: problem must be a slr.FamilyProblem with free norms (slr.FreeNorms)")
    n, saves = check_count("n", n, 1), check_count("saves", saves, 2)
    t_end, tol = float(POSITIVE.check("t_end", t_end)), float(POSITIVE.check("tol", tol))
    y0 = problem.initial_states(as_key(key), n, "small")
    ts = _log_times(t_end, saves)
    solved = solve_flow(problem, y0, ts, rtol=rtol, atol=atol)
    ys, ends, risks = np.asarray(solved.ys), np.asarray(solved.y_final), np.asarray(solved.observed[:, -1])
    ok = np.asarray(solved.ok) & np.isfinite(ends).all(axis=1)
    target = bayes_point(problem.data)
    basins = Basins(
        [], np.full(n, -1), ok, np.full(n, np.inf), ends, 0, 0, tol, t_end, target, problem.symmetries.astype(float)
    )
    firsts, labels = _group(lambda y, first: basins.distance(y, first) <= tol, ends, ok)
    moved = relative_distance(ys[:, -1], ys[:, -2])
    groups = []
    for j, first in enumerate(firsts):
        members = labels == j
        settled, kind, eigenvalues = bool(np.all(moved[members] <= SETTLED)), "moving", np.full(7, np.nan)
        if settled:
            eigenvalues = np.linalg.eigvals(np.asarray(problem.jacobian(0.0, _inside(problem, ends[first]))))
            eigenvalues = eigenvalues[np.argsort(np.real(eigenvalues))]
            kind = classify(eigenvalues, _BAND * max(1.0, float(np.max(np.abs(eigenvalues)))))
        count = int(members.sum())
        groups.append(EndGroup(ends[first], count, count / n, float(risks[first]), settled, kind, eigenvalues))
    order = sorted(range(len(groups)), key=lambda j: -groups[j].count)
    relabel = np.append(np.argsort(order), -1)  # the old index j -> its place in `order`; -1 stays -1
    inside = basins.distance(ys, target) <= tol  # (n, times)
    return Basins(
        [groups[j] for j in order],
        relabel[labels],
        ok & (basins.distance(ends, target) <= tol),
        np.where(inside.any(axis=1), ts[np.argmax(inside, axis=1)], np.inf),
        ends,
        int(np.sum(~ok)),
        int(np.max(np.asarray(solved.num_steps))),
        tol,
        t_end,
        target,
        problem.symmetries.astype(float),
    )


# --- the figure's table ------------------------------------------------------------------------------------------


class FigureTwoRow(eqx.Module):
    """One cell of the figure: a data model (`setting` at `nu`) and a map.

    **Fields:** `setting`, `attention` (the map's name), `nu`; `optimum` (`Optimum`); `bayes` (the Bayes risk, by
    the fine rule); `basins` (`Basins`: the flow from small starts); `at_optimum`: the share of the flow's end
    points within the basins' tol of the optimum (`relative_distance`, up to the task's symmetries); `L`: the
    lengths of the setting's length law; `fine_risks`: the risk of each of the basins' groups by the fine rule, at
    the group's point put on the plane k || k*, v || v* (NaN for a group off it, `NEAR_PLANE`): against the group's
    risk by the flow's rule, what that rule costs where the flow ends.
    """

    setting: str
    attention: str
    nu: float
    L: tuple[int, ...]
    optimum: Optimum
    bayes: float
    basins: Basins
    at_optimum: float
    fine_risks: tuple[float, ...]

    @property
    def excess(self) -> float:
        return self.optimum.risk - self.bayes


class FigureTwo(eqx.Module):
    """The figure's table (`figure_two`): one `FigureTwoRow` per setting, map and nu, and what made it.

    **Fields:** `rows`; `settings`, `maps`, `nus`; `rules` (`FigureRules`); `starts` (of each optimum's search),
    `n` (flow starts per cell), `t_end`, `tol`; `estimate` and `seconds` (the estimate before work and the time
    taken).
    """

    rows: list[FigureTwoRow]
    settings: tuple[str, ...]
    maps: tuple[str, ...]
    nus: tuple[float, ...]
    rules: FigureRules
    starts: int
    n: int
    t_end: float
    tol: float
    estimate: float
    seconds: float

    def row(self, setting: str, attention: str, nu: float) -> FigureTwoRow:
        for row in self.rows:
            if row.setting == setting and row.attention == attention and row.nu == nu:
                return row
        raise KeyError((setting, attention, nu))

    def linear_excess(self) -> tuple[float, float, float] | None:
        """Linear attention's excess in spiked-SLR of fixed L at the largest nu, against their Cor. 4.3's
        L / ((L - 1) nu): (excess, L / ((L - 1) nu), their ratio), or None where the table has no such row."""
        rows = [
            row
            for row in self.rows
            if row.attention == "linear" and row.setting.startswith("spiked") and len(row.L) == 1 and row.L[0] > 1
        ]
        if not rows:
            return None
        row = max(rows, key=lambda row: row.nu)
        L = row.L[0]
        predicted = L / ((L - 1) * row.nu)
        return row.excess, predicted, row.excess / predicted


#: Seconds of compiling one (setting, map)'s programs (the search, the polish, the flow, the Jacobian) per length
#: of its length law; and of the work per start x rule point x token: a search (BFGS to its end), a polish, a flow
#: to t_end = 1e5 (about 60 Rodas5 steps at 2.5e-6 s each; from 21 steps in spiked-SLR to 370 where max-SLR's
#: flows chatter at k || k*). CPU seconds measured on the 2-core CPU (benchmarks/family_sweep.py; BENCHMARKS.md,
#: "The follow-up's Figure 2"), under a load average of 4 to 5: the estimate errs long on a machine of its own.
COMPILE_SECONDS = 14.0
SEARCH_SECONDS, POLISH_SECONDS, FLOW_SECONDS = 3e-5, 2e-6, 1.5e-4
#: Float64 values a (start x rule point x token) holds at the peak of a flow's step: the field's reverse pass and
#: its Jacobian's seven tangents.
_FLOW_VALUES = 256


def _token_points(data: DataModel, rules) -> int:
    """Rule points x tokens, summed over the lengths: what a risk's evaluation costs."""
    return sum(rule.size * L for rule, L in zip(rules, data.lengths.values, strict=True))


def figure_two_work(settings, maps, nus, *, starts: int, n: int, rules: FigureRules, candidates: int = 3):
    """The memory and time of `figure_two` (`flowsim._memory`): its compilations, and per cell a search, a polish
    and a flow, each costing its starts x rule points x tokens (`COMPILE_SECONDS`, `SEARCH_SECONDS`, ...).

    **Returns:** (needs, costs).
    """
    search = polish = flow = 0.0
    compiled, largest = 0, 0
    for setting in settings:
        data = FIGURE_TWO_SETTINGS[setting](1.0)
        coarse, fine = _token_points(data, rules.for_search(data)), _token_points(data, rules.for_plane(data))
        largest = max(largest, coarse)
        compiled += len(data.lengths.values) * len(maps)
        cells = len(maps) * len(nus)
        search += SEARCH_SECONDS * cells * starts * coarse
        polish += POLISH_SECONDS * cells * candidates * fine
        flow += FLOW_SECONDS * cells * n * coarse
    lower = "lower --starts, --n or the rules' orders, or drop settings, maps or nus"
    costs = [
        Cost(f"compiling ({compiled} programs of a setting's length and a map)", COMPILE_SECONDS * compiled, lower),
        Cost(f"the optimum's searches ({starts} starts a cell)", search, "lower starts or the search rule's order"),
        Cost("the polish on the plane (the fine rule)", polish, "lower the fine rule's order"),
        Cost(f"the flows ({n} small starts a cell)", flow, "lower n or the search rule's order"),
    ]
    needs = [
        Need(
            f"a flow's step ({n} starts x {largest} rule points x tokens)",
            float_bytes(_FLOW_VALUES, n, largest),
            "lower n or the search rule's order",
        )
    ]
    return needs, costs


#: A flow's end group is near the plane k || k*, v || v* when b, c, Q_kv, Q_k - a^2 and Q_v - e^2 are below this,
#: relative to max(1, Q_k, Q_v): the loose solve leaves up to ~1e-4 there, whose effect on the risk is second order.
NEAR_PLANE = 1e-3


@filter_jit
def _risks(data, attention, sevens, rules):
    moments = RuleMoments(data, attention, rules)
    return jax.vmap(lambda seven: fast_risk(moments, seven))(sevens)


def _fine_risks(data: DataModel, attention: AttentionMap, sevens: np.ndarray, plane_rules) -> np.ndarray:
    """The fine rule's risk at each of the sevens (n, 7) put on the plane (a, 0, 0, e, a^2, e^2, 0), or NaN where
    they are not near it (`NEAR_PLANE`). One compiled program per map and data model's lengths, whatever n."""
    a, b, c, e, q_k, q_v, q_kv = np.asarray(sevens, dtype=float).T
    off = np.max(np.abs([b, c, q_kv, q_k - a**2, q_v - e**2]), axis=0)
    near = off <= NEAR_PLANE * np.maximum(1.0, np.maximum(q_k, q_v))
    zero = np.zeros_like(a)
    plane = np.stack([a, zero, zero, e, a**2, e**2, zero], axis=-1)
    plane = np.where(near[:, None], plane, plane[np.argmax(near)] if near.any() else 0.0)
    risks = np.asarray(_risks(traced(data), attention, jnp.asarray(plane), plane_rules))
    return np.where(near, risks, np.nan)


def _names(name: str, values, allowed) -> tuple:
    values = tuple(values)
    if not values:
        raise InvalidInput(f"{name} must name at least one of {tuple(allowed)}, got none")
    for value in values:
        if value not in allowed:
            raise InvalidInput(f"{name} must be among {tuple(allowed)}, got {value!r}")
    if len(set(values)) < len(values):
        raise InvalidInput(f"{name} must not repeat a value, got {values}")
    return values


def figure_two(
    settings=tuple(FIGURE_TWO_SETTINGS),
    maps=FIGURE_TWO_MAPS,
    nus=FIGURE_TWO_NUS,
    *,
    key=0,
    starts: int = 8,
    n: int = 8,
    t_end: float = 1e5,
    tol: float = 0.05,
    rules: FigureRules | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    force: bool = False,
    unit: Callable | None = None,
) -> FigureTwo:
    """Duranthon et al.'s Figure 2 with dynamics: per setting, map and nu, the map's population optimum against the
    Bayes risk, and where the gradient flow on the seven goes from n small starts (k, v ~ N(0, 0.01 I / 100)).

    **Arguments:**

    - `settings`: names of `FIGURE_TWO_SETTINGS` (default all three); `maps`: built-in maps' names (default
      softmax, linear, softplus, erf); `nus`: the nu grid (each > 0; default `FIGURE_TWO_NUS`).
    - `key`: a PRNG key or seed: each cell's starts are drawn from it folded with the cell's index.
    - `starts`: the optimum's search starts a cell (`population_optimum`); `n`: the flow's small starts a cell.
    - `t_end`, `tol`: the flow's horizon and the Bayes point's neighbourhood (`basin_shares`).
    - `rules`: the rules' orders (a `FigureRules`; default `FigureRules()`).
    - `progress`: a progress bar over the cells; `log`: called with a line per cell as it finishes.
    - `force`: run even if estimated to take longer than an hour.
    - `unit`: a store of finished work, `unit(name, compute) -> result` (`flowsim.results.RunRecord.unit`): each
      cell is one unit, read back by a resumed run instead of computed again.

    **Returns:** a `FigureTwo`; `figure_two_text` prints it, `figure_two_figure` draws it.
    """
    settings = _names("settings", settings, FIGURE_TWO_SETTINGS)
    maps = _names("maps", maps, FIGURE_TWO_MAPS)
    nus = tuple(float(POSITIVE.check("nus", nu)) for nu in np.atleast_1d(nus))
    if not nus:
        raise InvalidInput("nus must hold at least one nu, got none")
    rules = FigureRules() if rules is None else rules
    if not isinstance(rules, FigureRules):
        raise InvalidInput(f"rules must be a slr.FigureRules, got {type(rules).__name__}")
    starts, n = check_count("starts", starts, 1), check_count("n", n, 1)
    t_end, tol = float(POSITIVE.check("t_end", t_end)), float(POSITIVE.check("tol", tol))
    key = as_key(key)
    estimate = check_work(
        "figure_two", *figure_two_work(settings, maps, nus, starts=starts, n=n, rules=rules), force=force
    )
    from tqdm.auto import tqdm

    began = time.perf_counter()
    rows = []
    cells = [(s, m, nu) for s in settings for m in maps for nu in nus]  # a (setting, map) compiles once
    for index, (setting, attention, nu) in enumerate(tqdm(cells, unit="cell", disable=not progress)):
        cell_key = jax.random.fold_in(key, index)
        compute = functools.partial(_cell, setting, attention, nu, cell_key, starts, n, t_end, tol, rules)
        row = compute() if unit is None else unit(unit_name(f"{setting}-{attention}-nu={nu:g}"), compute)
        rows.append(row)
        if log is not None:
            log(_row_line(row))
    return FigureTwo(rows, settings, maps, nus, rules, starts, n, t_end, tol, estimate, time.perf_counter() - began)


def _cell(setting, attention, nu, key, starts, n, t_end, tol, rules) -> FigureTwoRow:
    """One cell of `figure_two`: the optimum of `attention` in `setting` at `nu`, and the flow's basins."""
    data = FIGURE_TWO_SETTINGS[setting](nu)
    search, plane = rules.for_search(data), rules.for_plane(data)
    key_search, key_flow = jax.random.split(key)
    optimum = population_optimum(
        data, attention, starts=starts, key=key_search, rules=search, plane_rules=plane, tol=tol
    )
    problem = FamilyProblem(data, attention, rules=search)
    basins = basin_shares(problem, n=n, key=key_flow, t_end=t_end, tol=tol)
    bayes = float(bayes_risk(data, plane))
    # The groups' points padded to n rows: one program whatever the number of groups.
    points = np.array([group.point for group in basins.groups] + [basins.bayes] * (n - len(basins.groups)))
    fine = tuple(float(r) for r in _fine_risks(data, problem.attention, points, plane)[: len(basins.groups)])
    at_optimum = basins.share_near(optimum.seven)
    return FigureTwoRow(setting, attention, nu, data.lengths.values, optimum, bayes, basins, at_optimum, fine)


def _time_text(basins: Basins) -> str:
    reached = np.isfinite(basins.time_to_bayes)
    if not reached.any():
        return "never"
    return f"{np.median(basins.time_to_bayes[reached]):.3g} ({int(reached.sum())}/{basins.n})"


#: A flow's end whose risk by the flow's rule is off by more than this (relative) from the fine rule's is flagged.
FLAGGED = 0.01


def _flow_rule_error(row: FigureTwoRow) -> float:
    """The largest relative difference, over the flow's groups near the plane, of the flow rule's risk from the fine
    rule's (0 where none is near it)."""
    errors = [abs(g.risk / f - 1) for g, f in zip(row.basins.groups, row.fine_risks, strict=True) if math.isfinite(f)]
    return max(errors, default=0.0)


def _shares_text(row: FigureTwoRow) -> str:
    """Each group of the flow's end points: its share, kind and risk (the flow's rule), marked `Bayes` (within tol
    of softmax's Bayes point) or `optimum` (of the map's optimum), with |k|^2 and |v|^2 where still moving, and
    flagged where the flow's rule is off by more than `FLAGGED` there; then the failed solves."""
    basins, parts = row.basins, []
    for group, fine in zip(basins.groups, row.fine_risks, strict=True):
        where = ""
        if basins.distance(group.point, basins.bayes) <= basins.tol:
            where = " Bayes"
        elif basins.distance(group.point, row.optimum.seven) <= basins.tol:
            where = " optimum"
        size = "" if group.settled else f" (|k|^2 {group.point[4]:.3g}, |v|^2 {group.point[5]:.3g})"
        error = abs(group.risk / fine - 1) if math.isfinite(fine) else 0.0
        off = f" [flow rule off by {100 * error:.2g}% there]" if error > FLAGGED else ""
        parts.append(f"{group.share:.2f} {group.kind} R {group.risk:.4g}{where}{size}{off}")
    if basins.failed:
        parts.append(f"{basins.failed / basins.n:.2f} failed")
    return "; ".join(parts)


def _row_line(row: FigureTwoRow) -> str:
    return (
        f"{row.setting}, {row.attention}, nu {row.nu:g}: optimum {row.optimum.risk:.6g} (Bayes {row.bayes:.6g}, "
        f"excess {row.excess:.3g}); flow: {_shares_text(row)}; time to Bayes {_time_text(row.basins)}"
    )


def _ordering(result: FigureTwo, setting: str, nu: float) -> str:
    """The maps by their optimum's risk, lowest first (those without a finite optimum left out, and named)."""
    rows = [result.row(setting, m, nu) for m in result.maps]
    found = sorted((row for row in rows if math.isfinite(row.optimum.risk)), key=lambda row: row.optimum.risk)
    missing = [row.attention for row in rows if not math.isfinite(row.optimum.risk)]
    return " < ".join(row.attention for row in found) + (f" (no optimum: {', '.join(missing)})" if missing else "")


def figure_two_text(result: FigureTwo) -> str:
    """The figure's table and what it shows, as Markdown text: the table, softmax's excess, linear attention's
    excess against their Cor. 4.3, the maps' ordering, and where the flows from small starts end."""
    sizes = []
    for setting in result.settings:
        data = FIGURE_TWO_SETTINGS[setting](1.0)
        search, fine = result.rules.for_search(data), result.rules.for_plane(data)
        sizes.append(f"{setting}: {' + '.join(str(r.size) for r in search)} / {' + '.join(str(r.size) for r in fine)}")
    lines = [
        "# The follow-up's Figure 2 with dynamics (Duranthon et al., ICLR 2026)",
        "",
        f"Optimum: the lowest risk over the seven (free norms, ridge 0) of {result.starts} BFGS searches in R^4 x R^4 "
        "by the search rule, polished on the plane k || k*, v || v* (where every optimum lies) by the fine rule, "
        "which also gives the Bayes risk. Flow: the gradient flow on the seven from "
        f"{result.n} small starts (k, v ~ N(0, 0.01 I / 100) in R^100) to t = {result.t_end:g} (Rodas5, the search "
        f"rule), its end points grouped within {result.tol:g} of each other (max over the seven of |y - y'| / "
        "max(1, |y'|), up to the task's symmetries): a settled group is a fixed point (its kind from the Jacobian's "
        "eigenvalues), a moving one is still on its way at t_end (|k|^2, |v|^2 given); R: the search rule's risk "
        "there, flagged where the fine rule differs by more than 1%. Time to Bayes: the median first time within "
        f"{result.tol:g} of softmax's Bayes point, among the starts that come there. Rules (Gauss-Hermite over the "
        "tokens' orbits; points per length, search / fine): " + "; ".join(sizes) + ".",
        "",
        "| setting | map | nu | optimum risk | Bayes risk | excess | search starts at the optimum "
        "| flow: fixed points reached (share, kind, risk) | flow at the optimum | time to Bayes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result.rows:
        optimum = row.optimum
        lines.append(
            f"| {row.setting} | {row.attention} | {row.nu:g} | {optimum.risk:.6f} | {row.bayes:.6f} | "
            f"{row.excess:.2e} | {optimum.near_best}/{optimum.starts} | {_shares_text(row)} | {row.at_optimum:.2f} | "
            f"{_time_text(row.basins)} |"
        )
    lines.append("")
    softmax = [row for row in result.rows if row.attention == "softmax" and math.isfinite(row.excess)]
    if softmax:
        worst = max(softmax, key=lambda row: abs(row.excess) / row.bayes)
        lines.append(
            f"- Softmax's optimum against the Bayes risk: largest |excess| {abs(worst.excess):.2g} "
            f"({abs(worst.excess) / worst.bayes:.2g} relative; {worst.setting}, nu {worst.nu:g})."
        )
    linear = result.linear_excess()
    if linear is not None:
        excess, predicted, ratio = linear
        row = max(
            (r for r in result.rows if r.attention == "linear" and r.setting.startswith("spiked")), key=lambda r: r.nu
        )
        L = row.L[0]
        exact = L * (L - 1) / (L**2 + row.nu * (L - 1))
        lines.append(
            f"- Linear attention in {row.setting} at nu = {row.nu:g}: excess {excess:.4g} against their Cor. 4.3's "
            f"L / ((L - 1) nu) = {predicted:.4g}: ratio {ratio:.3f}. (Its optimum on the plane is "
            f"L (L - 1) / (L^2 + nu (L - 1)) = {exact:.6g} in closed form, the table's to "
            f"{abs(row.optimum.risk - exact):.1g}; it tends to L / nu as nu grows, their L / ((L - 1) nu) at L = 2, "
            "while the Bayes risk falls exponentially.)"
        )
    for setting in result.settings:
        orders = {nu: _ordering(result, setting, nu) for nu in result.nus}
        groups: dict[str, list[float]] = {}
        for nu, order in orders.items():
            groups.setdefault(order, []).append(nu)
        text = "; ".join(f"{order} (nu = {', '.join(f'{nu:g}' for nu in nus)})" for order, nus in groups.items())
        lines.append(f"- Ordering of the optima, {setting}: {text}.")
    for setting in result.settings:
        for attention in result.maps:
            rows = [r for r in result.rows if r.setting == setting and r.attention == attention]
            bayes = [r.nu for r in rows if r.basins.bayes_share == 1]
            optimum = [r.nu for r in rows if r.at_optimum == 1]
            if attention == "softmax":
                what = f"every start reaches the Bayes point at nu = {', '.join(f'{nu:g}' for nu in bayes) or 'none'}"
            else:
                listed = ", ".join(f"{nu:g}" for nu in optimum) or "none"
                what = f"every start ends at the map's optimum at nu = {listed}"
            others = [r for r in rows if (r.basins.bayes_share < 1 if attention == "softmax" else r.at_optimum < 1)]
            if others:
                what += "; elsewhere: " + "; ".join(f"nu {r.nu:g}: {_shares_text(r)}" for r in others)
            lines.append(f"- Flow, {setting}, {attention}: {what}.")
    lines.append(
        f"\nTook {result.seconds:.0f} s (estimated before work: {result.estimate:.0f} s); {len(result.rows)} cells."
    )
    return "\n".join(lines)


#: One colour per built-in map, as in `slr.advantage_figure`.
_COLOURS = {"softmax": "tab:red", "linear": "tab:gray", "softplus": "tab:green", "erf": "tab:blue"}


def figure_two_figure(result: FigureTwo):
    """Their Figure 2 with dynamics: per setting (a column), the optimum's risk of each map against nu with the Bayes
    risk (top), and the share of the flow's small starts that end at each map's optimum (bottom).

    **Returns:** a matplotlib Figure, with the result as `flowsim_figure_two`.
    """
    import matplotlib.pyplot as plt

    from flowsim.figures import LABEL_SIZE, LEGEND_SIZE, TICK_SIZE, TITLE_SIZE

    columns = len(result.settings)
    fig, axes = plt.subplots(
        2, columns, figsize=(max(5.2 * columns, 8.0), 8.0), squeeze=False, sharex=True, layout="constrained",
        gridspec_kw={"height_ratios": [2, 1]},
    )  # fmt: skip
    nus = np.asarray(result.nus)
    markers = dict(zip(result.maps, ("o", "s", "^", "D", "v", "P"), strict=False))
    for column, setting in enumerate(result.settings):
        top, bottom = axes[0, column], axes[1, column]
        for size, attention in enumerate(result.maps):
            rows = [result.row(setting, attention, nu) for nu in result.nus]
            style = dict(color=_COLOURS.get(attention), marker=markers.get(attention, "o"), markersize=9 - 1.5 * size)
            top.plot(nus, [row.optimum.risk for row in rows], label=attention, **style)
            bottom.plot(nus, [row.at_optimum for row in rows], label=attention, **style)
            flagged = [_flow_rule_error(row) > FLAGGED for row in rows]
            if any(flagged):
                shares = np.array([row.at_optimum for row in rows])
                bottom.plot(nus[flagged], shares[flagged], "kx", markersize=12, mew=2, zorder=4)
        bayes = [result.row(setting, result.maps[0], nu).bayes for nu in result.nus]
        top.plot(nus, bayes, "k--", linewidth=1.5, label="Bayes risk")
        top.set_title(setting, fontsize=TITLE_SIZE)
        top.set_yscale("log")
        bottom.set_ylim(-0.05, 1.05)
        bottom.set_xlabel(r"$\nu$", fontsize=LABEL_SIZE)
        for ax in (top, bottom):
            ax.tick_params(labelsize=TICK_SIZE)
            ax.grid(True, color="0.9", lw=0.8, zorder=0)
    axes[0, 0].set_ylabel("population risk at the optimum", fontsize=LABEL_SIZE)
    axes[1, 0].set_ylabel(f"share of {result.n} small starts\nwhose flow ends there", fontsize=LABEL_SIZE)
    axes[0, -1].legend(fontsize=LEGEND_SIZE)
    fig.suptitle(
        "Optimum's risk against the Bayes risk (top);\nsmall starts whose flow ends there (bottom; "
        "x: the flow's rule off by > 1% there)",
        fontsize=TITLE_SIZE,
    )
    fig.flowsim_figure_two = result
    return fig


def figure_two_records(result: FigureTwo) -> list[dict]:
    """One JSON-ready record per cell: the optimum (risk, seven, starts at it, runaways), the Bayes risk, and the
    flow's groups (share, kind, settled, risk by the flow's rule and by the fine rule, point) and times to Bayes."""
    records = []
    for row in result.rows:
        optimum, basins = row.optimum, row.basins
        groups = [
            {
                "share": group.share,
                "kind": group.kind,
                "settled": group.settled,
                "risk": group.risk,
                "fine_risk": fine if math.isfinite(fine) else None,
                "point": [float(x) for x in group.point],
                "at_bayes": bool(basins.distance(group.point, basins.bayes) <= basins.tol),
                "at_optimum": bool(basins.distance(group.point, optimum.seven) <= basins.tol),
            }
            for group, fine in zip(basins.groups, row.fine_risks, strict=True)
        ]
        times = [float(t) if math.isfinite(t) else None for t in basins.time_to_bayes]
        records.append(
            {
                "setting": row.setting,
                "attention": row.attention,
                "nu": row.nu,
                "optimum_risk": optimum.risk,
                "optimum_seven": [float(x) for x in optimum.seven],
                "optimum_polished": optimum.polished,
                "search_starts_at_optimum": optimum.near_best,
                "search_starts": optimum.starts,
                "search_runaway": optimum.runaway,
                "bayes_risk": row.bayes,
                "excess": row.excess,
                "flow_groups": groups,
                "flow_at_optimum": row.at_optimum,
                "flow_at_bayes": basins.bayes_share,
                "time_to_bayes": times,
                "flow_failed": basins.failed,
                "flow_steps": basins.steps,
            }
        )
    return records
