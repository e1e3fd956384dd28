"""The five reference experiments of the paper (SPEC.md section 6), reproduced.

Every experiment runs on the five overlaps by default (engine "overlaps"): population runs
iterate the exact projected-gradient-descent map (`iterate_map`, started from
`initial_overlaps`, which has the law of the R^d initialisations), and the SGD run is the
exact online-SGD chain on the overlaps (`run_sgd(engine="overlaps")`). Engine "Rd" runs the
same algorithms with vectors in R^d, to cross-check. The SGD run is compared with the gradient
flow (`solve_flow`) started at each seed's initial overlaps, on the clock t = alpha * step.

Each seed's end point is classified (see `Summary`):

- reached +-(k*, v*): max-norm distance to (1, 1, 0, 0, 0), after the symmetry
  (k, v) -> (-k, -v), at most `tol` (1e-2 for population runs, 5e-2 for SGD, whose iterates
  fluctuate around the fixed point);
- approaching +-(k*, v*): not yet within `tol`, but at distance <= `tol` from M, |nu| >= 1 - tol,
  kappa and nu of the same sign, and the flow at the final lam moving |kappa| towards 1. On M this
  is the edge nu = +-1 that leads to the sink: kappa converges slowly there (SPEC.md section 5);
- another attractor of the flow at the final lam (`attractors`), or none (still moving, e.g. a
  stalled kappa), or diverged.
"""

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from flowsim.tasks.slr import _generated as generated
from flowsim.integrate import evaluate
from flowsim.schedules import InverseTimeDecay
from flowsim.tasks.slr._data import _check_count, _check_positive
from flowsim.tasks.slr._dynamics import iterate_map, solve_flow
from flowsim.tasks.slr._fixedpoints import ORACLE, Attractor
from flowsim.tasks.slr._init import initial_overlaps
from flowsim.tasks.slr._outcomes import classify_end_points
from flowsim.tasks.slr._problem import Problem
from flowsim.tasks.slr._risk import oracle_risk
from flowsim.tasks.slr._sgd import run_sgd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "ENGINES",
    "EXPERIMENTS",
    "QUICK_STEPS",
    "Experiment",
    "ExperimentResult",
    "Summary",
    "experiment_figure",
    "reproduce",
    "run_experiment",
    "summary_table",
]

ALGORITHMS = ("population", "sgd")
#: How runs are computed: on the five overlaps (the population map, the online-SGD chain), or in R^d.
ENGINES = ("overlaps", "Rd")
#: Tolerances (max norm) for "reached +-(k*, v*)", by algorithm.
TOLERANCES = {"population": 1e-2, "sgd": 5e-2}
#: Steps run by `reproduce(quick=True)` (at most the full length), by algorithm. 6000 population
#: steps at alpha = 4e-3 (t = 24) let every start on M leave the saddle (0, 0) and reach |nu| = 1,
#: and one length for all four population runs means one compiled map. 2000 SGD steps keep the
#: quick path quick with engine "Rd" too (a step in R^80, batch 5, costs ~3 ms for 30 seeds).
QUICK_STEPS = {"population": 6000, "sgd": 2000}


@dataclass(frozen=True)
class Experiment:
    """One row of the table of SPEC.md section 6.

    **Fields:** `name`; `init` ("sphere" or "manifold"); `d`; `lam` (lam at step 0);
    `decay` (lam = lam / (1 + decay * step); 0 for a fixed lam); `alpha` (the step size);
    `steps`; `algorithm` ("population": projected gradient descent on the population risk,
    or "sgd": online SGD); `batch` (samples per SGD step); `eps` (label noise);
    `L` and `gamma`.
    """

    name: str
    init: str
    d: int
    lam: float
    decay: float
    alpha: float
    steps: int
    algorithm: str
    batch: int | None = None
    eps: float = 0.0
    L: int = 10
    gamma: float = math.sqrt(0.5)

    @property
    def problem(self) -> Problem:
        """The task at lam(0)."""
        return Problem(self.d, self.L, self.lam, self.gamma, self.eps)

    @property
    def schedule(self) -> InverseTimeDecay:
        """lam on the flow's clock t = alpha * step (decay 0 gives the constant lam, and every
        experiment the same kind of schedule, so that compiled runs are shared)."""
        return InverseTimeDecay(self.lam, self.decay, self.alpha)

    def lam_at(self, step) -> np.ndarray:
        """lam at a step (or an array of steps)."""
        return self.lam / (1 + self.decay * np.asarray(step, dtype=float))

    def describe_lam(self) -> str:
        return f"{self.lam:g}" if self.decay == 0 else f"{self.lam:g}/(1 + {self.decay:g}·step)"


#: The five reference experiments (SPEC.md section 6), 30 seeds each in the paper.
EXPERIMENTS = (
    Experiment("init_manifold", "manifold", 400, 0.1, 0.0, 4e-3, 20_000, "population"),
    Experiment("sphere_large_lambda", "sphere", 400, 0.9, 0.0, 1e-3, 120_000, "population"),
    Experiment("sphere_small_lambda", "sphere", 400, 0.1, 0.0, 4e-3, 20_000, "population"),
    Experiment("sphere_schedule", "sphere", 400, 1.0, 1e-4, 4e-3, 120_000, "population"),
    Experiment("sgd_sphere_schedule", "sphere", 80, 2.0, 1e-4, 1e-3, 200_000, "sgd", batch=5, eps=0.1),
)


@dataclass(frozen=True)
class Summary:
    """Where the seeds of one run ended (see the module's docstring for the classes).

    **Fields:** `seeds`; `tol`; `reached` and `approaching` (+-(k*, v*)); `others` (other
    attractors of the flow at the final lam, shares relative to all seeds); `unassigned`
    (ended away from every fixed point); `diverged`; `lam_final`; `final_excess`
    (mean over the seeds that did not diverge of R - eps^2 at the last step) and
    `final_excess_median`; `oracle_excess` (R - eps^2 of (k*, v*) at the final lam).
    """

    seeds: int
    tol: float
    reached: int
    approaching: int
    others: list[Attractor]
    unassigned: int
    diverged: int
    lam_final: float
    final_excess: float
    final_excess_median: float
    oracle_excess: float

    @property
    def oracle_share(self) -> float:
        """Share of seeds that reached or are approaching +-(k*, v*)."""
        return (self.reached + self.approaching) / self.seeds


@dataclass(frozen=True)
class ExperimentResult:
    """One experiment's run.

    **Fields:**

    - `experiment`; `engine` ("overlaps" or "Rd"); `scale` (fraction of the steps run).
    - `steps`: the logged steps, (logs,); `lam`: lam there, (logs,).
    - `overlaps`: (seeds, logs, 5), NaN after a divergence.
    - `excess_risk`: R - eps^2 at each logged iterate and its lam, (seeds, logs).
    - `oracle_excess`: R - eps^2 of (k*, v*) at each logged lam, (logs,).
    - `ode_overlaps`, `ode_excess_risk`: for SGD, the gradient flow from each seed's initial
      overlaps at t = alpha * step (same shapes); None for population runs.
    - `summary`: a `Summary`; `seconds`: wall time of the run and its summary.
    """

    experiment: Experiment
    engine: str
    scale: float
    steps: np.ndarray
    lam: np.ndarray
    overlaps: np.ndarray
    excess_risk: np.ndarray
    oracle_excess: np.ndarray
    ode_overlaps: np.ndarray | None
    ode_excess_risk: np.ndarray | None
    summary: Summary
    seconds: float = field(default=float("nan"), compare=False)

    @property
    def seeds(self) -> int:
        return self.overlaps.shape[0]

    @property
    def times(self) -> np.ndarray:
        """The logged steps on the flow's clock t = alpha * step."""
        return self.experiment.alpha * self.steps


def _lengths(steps: int, scale: float, log_points: int) -> tuple[int, int]:
    """(steps run, log_every): about steps * scale steps, logged about log_points times."""
    total = max(1, round(steps * scale))
    log_every = max(1, total // log_points)
    return max(log_every, total - total % log_every), log_every


def _summarize(
    experiment: Experiment, finals: np.ndarray, final_excess: np.ndarray, lam_final: float, tol: float
) -> Summary:
    # An SGD iterate fluctuates around the fixed point it reached: it is assigned to a fixed
    # point within tol; a population run is assigned within attractors()' default 1e-4.
    merge_tol = tol if experiment.algorithm == "sgd" else 1e-4
    problem = Problem(experiment.d, experiment.L, lam_final, experiment.gamma, experiment.eps)
    outcomes = classify_end_points(problem, finals, lam=lam_final, tol=tol, merge_tol=merge_tol)
    finite = np.isfinite(finals).all(axis=-1)
    excess = final_excess[finite]
    return Summary(
        seeds=len(finals),
        tol=tol,
        reached=int(outcomes.reached.sum()),
        approaching=int(outcomes.approaching.sum()),
        others=outcomes.others,
        unassigned=outcomes.unassigned,
        diverged=outcomes.failed,
        lam_final=lam_final,
        final_excess=float(np.mean(excess)) if excess.size else float("nan"),
        final_excess_median=float(np.median(excess)) if excess.size else float("nan"),
        oracle_excess=float(oracle_risk(problem)) - experiment.eps**2,
    )


def run_experiment(
    experiment: Experiment,
    key,
    *,
    seeds: int = 30,
    scale: float = 1.0,
    log_points: int = 200,
    engine: str = "overlaps",
    m0=None,
    tol: float | None = None,
) -> ExperimentResult:
    """Run one experiment from many seeds and summarise where they ended.

    **Arguments:**

    - `experiment`: e.g. one of `EXPERIMENTS`.
    - `key`: a JAX PRNG key (initialisations; for SGD also hidden directions and data).
    - `seeds`: the number of independent runs (>= 1).
    - `scale`: the fraction of the experiment's steps to run (> 0; 1 is the paper's length).
    - `log_points`: about how many logged steps (>= 1; every step for short runs).
    - `engine`: "overlaps" (population runs: the exact map on the five overlaps; SGD: the exact
      online-SGD chain on the overlaps, at a cost independent of d) or "Rd" (the same
      algorithm with vectors in R^d, to cross-check).
    - `m0`: initial overlaps, shape (seeds, 5), instead of drawing the experiment's
      initialisation (in R^d, vectors with these overlaps are built).
    - `tol`: the max-norm distance to +-(k*, v*) counted as reached (default 1e-2 for population
      runs, 5e-2 for SGD).

    **Returns:** an `ExperimentResult`.
    """
    if not isinstance(experiment, Experiment):
        raise ValueError(f"experiment must be an Experiment, got {experiment!r}")
    if experiment.algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {experiment.algorithm!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    seeds = _check_count("seeds", seeds, 1)
    scale = _check_positive("scale", scale)
    log_points = _check_count("log_points", log_points, 1)
    tol = TOLERANCES[experiment.algorithm] if tol is None else _check_positive("tol", tol)
    if m0 is not None:
        m0 = np.asarray(m0, dtype=float)
        if m0.shape != (seeds, 5):
            raise ValueError(f"m0 must have shape (seeds, 5) = ({seeds}, 5), got {m0.shape}")
    start = time.perf_counter()
    steps, log_every = _lengths(experiment.steps, scale, log_points)
    problem, schedule = experiment.problem, experiment.schedule
    ode_overlaps = ode_excess = None
    if experiment.algorithm == "population" and engine == "overlaps":
        initial = initial_overlaps(key, experiment.d, seeds, experiment.init) if m0 is None else m0
        run = iterate_map(problem, initial, experiment.alpha, steps, schedule=schedule, log_every=log_every)
        logged, overlaps, risk = run.steps, np.asarray(run.ys), np.asarray(run.risk)
    else:
        sgd = experiment.algorithm == "sgd"
        run = run_sgd(
            problem,
            key,
            init=experiment.init if m0 is None else m0,
            lr=experiment.alpha,
            steps=steps,
            batch=experiment.batch or 1,
            mode="online" if sgd else "population",
            schedule=schedule,
            log_every=log_every,
            seeds=seeds,
            engine=engine if sgd else "Rd",
        )
        logged, overlaps, risk = run.steps, np.asarray(run.overlaps), np.asarray(run.risk)
        if sgd:
            ode = solve_flow(problem, overlaps[:, 0], experiment.alpha * logged, schedule=schedule, max_steps=1_000_000)
            ode_overlaps = np.asarray(ode.ys)
            ode_excess = np.asarray(ode.observed) - experiment.eps**2
    overlaps = np.where(np.isfinite(overlaps).all(axis=-1, keepdims=True), overlaps, np.nan)
    lam = experiment.lam_at(logged)
    # oracle_risk at every logged lam at once (one compiled call for every experiment).
    parameters = (experiment.d, experiment.L, jnp.asarray(lam), experiment.gamma, experiment.eps)
    oracle_excess = np.asarray(evaluate(generated.risk, *ORACLE, *parameters))
    excess = risk - experiment.eps**2
    summary = _summarize(experiment, overlaps[:, -1], excess[:, -1], float(lam[-1]), tol)
    return ExperimentResult(
        experiment,
        engine,
        scale,
        np.asarray(logged),
        lam,
        overlaps,
        excess,
        np.broadcast_to(oracle_excess, lam.shape) - experiment.eps**2,
        ode_overlaps,
        ode_excess,
        summary,
        time.perf_counter() - start,
    )


def reproduce(
    key,
    *,
    quick: bool = False,
    seeds: int = 30,
    out=None,
    experiments: Sequence[Experiment] = EXPERIMENTS,
    log: Callable[[str], None] | None = None,
    engine: str = "overlaps",
) -> list[ExperimentResult]:
    """Run the reference experiments, and draw their figures into `out` if given.

    **Arguments:**

    - `key`: a JAX PRNG key; experiment i of `EXPERIMENTS` uses `jax.random.fold_in(key, i)`,
      so a subset of the experiments reproduces the same runs (any other experiment uses
      `fold_in(key, 5)`).
    - `quick`: run `QUICK_STEPS` steps (by algorithm) instead of the full lengths.
    - `seeds`: runs per experiment (>= 1; the paper uses 30).
    - `out`: a folder: each experiment's figure is written there as NAME.png and NAME.pdf.
    - `experiments`: which experiments (default all five).
    - `log`: called with a line after each experiment (e.g. progress to stderr).
    - `engine`: "overlaps" (default: every run on the five overlaps, seconds) or "Rd" (every
      run with vectors in R^d, as the paper's code; about 12 minutes for the SGD run alone).

    **Returns:** the results, in the order of `experiments`.
    """
    seeds = _check_count("seeds", seeds, 1)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    results = []
    for experiment in experiments:
        if not isinstance(experiment, Experiment):
            raise ValueError(f"experiments must hold Experiment objects, got {experiment!r}")
        index = next((i for i, e in enumerate(EXPERIMENTS) if e == experiment), len(EXPERIMENTS))
        scale = min(1.0, QUICK_STEPS[experiment.algorithm] / experiment.steps) if quick else 1.0
        result = run_experiment(experiment, jax.random.fold_in(key, index), seeds=seeds, scale=scale, engine=engine)
        results.append(result)
        if out is not None:
            import matplotlib.pyplot as plt

            from flowsim.plots import save_figure

            figure = experiment_figure(result)
            save_figure(figure, Path(out) / experiment.name)
            plt.close(figure)
        if log is not None:
            log(f"{experiment.name}: {int(result.steps[-1])} steps x {seeds} seeds in {result.seconds:.1f} s")
    return results


def _percent(count: int, total: int) -> str:
    return f"{count / total:.0%}"


def summary_table(results: Sequence[ExperimentResult]) -> str:
    """The summaries as a table: shares of seeds by where they ended, final excess risks.

    Columns: steps run, seeds, share that reached +-(k*, v*) (within the run's tol, max norm)
    and that is still approaching it, share at other attractors, share ended elsewhere
    (still moving) or diverged, the final lam, the mean (over seeds) excess risk R - eps^2 at the
    last step and the oracle's excess risk at the final lam. Each other attractor follows on
    its own line (overlaps up to the sign symmetry, kind, excess risk, share).
    """
    header = (
        f"{'experiment':<21} {'steps':>7} {'seeds':>5} {'reached':>7} {'approach':>8} {'other':>5} "
        f"{'moving':>7} {'diverged':>8} {'final lam':>9} {'excess (mean)':>13} {'oracle excess':>13}"
    )
    lines = [header]
    tolerances = sorted({r.summary.tol for r in results})
    for result in results:
        s = result.summary
        others = sum(a.count for a in s.others)
        lines.append(
            f"{result.experiment.name:<21} {int(result.steps[-1]):>7} {s.seeds:>5} "
            f"{_percent(s.reached, s.seeds):>7} {_percent(s.approaching, s.seeds):>8} "
            f"{_percent(others, s.seeds):>5} {_percent(s.unassigned, s.seeds):>7} {_percent(s.diverged, s.seeds):>8} "
            f"{s.lam_final:>9.4g} {s.final_excess:>13.4e} {s.oracle_excess:>13.4e}"
        )
        for a in s.others:
            point = ", ".join(f"{x:+.3f}" for x in np.round(a.point, 3) + 0.0)
            lines.append(
                f"    other attractor ({point}) {a.kind}: share {a.share:.0%}, "
                f"excess risk {a.risk - result.experiment.eps**2:.4e}"
            )
    within = ", ".join(
        f"{tol:g} ({' and '.join(sorted({r.experiment.algorithm for r in results if r.summary.tol == tol}))})"
        for tol in tolerances
    )
    lines.append(
        f"reached: max-norm distance to +-(k*, v*) <= {within}; "
        "approach: near M, |nu| ~ 1, sign(kappa) = sign(nu), |kappa| still rising;"
    )
    lines.append(
        "moving: away from every fixed point of the flow at the final lam (still moving, if slowly: "
        "a stalled kappa); excess = R - eps^2, mean over seeds."
    )
    return "\n".join(lines)


def _band(values: np.ndarray):
    finite = np.isfinite(values).any(axis=0)
    low, mean, high = np.full((3, values.shape[1]), np.nan)
    if finite.any():
        kept = values[:, finite]
        low[finite], high[finite] = np.nanpercentile(kept, [2.5, 97.5], axis=0)
        mean[finite] = np.nanmean(kept, axis=0)
    return low, mean, high


def _lines(ax, x, ys, **style) -> None:
    """One line per row of ys against x (or per row of x too), as a single collection (fast to draw)."""
    from matplotlib.collections import LineCollection

    x = np.broadcast_to(x, ys.shape)
    ax.add_collection(LineCollection(np.stack([x, ys], axis=-1), **style))
    ax.autoscale_view()


def experiment_figure(result: ExperimentResult) -> "Figure":
    """The four panels of SPEC.md section 6 for one experiment.

    Excess risk R - eps^2 against the step (mean over seeds, 2.5-97.5 percentile band, and the
    oracle's excess risk at lam(step)); |kappa| and |nu| against the step (one line per seed);
    trajectories in the (kappa, nu) plane (start hollow, end filled); the distance to M,
    sqrt(theta^2 + eta^2 + rho^2), on a log axis (clipped below at 1e-16, so that runs on M
    stay visible). For SGD the gradient flow from each seed's initial overlaps is drawn dashed.

    **Returns:** the Figure, with `flowsim_result` (the `ExperimentResult` drawn).
    """
    import matplotlib.pyplot as plt

    from flowsim.plots import DISTANCE_FLOOR, LABEL_SIZE, LEGEND_SIZE, SYMBOLS, TICK_SIZE, TITLE_SIZE

    experiment, steps, m = result.experiment, result.steps.astype(float), result.overlaps
    fig, grid = plt.subplots(2, 2, figsize=(13, 10), layout="constrained")
    risk_ax, abs_ax, plane_ax, distance_ax = grid.ravel()
    ode = result.ode_overlaps
    ode_style = dict(linestyles="--", linewidths=1.0, colors="black", alpha=0.5)
    ode_legend = dict(ls="--", lw=1.0, color="black", alpha=0.7, label="gradient flow (ODE)")
    seed_alpha = 0.5 if result.seeds <= 10 else 0.3

    floor = 1e-12
    low, mean, high = _band(np.maximum(result.excess_risk, floor))
    risk_ax.fill_between(steps, low, high, color="tab:blue", alpha=0.25, lw=0, label="95% of seeds")
    risk_ax.plot(steps, mean, color="tab:blue", lw=2, label="mean over seeds")
    risk_ax.plot(steps, np.maximum(result.oracle_excess, floor), color="tab:green", ls=":", lw=2.5, label="oracle")
    if result.ode_excess_risk is not None:
        ode_mean = np.nanmean(np.maximum(result.ode_excess_risk, floor), axis=0)
        risk_ax.plot(steps, ode_mean, **{**ode_legend, "alpha": 1.0, "lw": 1.5, "label": "ODE, mean"})
    risk_ax.set_yscale("log")
    risk_ax.set_ylabel(r"excess risk $R - \varepsilon^2$", fontsize=LABEL_SIZE)
    risk_ax.legend(fontsize=LEGEND_SIZE)

    for column, color, name in ((0, "tab:blue", r"$|\kappa|$"), (1, "tab:orange", r"$|\nu|$")):
        _lines(abs_ax, steps, np.abs(m[..., column]), colors=color, linewidths=1.0, alpha=seed_alpha)
        abs_ax.plot([], [], color=color, lw=2, label=name)
        if ode is not None:
            _lines(abs_ax, steps, np.abs(ode[..., column]), **ode_style)
    if ode is not None:
        abs_ax.plot([], [], **ode_legend)
    abs_ax.set_ylim(-0.02, 1.02)
    abs_ax.set_ylabel(r"$|\kappa|$, $|\nu|$", fontsize=LABEL_SIZE)
    abs_ax.legend(fontsize=LEGEND_SIZE, loc="lower right")

    colors = [f"C{i % 10}" for i in range(result.seeds)]
    _lines(plane_ax, m[..., 0], m[..., 1], colors=colors, linewidths=1.2, alpha=0.8)
    if ode is not None:
        _lines(plane_ax, ode[..., 0], ode[..., 1], **ode_style)
        plane_ax.plot([], [], **ode_legend)
    finite = np.isfinite(m).all(axis=-1)
    last = np.array([m[i][finite[i]][-1] if finite[i].any() else np.full(5, np.nan) for i in range(result.seeds)])
    plane_ax.scatter(m[:, 0, 0], m[:, 0, 1], s=25, facecolors="white", edgecolors=colors, zorder=3)
    plane_ax.scatter(last[:, 0], last[:, 1], s=36, c=colors, zorder=4)
    oracle_style = dict(ms=16, color="gold", mec="black", ls="none", zorder=5)
    plane_ax.plot([1, -1], [1, -1], "*", **oracle_style, label=r"$\pm(k^*, v^*)$")
    plane_ax.set(xlim=(-1.05, 1.05), ylim=(-1.05, 1.05), aspect="equal")
    plane_ax.set_xlabel(SYMBOLS["kappa"], fontsize=LABEL_SIZE)
    plane_ax.set_ylabel(SYMBOLS["nu"], fontsize=LABEL_SIZE)
    plane_ax.legend(fontsize=LEGEND_SIZE, loc="lower right")

    distance = np.maximum(np.linalg.norm(m[..., 2:], axis=-1), DISTANCE_FLOOR)
    _lines(distance_ax, steps, distance, colors="tab:purple", linewidths=1.0, alpha=seed_alpha)
    if ode is not None:
        ode_distance = np.maximum(np.linalg.norm(ode[..., 2:], axis=-1), DISTANCE_FLOOR)
        _lines(distance_ax, steps, ode_distance, **ode_style)
        distance_ax.plot([], [], **ode_legend)
        distance_ax.legend(fontsize=LEGEND_SIZE)
    distance_ax.set_yscale("log")
    distance_ax.set_ylabel(r"distance to M  $\sqrt{\theta^2 + \eta^2 + \rho^2}$", fontsize=LABEL_SIZE)

    for ax in (risk_ax, abs_ax, distance_ax):
        ax.set_xlabel("step", fontsize=LABEL_SIZE)
        ax.set_xlim(steps[0], steps[-1])
    for ax in (risk_ax, abs_ax, plane_ax, distance_ax):
        ax.tick_params(labelsize=TICK_SIZE)
        ax.grid(True, color="0.9", lw=0.8, zorder=0)
    algorithm = "population PGD" if experiment.algorithm == "population" else "online SGD"
    how = {"overlaps": f"{algorithm} on the overlaps", "Rd": f"{algorithm} in $R^d$"}
    batch = f", batch {experiment.batch}" if experiment.batch else ""
    s = result.summary
    fig.suptitle(
        f"{experiment.name}: {experiment.init} init, $d$ = {experiment.d}, $\\lambda$ = {experiment.describe_lam()}, "
        f"$\\alpha$ = {experiment.alpha:g}, $\\varepsilon$ = {experiment.eps:g}\n"
        f"{how[result.engine]}{batch}, {int(steps[-1])} steps, {result.seeds} seeds: "
        f"{s.oracle_share:.0%} reach or approach $\\pm(k^*, v^*)$",
        fontsize=TITLE_SIZE,
    )
    fig.flowsim_result = result
    return fig
