"""The statistical advantage of softmax (docs/science.md section 7): the risk each attention map reaches by training.

For each map and inverse temperature lam: the population risk at the end of the gradient flow from sphere
starts, and at the end of online SGD (the exact overlap chain) from sphere starts, with the oracle's risk
(k, v) = (k*, v*) of the same map and the Bayes risk as references. The follow-up paper compares the maps at
the population optimum only; here the risks are those training reaches.
"""

import functools
import hashlib
import itertools
import math
import time
from collections.abc import Callable

import equinox as eqx
import jax
import numpy as np

from flowsim._checks import InvalidInput, as_key, check_count, check_positive
from flowsim._memory import check_work
from flowsim._status import Failure
from flowsim.integrate import solve_flow
from flowsim.quadrature import GaussianRule
from flowsim.results import long_table, unit_name
from flowsim.tasks.slr._attention import ATTENTION_MAPS, ERF, AttentionMap, as_attention_map
from flowsim.tasks.slr._baselines import Estimate, bayes_risk
from flowsim.tasks.slr._data import ground_truth
from flowsim.tasks.slr._estimates import advantage_work, rule_points, sgd_steps
from flowsim.tasks.slr._init import initial_overlaps
from flowsim.tasks.slr._problem import ORACLE, Problem
from flowsim.tasks.slr._risk import population_risk
from flowsim.tasks.slr._sgd import run_sgd

__all__ = ["DEFAULT_LAMS", "Advantage", "advantage_figure", "statistical_advantage"]

#: The default inverse temperatures: a decade and a half around the Bayes temperature s = sqrt(d/2) = 6.3 at d = 80.
DEFAULT_LAMS = (0.25, 0.5, 1.0, 2.0, 4.0, math.sqrt(40.0), 8.0)


class Advantage(eqx.Module):
    """The risks the attention maps reach, against lam.

    **Fields:**

    - `attention`: the maps' names, in order; `maps`: the maps (`AttentionMap`).
    - `lams`: the inverse temperatures, shape (lams,).
    - `problem`: the task's d, L, gamma and eps (erf attention at lam = 1; every map and lam share them).
    - `t_max`: the flow's horizon and SGD's (t = lr * step).
    - `flow_risk`: the risk at the end of the flow, shape (maps, lams, starts); `flow_status` its `Status`.
    - `sgd_risk`: the risk at the end of online SGD (d of `problem`), shape (maps, lams, seeds); NaN where
      a seed diverged.
    - `oracle_risk`: the risk at (k*, v*), shape (maps, lams).
    - `bayes`: the Bayes risk (Monte Carlo `Estimate`); `rule`: the name of the rule of the maps but erf.
    - `seconds`: wall time per map; `failed`: the `failures()`.
    """

    attention: tuple[str, ...] = eqx.field(static=True)
    maps: tuple[AttentionMap, ...] = eqx.field(static=True)
    lams: np.ndarray
    problem: Problem
    t_max: float
    flow_risk: np.ndarray
    flow_status: np.ndarray
    sgd_risk: np.ndarray
    oracle_risk: np.ndarray
    bayes: Estimate
    rule: str = eqx.field(static=True)
    seconds: dict = eqx.field(static=True)
    failed: tuple[Failure, ...] = eqx.field(static=True)

    def table(self) -> dict[str, np.ndarray]:
        """One row per map and lam, as columns: the median and quartiles of the flow's and SGD's end risks,
        the oracle's risk and the Bayes risk."""
        values = {}
        for what, risks in (("flow", self.flow_risk), ("sgd", self.sgd_risk)):
            values[f"{what}_median"] = np.nanmedian(risks, axis=-1)
            values[f"{what}_q25"], values[f"{what}_q75"] = np.nanquantile(risks, [0.25, 0.75], axis=-1)
        values |= {"oracle": self.oracle_risk, "bayes": self.bayes.mean}
        return long_table([{"attention": list(self.attention)}, {"lam": self.lams}], values)

    def best(self) -> dict[str, tuple[float, float]]:
        """For each map, (lam, median risk) of the lam whose flow ends at the lowest median risk."""
        medians = np.nanmedian(self.flow_risk, axis=-1)
        return {
            a: (float(self.lams[np.argmin(m)]), float(np.min(m))) for a, m in zip(self.attention, medians, strict=True)
        }

    def failures(self) -> list[Failure]:
        """Flows that did not reach t_max and SGD seeds that diverged; each reason names the map and lam."""
        return list(self.failed)


def statistical_advantage(
    key,
    *,
    d: int = 80,
    L: int = 10,
    gamma: float = 1.0,
    eps: float = 0.1,
    lams=DEFAULT_LAMS,
    attention: tuple[AttentionMap | str, ...] = tuple(ATTENTION_MAPS),
    starts: int = 64,
    t_max: float = 100.0,
    lr: float = 0.01,
    batch: int = 5,
    rule: GaussianRule | None = None,
    bayes_samples: int = 100_000,
    log: Callable[[str], None] | None = None,
    unit: Callable | None = None,
    force: bool = False,
) -> Advantage:
    """The population risk each attention map reaches by the gradient flow and by online SGD, against lam.

    **Arguments:**

    - `key`: a JAX PRNG key or an integer seed (starts, SGD, the Bayes risk's samples).
    - `d`, `L`, `gamma`, `eps`: the task (default gamma = 1, where softmax at lam = sqrt(d/2) is the Bayes
      predictor, and eps = 0.1 as in the paper's SGD run).
    - `lams`: the inverse temperatures (each > 0).
    - `attention`: the maps to compare: `AttentionMap`s (a researcher's own) or built-in maps' names
      (default every map of `ATTENTION_MAPS`); their names must differ (they label the table's rows).
    - `starts`: sphere starts of the flow, and seeds of SGD (the same number).
    - `t_max`: the horizon of both (SGD runs t_max / lr steps).
    - `lr`, `batch`: SGD's step size and mini-batch.
    - `rule`: the rule of the maps but erf (default `flowsim.quadrature.default_rule(L)`).
    - `bayes_samples`: Monte Carlo samples of the Bayes risk.
    - `log`: called with a line per map as it finishes.
    - `unit`: a store of finished work, `unit(name, compute) -> result` (`flowsim.results.RunRecord.unit`):
      each (map, lam) is one unit, the Bayes risk another, read back where the store holds them.
      Default: computed.
    - `force`: run even if the estimate before work says it takes longer than an hour (`flowsim._memory`).

    **Returns:** an `Advantage`.
    """
    key = as_key(key)
    lams = np.array([check_positive("lams", lam) for lam in np.atleast_1d(lams)])
    if not len(lams):
        raise InvalidInput("lams must hold at least one inverse temperature, got none")
    maps = tuple(as_attention_map(a, "each of attention") for a in attention)
    names = [a.name for a in maps]
    if not names or len(set(names)) < len(names):
        raise InvalidInput(f"attention must hold at least one map and no two maps of the same name, got names {names}")
    starts = check_count("starts", starts, 1)
    t_max, lr = check_positive("t_max", t_max), check_positive("lr", lr)
    steps = sgd_steps(t_max, lr)
    points = rule_points(L) if rule is None else len(rule.weights)
    # The built-in maps by name (their measured cost), a researcher's as None (counted as the slowest).
    rule_maps = [a.name if ATTENTION_MAPS.get(a.name) is a else None for a in maps if a != ERF]
    work = advantage_work(d, L, len(lams), len(maps), rule_maps, starts, t_max, lr, batch, points, bayes_samples)
    check_work("statistical_advantage", *work, force=force)
    key_starts, key_sgd, key_bayes = jax.random.split(key, 3)
    m0 = initial_overlaps(key_starts, d, starts, "sphere")
    shape = (len(maps), len(lams))
    flow_risk, flow_status = np.empty((*shape, starts)), np.empty((*shape, starts), int)
    sgd_risk, oracle = np.empty((*shape, starts)), np.empty(shape)
    seconds, rule_name, failed = {}, "", []
    store = unit or (lambda name, compute: compute())
    stems = _unit_stems(names)
    for i, attention_map in enumerate(maps):
        name, began = attention_map.name, time.perf_counter()
        for j, lam in enumerate(lams):
            problem = Problem(d, L, float(lam), gamma, eps, attention_map, None if attention_map == ERF else rule)
            compute = functools.partial(_cell, problem, m0, key_sgd, t_max, lr, batch, steps)
            cell = store(f"{stems[i]}-lam={float(lam)!r}", compute)
            flow_risk[i, j], flow_status[i, j] = cell["flow_risk"], cell["flow_status"]
            sgd_risk[i, j], oracle[i, j] = cell["sgd_risk"], cell["oracle"]
            rule_name = problem.rule.name if problem.rule is not None else rule_name
            where = f"{name} attention at lam = {lam:g}"
            failed += [eqx.tree_at(lambda f: f.reason, f, f"{where}, {f.reason}") for f in cell["failed"]]
        seconds[name] = time.perf_counter() - began
        if log is not None:
            log(f"{name}: {len(lams)} values of lam in {seconds[name]:.1f} s")
    reference = Problem(d, L, 1.0, gamma, eps)
    bayes = store("bayes", lambda: bayes_risk(reference, ground_truth(key_bayes, d), key_bayes, bayes_samples))
    return Advantage(
        tuple(names),
        maps,
        lams,
        reference,
        t_max,
        flow_risk,
        flow_status,
        sgd_risk,
        oracle,
        bayes,
        rule_name,
        seconds,
        tuple(failed),
    )


def _unit_stems(names: list[str]) -> list[str]:
    """The maps' names as stored units' names (`unit_name`; a researcher's map may be called "capped softmax"): a long
    name cut and marked by a hash of it, a stem that another one's equals where case is ignored (macOS's and Windows'
    file systems) numbered. The built-in maps' are their names."""
    stems = []
    for name in names:
        stem = unit_name(name) or "map"
        if len(stem) > 64:
            stem = f"{stem[:48]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"
        stems.append(stem)
    folded = [stem.casefold() for stem in stems]
    return [f"{stem}-{i}" if folded.count(stem.casefold()) > 1 else stem for i, stem in enumerate(stems)]


def _cell(problem: Problem, m0, key_sgd, t_max: float, lr: float, batch: int, steps: int) -> dict:
    """One map at one lam: the risks its flow and its SGD reach from the sphere starts, and its oracle's."""
    solved = solve_flow(problem, m0, np.array([0.0, t_max]))  # the task's solver (`Problem.flow_solver`)
    starts = len(m0)
    run = run_sgd(
        problem, key_sgd, init="sphere", lr=lr, steps=steps, batch=batch, log_every=steps, seeds=starts,
        engine="overlaps",
    )  # fmt: skip
    failed = [eqx.tree_at(lambda f: f.reason, f, f"flow: {f.reason}") for f in solved.failures()]
    failed += [eqx.tree_at(lambda f: f.reason, f, f"SGD: {f.reason}") for f in run.failures()]
    return {
        "flow_risk": np.asarray(solved.observed[:, -1]),
        "flow_status": np.asarray(solved.status),
        "sgd_risk": np.asarray(run.risk[:, -1]),
        "oracle": float(population_risk(problem, ORACLE)),
        "failed": tuple(failed),
    }


#: One colour per built-in map, the same in every panel; a researcher's maps take the next free colours.
_COLOURS = {
    "erf": "tab:blue",
    "softmax": "tab:red",
    "linear": "tab:gray",
    "softplus": "tab:green",
    "sigmoid": "tab:orange",
    "relu": "tab:purple",
}
_OTHER_COLOURS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan", "black")


def advantage_figure(result: Advantage):
    """Two panels, the flow's end risks and SGD's against lam (log-log): per map the median and quartiles over
    starts, its oracle risk dashed; the Bayes risk in black; the Bayes temperature lam = sqrt(d/2) dotted.

    **Returns:** a matplotlib Figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    problem = result.problem
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True, layout="constrained")
    others = itertools.cycle(_OTHER_COLOURS)
    colours = {name: _COLOURS.get(name) or next(others) for name in result.attention}
    for ax, risks, what in ((axes[0], result.flow_risk, "gradient flow"), (axes[1], result.sgd_risk, "online SGD")):
        for i, name in enumerate(result.attention):
            colour = colours[name]
            median = np.nanmedian(risks[i], axis=-1)
            spread = [
                median - np.nanquantile(risks[i], 0.25, axis=-1),
                np.nanquantile(risks[i], 0.75, axis=-1) - median,
            ]
            ax.errorbar(result.lams, median, yerr=spread, color=colour, marker="o", capsize=3, label=f"{name}: reached")
            ax.plot(result.lams, result.oracle_risk[i], color=colour, linestyle="--", label=f"{name}: oracle (k*, v*)")
        ax.axhline(result.bayes.mean, color="black", linewidth=1.5, label="Bayes risk")
        ax.axvline(problem.s, color="black", linestyle=":", linewidth=1, label=r"$\lambda = \sqrt{d/2}$")
        ax.set(xscale="log", yscale="log", xlabel=r"inverse temperature $\lambda$")
        ax.set_xticks(result.lams, [f"{lam:.3g}" for lam in result.lams])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{what}, t = {result.t_max:g} ({result.flow_risk.shape[-1]} sphere starts)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(r"population risk $E[(Y - T)^2]$")
    axes[1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(
        f"Risk reached by each attention map: d = {problem.d}, L = {problem.L}, "
        f"$\\gamma$ = {problem.gamma:g}, $\\epsilon$ = {problem.eps:g}; medians and quartiles"
    )
    return fig
