"""Where several heads end: specialised, collapsed, partial or none (docs/heads.md).

A head h *takes* location j when |<k_h, k*_j>| >= k_threshold and |<v_h, v*_j>| >= v_threshold (a head taking
several is counted on the one where the smaller of the two is largest). An end state is

- **specialised** when every location is taken (each by its own head, since a head is counted on one);
- **collapsed** when it is not, and two heads or more take one location;
- **partial** when neither, and some head takes a location;
- **none** when no head takes any.

The rule reads the order parameters only (`slr.HeadsProblem`'s state), so that it classifies the flow's end states
and SGD's in R^d identically (`classify_heads`). The thresholds' default, 0.3 for both, lies between what chance
gives and what the authors printed (Marion et al., appendix E.3, their toy-multihead notebook: final |<k_h, k*_j>|
about 0.45-0.52 for specialised heads, 0.73-0.77 for two heads on one location): a unit vector uniform on the
sphere of R^80 has |<k, k*>| >= 0.3 with probability 0.7 % (|N(0, 1/80)| beyond 2.7 standard deviations), and a
head with both its overlaps there by chance, 5e-5.

`outcome_shares` sets the shares of many seeds beside the authors' 20 runs (5 specialised, 10 collapsed, 1 partial,
4 none) with exact binomial (Clopper-Pearson) intervals; `reproduce_heads` runs their experiment in R^d, seeds in
resumable blocks, and the population flow from the same starts.
"""

from collections.abc import Callable

import equinox as eqx
import numpy as np

from flowsim._checks import InvalidInput, as_key, check_count
from flowsim._memory import check_work
from flowsim.integrate import solve_flow
from flowsim.tasks.slr._heads_problem import HeadsProblem
from flowsim.tasks.slr._heads_sgd import heads_sgd_work, run_heads_sgd
from flowsim.tasks.slr._heads_state import HeadsLayout, heads_layout

__all__ = [
    "AUTHORS_OUTCOMES",
    "AUTHORS_RUNS",
    "K_THRESHOLD",
    "OUTCOMES",
    "V_THRESHOLD",
    "HeadsReproduction",
    "OutcomeShare",
    "check_threshold",
    "classify_heads",
    "head_locations",
    "outcome_shares",
    "reproduce_heads",
]

#: The outcomes, in the order of their codes (`classify_heads`).
OUTCOMES = ("specialised", "collapsed", "partial", "none")
#: The default thresholds on |<k_h, k*_j>| and |<v_h, v*_j>| (module docstring).
K_THRESHOLD = V_THRESHOLD = 0.3
#: The authors' outcomes of their two-head experiment, of 20 runs (Marion et al., appendix E.3: printed alignments).
AUTHORS_OUTCOMES = {"specialised": 5, "collapsed": 10, "partial": 1, "none": 4}
AUTHORS_RUNS = 20


def check_threshold(name: str, value) -> float:
    """A threshold in the open interval (0, 1), else `InvalidInput` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating) or not 0 < value < 1:
        raise InvalidInput(f"{name} must be a number in the open interval (0, 1), got {value!r}")
    return float(value)


def _layout(layout) -> HeadsLayout:
    if isinstance(layout, HeadsLayout):
        return layout
    if isinstance(layout, tuple) and len(layout) == 2:
        return heads_layout(*layout)
    raise InvalidInput(f"layout must be a HeadsLayout or (heads, locations), got {layout!r}")


def head_locations(states, layout, k_threshold: float = K_THRESHOLD, v_threshold: float = V_THRESHOLD) -> np.ndarray:
    """The location each head takes (module docstring), -1 where it takes none.

    **Arguments:** `states` (..., n), order parameters in `layout`'s order (`slr.HeadsProblem.state_names`);
    `layout`: a `HeadsLayout` or (H, S); the thresholds, each in (0, 1).

    **Returns:** integers (..., H).
    """
    layout = _layout(layout)
    k_threshold = check_threshold("k_threshold", k_threshold)
    v_threshold = check_threshold("v_threshold", v_threshold)
    states = np.asarray(states, dtype=float)
    if states.shape[-1:] != (layout.dimension,):
        raise InvalidInput(
            f"states must have shape (..., {layout.dimension}) for H = {layout.heads}, S = {layout.locations}, "
            f"got {states.shape}"
        )
    kappa, nu = np.abs(states[..., layout.kappa]), np.abs(states[..., layout.nu])  # (..., H, S)
    takes = (kappa >= k_threshold) & (nu >= v_threshold)  # NaN compares False: a non-finite head takes nothing
    strength = np.where(takes, np.minimum(kappa, nu), -1.0)
    return np.where(takes.any(axis=-1), np.argmax(strength, axis=-1), -1)


def classify_heads(states, layout, k_threshold: float = K_THRESHOLD, v_threshold: float = V_THRESHOLD) -> np.ndarray:
    """The outcome of each state: an index into `OUTCOMES` (module docstring).

    **Arguments:** `states` (..., n): order parameters of the flow or of SGD (`slr.HeadsProblem`'s state); `layout`:
    a `HeadsLayout` or (H, S); `k_threshold`, `v_threshold`: in (0, 1) (default 0.3 each).

    **Returns:** integers (...): 0 specialised, 1 collapsed, 2 partial, 3 none.
    """
    layout = _layout(layout)
    location = head_locations(states, layout, k_threshold, v_threshold)
    on = location[..., None] == np.arange(layout.locations)  # (..., H, S)
    per_location = on.sum(axis=-2)
    specialised = (per_location >= 1).all(axis=-1)
    collapsed = ~specialised & (per_location >= 2).any(axis=-1)
    partial = ~specialised & ~collapsed & (location >= 0).any(axis=-1)
    return np.select([specialised, collapsed, partial], [0, 1, 2], 3)


class OutcomeShare(eqx.Module):
    """One outcome's share of n runs beside the authors'.

    **Fields:** `outcome`; `count` of `n`; `share`; `low`, `high`: its exact binomial (Clopper-Pearson) interval at
    `confidence`; `authors`, `authors_n`: the authors' count of their runs, `authors_share`, and their interval
    `authors_low`, `authors_high`; `inside`: whether the authors' share lies in this run's interval; `p_value`:
    Fisher's exact test of one share in both (two-sided).
    """

    outcome: str
    count: int
    n: int
    share: float
    low: float
    high: float
    confidence: float
    authors: int
    authors_n: int
    authors_share: float
    authors_low: float
    authors_high: float
    inside: bool
    p_value: float


def _interval(count: int, n: int, confidence: float) -> tuple[float, float]:
    from scipy import stats  # here, not at import: scipy.stats is a third of `import flowsim` (flowsim.quadrature)

    interval = stats.binomtest(count, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)


def outcome_shares(codes, confidence: float = 0.95) -> list[OutcomeShare]:
    """The share of each outcome among runs with finite end states, with its exact binomial interval, beside the
    authors' 20 runs (`AUTHORS_OUTCOMES`).

    **Arguments:** `codes`: outcomes of `classify_heads` (n,); runs that did not end (diverged, interrupted) are left
    out by the caller; `confidence` in (0, 1).

    **Returns:** one `OutcomeShare` per outcome, in `OUTCOMES`' order.
    """
    codes = np.asarray(codes).ravel()
    confidence = check_threshold("confidence", confidence)
    n = check_count("runs", codes.size, 1)
    from scipy import stats

    rows = []
    for code, outcome in enumerate(OUTCOMES):
        count = int(np.sum(codes == code))
        low, high = _interval(count, n, confidence)
        authors = AUTHORS_OUTCOMES[outcome]
        authors_low, authors_high = _interval(authors, AUTHORS_RUNS, confidence)
        p_value = stats.fisher_exact([[count, n - count], [authors, AUTHORS_RUNS - authors]]).pvalue
        rows.append(
            OutcomeShare(
                outcome, count, n, count / n, low, high, confidence, authors, AUTHORS_RUNS,
                authors / AUTHORS_RUNS, authors_low, authors_high, bool(low <= authors / AUTHORS_RUNS <= high),
                float(p_value),
            )
        )  # fmt: skip
    return rows


class HeadsReproduction(eqx.Module):
    """The authors' two-head experiment (or any `slr.HeadsProblem`'s) repeated over many seeds (`reproduce_heads`).

    **Fields:**

    - `problem`; `lr`, `steps`, `batch`: SGD's; `k_threshold`, `v_threshold`: the outcome rule's.
    - `logged_steps` (logs,); `states` (seeds, logs, n): each seed's order parameters along SGD, its start first
      (the flow's start); `risk` (seeds, logs): their population risk.
    - `ended` (seeds,): whether SGD ran to its end with finite heads (the others are left out of the shares).
    - `outcomes` (seeds,): SGD's end states classified (`classify_heads`; -1 where not `ended`); `shares`: their
      `outcome_shares`.
    - `flow_final` (seeds, n), `flow_outcomes`, `flow_shares`: the population flow from the same starts to
      t = lr * steps under the same schedule, classified by the same rule (None where not asked for; outcomes -1
      where the solve failed).
    """

    problem: HeadsProblem
    lr: float
    steps: int
    batch: int
    k_threshold: float
    v_threshold: float
    logged_steps: np.ndarray
    states: np.ndarray
    risk: np.ndarray
    ended: np.ndarray
    outcomes: np.ndarray
    shares: list
    flow_final: np.ndarray | None
    flow_outcomes: np.ndarray | None
    flow_shares: list | None

    @property
    def initial(self) -> np.ndarray:
        """Each seed's initial order parameters (seeds, n): where the flow starts."""
        return self.states[:, 0]

    @property
    def final(self) -> np.ndarray:
        """SGD's end states (seeds, n)."""
        return self.states[:, -1]


def _classified(states, ended, layout, k_threshold, v_threshold) -> np.ndarray:
    codes = classify_heads(np.where(ended[:, None], states, 0.0), layout, k_threshold, v_threshold)
    return np.where(ended, codes, -1)


def reproduce_heads(
    problem: HeadsProblem,
    key,
    *,
    seeds: int = 200,
    block: int = 50,
    lr: float = 1e-3,
    steps: int = 100_000,
    batch: int = 5,
    log_every: int = 1000,
    k_threshold: float = K_THRESHOLD,
    v_threshold: float = V_THRESHOLD,
    flow: bool = True,
    draws: str = "float32",
    shared_noise: bool = False,
    unit: Callable | None = None,
    log: Callable[[str], None] | None = None,
    force: bool = False,
) -> HeadsReproduction:
    """Projected SGD of the problem's heads in R^d from `seeds` seeds, their outcomes beside the authors', and the
    population flow from the same starts.

    **Arguments:**

    - `problem`: a `slr.HeadsProblem` (the authors' experiment: `slr.marion_slr(80, 10, sqrt(1/2), 0.1, locations=2)`,
      H = 2, lam = `InverseTimeDecay(2.0, 2e-4, 1e-3, until=25_000)`).
    - `key`: a PRNG key or an integer seed; seed i is `run_heads_sgd`'s seed i (`fold_in(key, i)`), whatever `block`.
    - `seeds` (>= 1); `block`: seeds per unit of work (>= 1); `lr`, `steps`, `batch`, `log_every`, `draws`: as
      `run_heads_sgd`; `shared_noise`: SGD's batches with the authors' quirk (`run_heads_sgd`; the flow is the
      model's, so that the flow is then left out).
    - `k_threshold`, `v_threshold`: the outcome rule's, in (0, 1).
    - `flow`: also solve the population flow from every seed's start to t = lr * steps (`flowsim.solve_flow`).
    - `unit`: a store of finished work, `unit(name, compute) -> result` (`flowsim.results.RunRecord.unit`): each
      block of seeds, and the flow, is one unit, read back by a resumed run.
    - `log`: called with a line as each unit finishes.
    - `force`: run even if the estimate before work says it takes hours.

    **Returns:** a `HeadsReproduction`.
    """
    if not isinstance(problem, HeadsProblem):
        raise InvalidInput(f"problem must be a slr.HeadsProblem, got {type(problem).__name__}")
    k_threshold = check_threshold("k_threshold", k_threshold)
    v_threshold = check_threshold("v_threshold", v_threshold)
    seeds, block = check_count("seeds", seeds, 1), check_count("block", block, 1)
    key = as_key(key)
    options = dict(lr=lr, steps=steps, batch=batch, log_every=log_every, draws=draws, shared_noise=shared_noise)
    logs = steps // max(1, log_every)
    # The memory of a block of seeds (they run one block at a time), the time of them all.
    needs = heads_sgd_work(problem, min(block, seeds), steps, batch, logs, draws)[0]
    costs = heads_sgd_work(problem, seeds, steps, batch, logs, draws)[1]
    flow = flow and not shared_noise
    if flow:
        costs.append(problem.flow_cost(seeds, lr * steps, "lower the seeds, or leave the flow out"))
    check_work("reproduce_heads", needs, costs, force=force)
    store = unit if unit is not None else (lambda name, compute: compute())
    say = log if log is not None else (lambda line: None)
    pieces = []
    for first in range(0, seeds, block):
        count = min(block, seeds - first)

        def compute(first=first, count=count):
            run = run_heads_sgd(problem, key, seeds=count, first_seed=first, force=True, **options)
            return {
                "steps": np.asarray(run.steps),
                "states": np.asarray(run.ys),
                "risk": np.asarray(run.risk),
                "ended": np.asarray(run.status) == 0,
            }

        pieces.append(store(f"sgd-seeds-{first}-{first + count - 1}", compute))
        say(f"SGD: seeds {first} to {first + count - 1} of {seeds} done")
    states = np.concatenate([piece["states"] for piece in pieces])
    risk = np.concatenate([piece["risk"] for piece in pieces])
    ended = np.concatenate([piece["ended"] for piece in pieces]) & np.isfinite(states[:, -1]).all(axis=-1)
    layout = problem.layout
    outcomes = _classified(states[:, -1], ended, layout, k_threshold, v_threshold)
    shares = outcome_shares(outcomes[ended]) if ended.any() else []
    flow_final = flow_outcomes = flow_shares = None
    if flow:
        t_end = float(lr * steps)

        def solve():
            solved = solve_flow(problem, states[:, 0], np.array([0.0, t_end]))
            return {"final": np.asarray(solved.y_final), "ok": np.asarray(solved.ok)}

        flowed = store("flow", solve)
        say(f"the flow from the {seeds} starts to t = {t_end:g} done")
        flow_final = flowed["final"]
        solved = flowed["ok"] & np.isfinite(flow_final).all(axis=-1)
        flow_outcomes = _classified(flow_final, solved, layout, k_threshold, v_threshold)
        flow_shares = outcome_shares(flow_outcomes[solved]) if solved.any() else []
    return HeadsReproduction(
        problem, float(lr), int(steps), int(batch), k_threshold, v_threshold, pieces[0]["steps"], states, risk,
        ended, outcomes, shares, flow_final, flow_outcomes, flow_shares,
    )  # fmt: skip
