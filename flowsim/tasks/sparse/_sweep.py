"""The scaling law: the critical sample size m*(T) of each learner and training budget over a range of T,
against the limits, with three laws fitted and compared.

For each learner, budget and T: m*(T) with its bootstrap interval (`critical_sample_size`), or measured by R
independent searches (`repeats`: the median of their m* with an interval over them, `RepeatedSize`), the information
limit log2 C(T, s) and the median ERM identifiability m_50%. Each (learner, budget) curve is fitted by
weighted least squares (weights from the repetitions' spread, or from one search's interval and resolution) against
a constant, a + b ln T, a + b T and a T^b, each with 95 % parameter intervals, chi^2 and AIC; the verdict names the
law of least AIC, or the laws within 2 of it when the data do not tell them apart.
"""

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import numpy as np

from flowsim._checks import InvalidInput, as_floats, as_key, at_least, check_count, check_entries, wrong_shape
from flowsim.tasks.sparse._critical import critical_sample_size
from flowsim.tasks.sparse._data import SparseTarget
from flowsim.tasks.sparse._limits import erm_identifiability, information_limit
from flowsim.tasks.sparse._repeats import RepeatedSize, repeated_sigma, repeated_size, search_key
from flowsim.tasks.sparse._train import LEARNERS

__all__ = [
    "BUDGETS",
    "DEFAULT_REPEATS",
    "DEFAULT_TS",
    "EXTENDED_BUDGETS",
    "EXTENDED_TS",
    "LAWS",
    "MLP_SPAN",
    "MLP_TS",
    "PAPER_POINTS",
    "TRANSFORMER_TS",
    "Fit",
    "Sweep",
    "critical_sigma",
    "fit_scaling",
    "paper_table",
    "read_sweep",
    "selection_table",
    "sweep",
    "sweep_figure",
    "sweep_table",
    "verdict",
]

#: The default input lengths of the head and the control: 16 to 256, chosen with `BUDGETS` and `DEFAULT_REPEATS` so that
#: the default sweep (the control and the head) finishes within 20 minutes on 2 CPU cores (docs/science.md section 8):
#: the decade where the control's m* rises and the head's budget does not change its m*.
DEFAULT_TS = (16, 32, 64, 128, 256)
#: The default training budget: 1000 steps (the paper's; at T <= 256 the head needs the same m* trained to convergence).
BUDGETS = (1000,)
#: The default number of independent searches per (learner, budget, T): m* is their median (`RepeatedSize`).
DEFAULT_REPEATS = 3
#: The input lengths and budgets of the sweep that extends the default to the paper's scale (its command is printed by
#: the default's): T = 16 ... 4096, 1000 steps and to convergence, the Transformer as well.
EXTENDED_TS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
EXTENDED_BUDGETS = (1000, "converged")
#: The MLP's default input lengths and search span: it needs samples growing like T (measured 72 to 543 over
#: T = 16 ... 128), beyond the head's span of 8 log2 C(T, s); at T = 2048 its padded training sets would
#: not fit in memory.
MLP_TS = (16, 32, 64, 128)
MLP_SPAN = 64.0
#: The Transformer's default input lengths: a width-64, 16-head layer costs about ten heads' work per sample,
#: so on 2 CPU cores it is swept over one decade, including the paper's T = 100 and 200 (docs/science.md); on a
#: GPU, T = 16 ... 4096 takes minutes (--transformer-Ts).
TRANSFORMER_TS = (16, 32, 64, 100, 200)
#: Edelman et al.'s critical sample sizes for the 3-AND read off their figure (a one-layer Transformer, their
#: protocol): rows (T, m*, bar low, bar high); at T = 100 the bar is hidden by the marker (NaN).
PAPER_POINTS = np.array(
    [
        (100, 50.0, np.nan, np.nan), (150, 52.8, 48, 57), (200, 57.7, 53, 62), (250, 56.0, 51, 61),
        (300, 69.2, 62, 77), (350, 61.0, 54, 68), (400, 79.5, 75, 84), (450, 82.4, 77, 88), (500, 80.4, 72, 89),
        (550, 85.2, 78, 93), (600, 94.1, 84, 104), (650, 96.7, 82, 112), (700, 88.9, 79, 99),
        (750, 101.4, 91, 112), (800, 99.7, 87, 112), (900, 108.4, 105, 112), (1000, 111.0, 106, 116),
        (1100, 113.4, 108, 119),
    ]
)  # fmt: skip
#: The laws compared: name -> (formula, number of parameters).
LAWS = {"constant": ("a", 1), "log": ("a + b ln T", 2), "linear": ("a + b T", 2), "power": ("a T^b", 2)}


class Fit(NamedTuple):
    """A weighted least-squares fit of m* against T.

    **Fields:** `law` (its formula); `a`, `b` (parameters; b = 0 for the constant) and their 95 % intervals
    `a_interval`, `b_interval` (from the covariance, inflated by sqrt(chi^2 / dof) when that exceeds 1);
    `r2` (1 - SS_res / SS_tot on m*, unweighted); `residuals` (m* - fitted); `chi2` (sum of squared
    residuals over sigma^2); `aic` (chi^2 + 2k with the sigmas known, or n ln(SS_res / n) + 2(k + 1) with
    unit weights); `p_value` (of chi^2 on n - k degrees of freedom; NaN with unit weights).
    """

    law: str
    a: float
    b: float
    a_interval: tuple[float, float]
    b_interval: tuple[float, float]
    r2: float
    residuals: np.ndarray
    chi2: float
    aic: float
    p_value: float

    def __call__(self, T):
        T = np.asarray(T, float)
        return _law(self.law)(T, self.a, self.b)


def _law(formula):
    return {
        "a": lambda T, a, b: a + 0.0 * T,
        "a + b ln T": lambda T, a, b: a + b * np.log(T),
        "a + b T": lambda T, a, b: a + b * T,
        "a T^b": lambda T, a, b: a * T**b,
    }[formula]


def _law_jacobian(formula):
    """The law's derivatives in (a, b), one column each. Given to the fit, so that its covariance is exact: a
    finite difference in a parameter that converged near 0 steps below float64's resolution of the law's values,
    which left a zero column and an infinite covariance (an exact fit m* = log2 T did)."""
    return {
        "a + b ln T": lambda T, a, b: np.stack([np.ones_like(T), np.log(T)], axis=-1),
        "a + b T": lambda T, a, b: np.stack([np.ones_like(T), T], axis=-1),
        "a T^b": lambda T, a, b: np.stack([T**b, a * T**b * np.log(T)], axis=-1),
    }[formula]


def fit_scaling(T, m, sigma=None) -> dict[str, Fit]:
    """Fits of m* against T by the laws of `LAWS`, weighted by the noise of each m*.

    **Arguments:** `T` (finite, > 0, at least as many distinct values as a law has parameters), `m` (m* at each
    T, at least 3, finite and > 0); `sigma` (the standard error of each m*, e.g. from `critical_sigma`; default:
    unit weights, ordinary least squares).

    **Returns:** {"constant": ..., "log": ..., "linear": ..., "power": ...}, each a `Fit`.
    """
    m = as_floats("m", m)
    if m.ndim != 1 or len(m) < 3 or not (np.isfinite(m) & (m > 0)).all():
        raise InvalidInput(f"m must hold at least 3 finite values of m*, each > 0, got {m.tolist()}")
    T = np.asarray(check_entries("T", T, "finite numbers > 0", lambda T: np.isfinite(T) & (T > 0)), float)
    if T.shape != m.shape:
        raise wrong_shape("T", f"{m.shape}, one T per m*", T.shape)
    parameters = max(k for _, k in LAWS.values())
    if len(np.unique(T)) < parameters:  # else a law's parameters are not determined: infinite intervals
        raise InvalidInput(
            f"T must hold at least {parameters} distinct values, as many as the parameters of the laws "
            f"{', '.join(formula for formula, k in LAWS.values() if k == parameters)}, got {T.tolist()}"
        )
    known = sigma is not None
    sigma = np.ones_like(m) if sigma is None else as_floats("sigma", sigma)
    if sigma.shape != m.shape or not (np.isfinite(sigma) & (sigma > 0)).all():
        raise InvalidInput(f"sigma must hold one positive number per m* (finite), got {sigma.tolist()}")
    import scipy.optimize  # here, not at import: with scipy.stats, 0.4-0.65 s of every command's start-up
    import scipy.stats

    fits = {}
    for name, (formula, k) in LAWS.items():
        law = _law(formula)
        if name == "power":
            slope, log_a = np.polyfit(np.log(T), np.log(m), 1, w=m / sigma)  # the start: a log-log fit
            start = (float(np.exp(log_a)), float(slope))
        else:
            start = (float(np.mean(m)), 0.0)
        if k == 1:
            weights = sigma**-2
            a = float(np.sum(weights * m) / np.sum(weights))
            params, covariance = np.array([a, 0.0]), np.diag([1.0 / np.sum(weights), 0.0])
        else:
            params, covariance = scipy.optimize.curve_fit(
                law, T, m, p0=start, sigma=sigma, absolute_sigma=True, jac=_law_jacobian(formula)
            )
        fitted = law(T, *params)
        residuals = m - fitted
        chi2 = float(np.sum((residuals / sigma) ** 2))
        dof = len(m) - k
        if known:
            aic, p_value = chi2 + 2 * k, float(scipy.stats.chi2.sf(chi2, dof)) if dof else math.nan
            inflation = max(1.0, chi2 / dof) if dof else 1.0
        else:
            rss = float(np.sum(residuals**2))
            aic, p_value = len(m) * math.log(max(rss, 1e-300) / len(m)) + 2 * (k + 1), math.nan
            inflation = rss / dof if dof else 1.0
        half = 1.96 * np.sqrt(np.diag(covariance) * inflation)
        spread = np.sum((m - m.mean()) ** 2)  # 0 when every m* is the same: R^2 undefined (NaN)
        r2 = 1.0 - np.sum(residuals**2) / spread if spread > 0 else math.nan
        fits[name] = Fit(
            formula, float(params[0]), float(params[1]), (params[0] - half[0], params[0] + half[0]),
            (params[1] - half[1], params[1] + half[1]), float(r2), residuals, chi2, float(aic), p_value,
        )  # fmt: skip
    return fits


def verdict(fits: dict[str, Fit]) -> str:
    """The law of least AIC, or every law within 2 of it ("not told apart: ..."); with "(none fits: p = ...)"
    when even the best law's chi^2 has p < 0.01 (the intervals are narrower than its misfit)."""
    ranked = sorted(fits, key=lambda name: fits[name].aic)
    close = [name for name in ranked if fits[name].aic - fits[ranked[0]].aic < 2.0]
    said = ranked[0] if len(close) == 1 else "not told apart: " + ", ".join(close)
    p = fits[ranked[0]].p_value
    return said + (f" (none fits: p = {p:.1g})" if p < 0.01 else "")


def critical_sigma(result) -> float:
    """The standard error of one m*, the weight of its T in the fits. Of one search (`CriticalSize`): the larger of
    its bootstrap interval's half-width / 1.96 and half the search's resolution at m* (m* minus the largest size
    tried below it), at least one sample. Of R searches (`RepeatedSize`): from the repetitions' spread, sqrt(pi / 2)
    s / sqrt(R) with s the standard deviation of their m*, at least the median of their own standard errors over
    sqrt(R), and one sample."""
    if isinstance(result, RepeatedSize):
        return repeated_sigma(result, [critical_sigma(s) for s in result.searches if np.isfinite(s.critical)])
    below = result.m[result.m < result.critical]
    resolution = result.critical - (below.max() if len(below) else 0.0)
    halves = [result.critical - result.interval[0], result.interval[1] - result.critical]
    half = max(h for h in halves if np.isfinite(h))
    return float(max(half / 1.96, resolution / 2, 1.0))


class Sweep(eqx.Module):
    """The result of `sweep`.

    **Fields:** `Ts` (every T of the sweep, sorted); `s`; `results` ({(learner, budget): tuple, one per T, of
    `CriticalSize` (one search) or `RepeatedSize` (several)}); `erm` (median ERM identifiability per T of `Ts`);
    `information` (log2 C(T, s) per T); `fits` ({(learner, budget): `fit_scaling` of its finite m*, weighted by
    `critical_sigma`, if there are at least 3}); `seconds` (per learner, computing only: units restored by a resumed
    run cost ~0).
    """

    Ts: np.ndarray
    s: int
    results: dict
    erm: np.ndarray
    information: np.ndarray
    fits: dict
    seconds: dict


def _compute(unit, name, compute):
    return compute() if unit is None else unit(name, compute)


def sweep(
    key,
    Ts=DEFAULT_TS,
    *,
    s: int = 3,
    learners: tuple[str, ...] = ("l1", "head"),
    budgets: tuple = BUDGETS,
    repeats: int = 1,
    learner_Ts: dict | None = None,
    spans: dict | None = None,
    options: dict | None = None,
    erm_trials: int = 200,
    log: Callable[[str], None] | None = None,
    unit: Callable | None = None,
    **search,
) -> Sweep:
    """m*(T) of each learner and training budget over the input lengths, with the limits and the fits.

    **Arguments:**

    - `key`: a PRNG key or seed; `Ts`: the input lengths (each >= s + 1); `s`: the AND's support size.
    - `learners`: of `LEARNERS`; `budgets`: training budgets, each a number of steps or "converged" (the
      control, a solver run to its tolerance, is measured once, as "converged").
    - `repeats`: independent searches per (learner, budget, T), R: 1, m* of one search (`CriticalSize`); R >= 2, the
      median of R (`RepeatedSize`), the fits weighted by their spread. Repetition r searches with the key
      `search_key(fold_in(key, T), r)`: repetition 0 is the single search, and a run with more repetitions extends
      one with fewer (the CLI's default: `DEFAULT_REPEATS`).
    - `learner_Ts`: {learner: its own input lengths} for some (default: `Ts`; the Transformer's:
      `TRANSFORMER_TS`); `spans`: {learner: the search's m_high / m_low} for some (default 8).
    - `options`: {learner: `train` options} for some (lr, width, l1_scale, ...; defaults `DEFAULTS`).
    - `erm_trials`: trials of the ERM identifiability at each T.
    - `log`: called with a line per (learner, budget, T) as it finishes.
    - `unit`: a store of finished units, `unit(name, compute)` returning the stored result of `name` or
      `compute()`'s (e.g. `RunRecord.unit`, which keeps them across an interrupted run); one unit per
      (learner, budget, T) and repetition r, named "{learner}-{budget}-T{T}" (r = 0) or "{learner}-{budget}-T{T}-r{r}",
      and one per T for the ERM limit ("erm-T{T}").
    - `search`: passed to `critical_sample_size` (seeds, candidates, rounds, max_steps, log_every, ...).

    **Returns:** a `Sweep`.
    """
    key = as_key(key)
    s, repeats = check_count("s", s, 1), check_count("repeats", repeats, 1)
    for learner in learners:
        if learner not in LEARNERS:
            raise ValueError(f"learners must hold names of {LEARNERS}, got {learner!r}")
    for budget in budgets:
        if budget != "converged" and not (isinstance(budget, (int, np.integer)) and budget >= 1):
            raise ValueError(f"budgets must hold numbers of steps >= 1 or 'converged', got {budget!r}")
    learner_Ts = {"transformer": TRANSFORMER_TS} | (learner_Ts or {})
    spans, options = spans or {}, options or {}
    swept = {
        learner: [at_least(s + 1).check(f"Ts of {learner}", T) for T in learner_Ts.get(learner, Ts)]
        for learner in learners
    }
    every_T = np.array(sorted({T for Ts_ in swept.values() for T in Ts_}))
    erm = np.array(
        [
            np.median(_compute(unit, f"erm-T{T}", lambda T=T: _erm(SparseTarget(int(T), s), key, erm_trials))["trials"])
            for T in every_T
        ]
    )
    results, seconds = {}, {}
    for learner in learners:
        began = time.perf_counter()
        setting = search | ({"span": spans[learner]} if learner in spans else {}) | options.get(learner, {})
        curves: dict[str, list] = {}
        for T in swept[learner]:  # every budget at a T before the next T: a partial run compares the budgets
            target = SparseTarget(int(T), s)
            for budget in ("converged",) if learner == "l1" else budgets:
                searches = []
                for r in range(repeats):  # a T's repetitions one after another: they share its compiled programs

                    def compute(target=target, learner=learner, budget=budget, setting=setting, r=r):
                        subkey = search_key(jax.random.fold_in(key, target.T), r)
                        return critical_sample_size(target, subkey, learner=learner, budget=budget, **setting)

                    searches.append(_compute(unit, _unit_name(learner, budget, T, r), compute))
                    if log is not None:
                        said = "" if repeats == 1 else f", search {r + 1} of {repeats}"
                        log(
                            f"{learner}, budget {budget}, T = {T}{said}: m* = {searches[-1].critical:g} "
                            f"{searches[-1].interval}, {np.mean(searches[-1].converged):.0%} of runs converged"
                        )
                found = searches[0] if repeats == 1 else repeated_size(searches)
                curves.setdefault(found.budget, []).append(found)
                if log is not None and repeats > 1:
                    log(
                        f"{learner}, budget {budget}, T = {T}: m* = {found.critical:g} (median of {repeats} searches), "
                        f"interval {found.interval} ({found.coverage:.0%})"
                    )
        for budget, found in curves.items():
            results[learner, budget] = tuple(found)
        seconds[learner] = time.perf_counter() - began
    information = np.array([information_limit(int(T), s) for T in every_T])
    return Sweep(every_T, s, results, erm, information, _fits(results), seconds)


def _unit_name(learner: str, budget, T: int, repetition: int) -> str:
    """A search's unit: "{learner}-{budget}-T{T}", with "-r{repetition}" after it for repetitions r >= 1."""
    return f"{learner}-{budget}-T{T}" + (f"-r{repetition}" if repetition else "")


def _repetition(name: str) -> int:
    """The repetition of a search's unit, from its name (`_unit_name`)."""
    last = name.rsplit("-", 1)[-1]
    return int(last[1:]) if last.startswith("r") and last[1:].isdigit() else 0


#: The settings of a sweep's runs that decide what one search measures: searches pooled as repetitions of one
#: (learner, budget, T) by `read_sweep` must agree on them.
SEARCH_SETTINGS = ("seeds", "candidates", "rounds", "span", "mlp_span", "lr", "max_steps")


def _fits(results: dict) -> dict:
    """`fit_scaling` of each curve's finite m* (a T where no size succeeded is left out), weighted by
    `critical_sigma`, for the curves with at least 3."""
    fits = {}
    for curve, found in results.items():
        finite = [r for r in found if np.isfinite(r.critical)]
        if len(finite) >= 3:
            T, critical = np.array([r.T for r in finite]), np.array([r.critical for r in finite])
            fits[curve] = fit_scaling(T, critical, [critical_sigma(r) for r in finite])
    return fits


def read_sweep(*folders) -> Sweep:
    """The finished units of one or more `flowsim sparse sweep` runs, read from their folders (interrupted
    runs included), as one `Sweep` with its fits: e.g. a sweep extended to other T, learners, budgets or
    repetitions by a later run. A search is named by its run's seed and its repetition (`sweep`'s `repeats`): the
    searches of a (learner, budget, T) with different names are repetitions, pooled into a `RepeatedSize` (their
    runs must agree on `SEARCH_SETTINGS`; e.g. runs with --seed 0 and --seed 1 are two searches), and a search found
    in several folders is taken from the first. The search settings of each run are those in its run.json
    (`CriticalSize.m` holds the sizes each search tried).

    **Arguments:** `folders`: the runs' folders (each holding run.json and units/).

    **Returns:** a `Sweep` (`seconds`: each learner's computing time, summed over the runs that report it).
    """
    from flowsim._runfolder import UNITS, earlier_run, unchanged
    from flowsim._stored import load_unit

    if not folders:
        raise InvalidInput("read_sweep needs at least one folder")
    found: dict = {}
    settings: dict = {}
    erm: dict[int, float] = {}
    seconds: dict[str, float] = {}
    sizes = set()
    for folder in map(Path, folders):
        record = earlier_run(folder)
        if record is None or record["parameters"].get("command") != "sparse sweep":
            raise InvalidInput(f"{folder} holds no run of flowsim sparse sweep (its run.json)")
        sizes.add(record["parameters"]["s"])
        setting = {name: record["parameters"].get(name) for name in SEARCH_SETTINGS}
        for name in record["units"]:
            path = folder / UNITS / f"{name}.npz"
            if unchanged(folder, record, path.relative_to(folder).as_posix()) is False:
                raise InvalidInput(f"{path} is no longer what flowsim wrote (damaged, or another file)")
            if name.startswith("erm-T"):
                erm.setdefault(int(name[5:]), float(np.median(load_unit(path)["trials"])))
            elif name.split("-")[0] in LEARNERS:
                result = load_unit(path)
                point = (result.learner, result.budget, result.T)
                first, agreed = settings.setdefault(point, (folder, setting))
                differ = [f"{k} = {agreed[k]} in {first}, {setting[k]} in {folder}" for k in agreed
                          if agreed[k] != setting[k]]  # fmt: skip
                if differ:
                    raise InvalidInput(
                        f"the searches of the {result.learner}, budget {result.budget}, at T = {result.T} are pooled "
                        f"as repetitions, so their runs must search alike: {'; '.join(differ)}"
                    )
                searches = found.setdefault(point[:2], {}).setdefault(result.T, {})
                searches.setdefault((record.get("seed"), _repetition(name)), result)
        for learner, spent in record.get("summary", {}).get("seconds_per_learner", {}).items():
            seconds[learner] = seconds.get(learner, 0.0) + spent
    if len(sizes) != 1:
        raise InvalidInput(f"the runs must have the same support size s, got {sorted(sizes)}")
    s = sizes.pop()
    results = {curve: tuple(_pooled(by_T[T]) for T in sorted(by_T)) for curve, by_T in found.items()}
    Ts = np.array(sorted({T for by_T in found.values() for T in by_T} | set(erm)))
    median = np.array([erm.get(int(T), np.nan) for T in Ts])
    information = np.array([information_limit(int(T), s) for T in Ts])
    return Sweep(Ts, s, results, median, information, _fits(results), seconds)


def _pooled(searches: dict):
    """One search as it is, or several (named by seed and repetition) as a `RepeatedSize`, in the order of their
    names."""
    if len(searches) == 1:
        return next(iter(searches.values()))
    return repeated_size(searches[name] for name in sorted(searches, key=lambda name: (name[0] is None, name)))


def _erm(target, key, trials) -> dict:
    """The ERM limit as a unit: {"trials": the m of each trial}."""
    return {"trials": erm_identifiability(target, key, trials)}


def sweep_table(result: Sweep) -> dict[str, np.ndarray]:
    """One row per learner, budget and T: m*, its interval, the share of runs that converged (and the most
    steps a run took), the ERM median and the information limit; the searches R, the m* of each (space-separated)
    and the interval's coverage (a search's bootstrap: 0.95; over R searches: that of `median_interval`)."""
    rows = [(curve, r) for curve, found in result.results.items() for r in found]
    at = {int(T): i for i, T in enumerate(result.Ts)}
    return {
        "learner": np.array([learner for (learner, _), _ in rows]),
        "budget": np.array([budget for (_, budget), _ in rows]),
        "T": np.array([r.T for _, r in rows]),
        "critical_m": np.array([r.critical for _, r in rows]),
        "interval_low": np.array([r.interval[0] for _, r in rows]),
        "interval_high": np.array([r.interval[1] for _, r in rows]),
        "converged_share": np.array([float(np.mean(r.converged)) for _, r in rows]),
        "max_steps_run": np.array([int(np.max(r.steps_run)) for _, r in rows]),
        "erm_median": np.array([result.erm[at[r.T]] for _, r in rows]),
        "information_limit": np.array([result.information[at[r.T]] for _, r in rows]),
        "repeats": np.array([len(_searches(r)) for _, r in rows]),
        "searches_m": np.array([" ".join(f"{s.critical:g}" for s in _searches(r)) for _, r in rows]),
        "interval_coverage": np.array([r.coverage if isinstance(r, RepeatedSize) else 0.95 for _, r in rows]),
    }


def _searches(result) -> tuple:
    """The searches of a point: its own, or a repeated measurement's."""
    return result.searches if isinstance(result, RepeatedSize) else (result,)


def selection_table(result: Sweep) -> dict[str, np.ndarray]:
    """One row per (learner, budget) and law: parameters with 95 % intervals, chi^2, AIC, AIC minus the
    curve's least, the p-value, and the curve's verdict (`verdict`)."""
    rows = []
    for (learner, budget), fits in result.fits.items():
        best = min(fit.aic for fit in fits.values())
        said = verdict(fits)
        for name, fit in fits.items():
            rows.append((learner, budget, name, fit, fit.aic - best, said))
    columns = {
        "learner": [r[0] for r in rows],
        "budget": [r[1] for r in rows],
        "law": [r[3].law for r in rows],
        "a": [r[3].a for r in rows],
        "a_low": [r[3].a_interval[0] for r in rows],
        "a_high": [r[3].a_interval[1] for r in rows],
        "b": [r[3].b for r in rows],
        "b_low": [r[3].b_interval[0] for r in rows],
        "b_high": [r[3].b_interval[1] for r in rows],
        "chi2": [r[3].chi2 for r in rows],
        "aic": [r[3].aic for r in rows],
        "delta_aic": [r[4] for r in rows],
        "p_value": [r[3].p_value for r in rows],
        "r2": [r[3].r2 for r in rows],
        "verdict": [r[5] for r in rows],
    }
    return {name: np.array(values) for name, values in columns.items()}


def paper_table(result: Sweep) -> dict[str, np.ndarray]:
    """Edelman et al.'s 18 read-off points beside the Transformer's m* of each budget at the same T (NaN
    where the sweep did not measure that T)."""
    table = {
        "T": PAPER_POINTS[:, 0].astype(int),
        "paper_m": PAPER_POINTS[:, 1],
        "paper_low": PAPER_POINTS[:, 2],
        "paper_high": PAPER_POINTS[:, 3],
    }
    for (learner, budget), found in result.results.items():
        if learner != "transformer":
            continue
        at = {r.T: r for r in found}
        rows = [(at[int(T)].critical, *at[int(T)].interval) if int(T) in at else (np.nan,) * 3 for T in table["T"]]
        for column, values in zip(("", "_low", "_high"), np.array(rows).T, strict=True):
            table[f"transformer_{budget}{column}"] = values
    return table


def sweep_figure(result: Sweep):
    """Three panels: m*(T) of every learner and budget with intervals, its law of least AIC, the limits and the
    paper's points; the Transformer's m* beside the paper's 18 points with their bars, on the paper's range;
    the share of runs whose training converged, per learner, budget and T. One colour per (learner, budget); where
    m* is the median of repeated searches, each search's m* is a dot beside it.

    **Returns:** a matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(19, 5.6), layout="constrained")
    ax = axes[0]
    paper_T, paper_m = PAPER_POINTS[:, 0], PAPER_POINTS[:, 1]
    paper_bars = np.nan_to_num(np.abs(PAPER_POINTS[:, 2:].T - paper_m))
    markers = {"converged": "o", "1000": "s", "4000": "D", "16000": "^"}
    lines = {}
    for (learner, budget), found in result.results.items():
        Ts = np.array([r.T for r in found])
        critical = np.array([r.critical for r in found])
        finite = np.isfinite(critical)
        with np.errstate(invalid="ignore"):  # inf - inf where m* was not reached
            spread = np.array([[c - r.interval[0], r.interval[1] - c] for c, r in zip(critical, found, strict=True)]).T
        spread = np.where(np.isfinite(spread), spread, 0.0)[:, finite]
        for panel in (axes[0], axes[1]) if learner == "transformer" else (axes[0],):
            line = panel.errorbar(
                Ts[finite], critical[finite], yerr=spread, marker=markers.get(budget, "v"), capsize=3,
                color=lines.get((learner, budget)), ls="-" if budget == "converged" else ":",
                label=f"{learner}, {budget if budget == 'converged' else budget + ' steps'}: m*",
            )  # fmt: skip
            lines.setdefault((learner, budget), line[0].get_color())
            repeated = [r for r in found if isinstance(r, RepeatedSize)]
            if repeated:  # each search's own m*, beside the median of the R
                each = np.array([(r.T, s.critical) for r in repeated for s in r.searches if np.isfinite(s.critical)])
                panel.plot(*each.T, ".", ms=4, alpha=0.6, color=lines[learner, budget])
        for r in (r for r, ok in zip(found, finite, strict=True) if not ok):  # not learned up to the largest m tried
            arrow = {"arrowstyle": "->", "color": lines[learner, budget]}
            ax.annotate("", (r.T, r.m[-1] * 1.3), (r.T, r.m[-1]), arrowprops=arrow)
        fits = result.fits.get((learner, budget))
        if fits:
            best = min(fits.values(), key=lambda fit: fit.aic)
            grid = np.geomspace(Ts[finite].min(), Ts[finite].max(), 200)
            ax.plot(grid, best(grid), "--", color=lines[learner, budget], lw=1,
                    label=f"{learner}, {budget}: least AIC, {best.law}, b = {best.b:.3g}")  # fmt: skip
        axes[2].plot(Ts, [np.mean(r.converged) for r in found], marker=markers.get(budget, "v"),
                     color=lines[learner, budget],
                     ls="-" if budget == "converged" else ":", label=f"{learner}, {budget}")  # fmt: skip
    ax.plot(result.Ts, result.erm, "k^-", label="ERM identifiability (median)")
    ax.plot(result.Ts, result.information, "k:", label="information limit log2 C(T, s)")
    ax.errorbar(paper_T, paper_m, yerr=paper_bars, fmt="s", ms=4, color="tab:brown", label="Edelman et al.'s figure")
    ax.set(xscale="log", yscale="log", xlabel="input length T", ylabel="samples m")
    repeated = any(isinstance(r, RepeatedSize) for found in result.results.values() for r in found)
    said = "\nbars: one search's 95 % bootstrap, or over R searches (dots: each search)" if repeated else ""
    ax.set_title(f"Critical sample size m*, {result.s}-AND" + (said or " (95 % bootstrap intervals)"), fontsize=10)
    ax.legend(fontsize=6.5)
    axes[1].errorbar(paper_T, paper_m, yerr=paper_bars, fmt="s", color="tab:brown", capsize=2,
                     label="Edelman et al., read off their figure (bars: theirs)")  # fmt: skip
    axes[1].set(xscale="log", xlabel="input length T", ylabel="critical sample size m*")
    axes[1].set_title("The paper's one-layer Transformer and this one")
    axes[1].legend(fontsize=8)
    axes[2].set(xscale="log", xlabel="input length T", ylabel="share of runs converged", ylim=(-0.05, 1.05))
    axes[2].set_title("Training converged (loss <= threshold or stopped improving)")
    axes[2].legend(fontsize=7)
    return fig
