"""The five reference experiments of the paper (docs/science.md section 6), reproduced.

Every experiment runs on the five overlaps by default (engine "overlaps"): population runs
iterate the exact projected-gradient-descent map (`Problem.discrete_map`, started from
`initial_overlaps`, which has the law of the R^d initialisations), and the SGD run is the
exact online-SGD chain on the overlaps (`Problem.sgd_step`). Engine "rd" runs the same
algorithms with vectors in R^d (`run_sgd`), to cross-check. The engine's runner
(`flowsim.run_experiment`) compares the SGD run with the gradient flow and classifies each
seed's end point:

- reached +-(k*, v*): max-norm distance to (1, 1, 0, 0, 0), after the symmetry
  (k, v) -> (-k, -v), at most `tol` (1e-2 for population runs, 5e-2 for SGD, whose iterates
  fluctuate around the fixed point);
- approaching +-(k*, v*): not yet within `tol`, but at distance <= `tol` from M, |nu| >= 1 - tol,
  kappa and nu of the same sign, and the flow at the final lam moving |kappa| towards 1. On M this
  is the edge nu = +-1 that leads to the sink: kappa converges slowly there (docs/science.md section 5);
- another attractor of the flow at the final lam, or none (still moving, e.g. a stalled kappa),
  or diverged.
"""

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jax
import numpy as np

from flowsim._checks import InvalidInput, as_key, check_choice, check_count, check_shape
from flowsim.experiments import ALGORITHMS, ExperimentResult
from flowsim.experiments import run_experiment as run_runs
from flowsim.schedules import InverseTimeDecay
from flowsim.tasks.slr._problem import SYMBOLS, Problem, distance_to_manifold
from flowsim.tasks.slr._sgd import ENGINES, run_sgd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "EXPERIMENTS",
    "QUICK_STEPS",
    "TOLERANCES",
    "Experiment",
    "experiment_figure",
    "reproduce",
    "run_experiment",
]

#: Tolerances (max norm) for "reached +-(k*, v*)", by algorithm.
TOLERANCES = {"population": 1e-2, "sgd": 5e-2}
#: Steps run by `reproduce(quick=True)` (at most the full length), by algorithm. 6000 population
#: steps at alpha = 4e-3 (t = 24) let every start on M leave the saddle (0, 0) and reach |nu| = 1,
#: and one length for all four population runs means one compiled map. 2000 SGD steps keep the
#: quick path quick with engine "rd" too (a step in R^80, batch 5, costs ~3 ms for 30 seeds).
QUICK_STEPS = {"population": 6000, "sgd": 2000}


@dataclass(frozen=True)
class Experiment:
    """One row of the table of docs/science.md section 6.

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

    def __post_init__(self):
        check_choice("algorithm", self.algorithm, ALGORITHMS)

    @property
    def task(self) -> Problem:
        """The task, lam on the flow's clock t = alpha * step (decay 0 gives a constant lam, and every
        experiment the same kind of schedule, so that compiled runs are shared)."""
        return Problem(self.d, self.L, InverseTimeDecay(self.lam, self.decay, self.alpha), self.gamma, self.eps)

    def describe_lam(self) -> str:
        return InverseTimeDecay(self.lam, self.decay, self.alpha).describe().replace(" step", "·step")


#: The five reference experiments (docs/science.md section 6), 30 seeds each in the paper.
EXPERIMENTS = (
    Experiment("init_manifold", "manifold", 400, 0.1, 0.0, 4e-3, 20_000, "population"),
    Experiment("sphere_large_lambda", "sphere", 400, 0.9, 0.0, 1e-3, 120_000, "population"),
    Experiment("sphere_small_lambda", "sphere", 400, 0.1, 0.0, 4e-3, 20_000, "population"),
    Experiment("sphere_schedule", "sphere", 400, 1.0, 1e-4, 4e-3, 120_000, "population"),
    Experiment("sgd_sphere_schedule", "sphere", 80, 2.0, 1e-4, 1e-3, 200_000, "sgd", batch=5, eps=0.1),
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
    - `key`: a JAX PRNG key or an integer seed (initialisations; for SGD also hidden directions and data).
    - `seeds`: the number of independent runs (>= 1).
    - `scale`: the fraction of the experiment's steps to run (> 0; 1 is the paper's length).
    - `log_points`: about how many logged steps (>= 1; every step for short runs).
    - `engine`: "overlaps" (population runs: the exact map on the five overlaps; SGD: the exact
      online-SGD chain on the overlaps, at a cost independent of d) or "rd" (the same
      algorithm with vectors in R^d, to cross-check).
    - `m0`: initial overlaps, shape (seeds, 5), instead of drawing the experiment's
      initialisation (in R^d, vectors with these overlaps are built).
    - `tol`: the max-norm distance to +-(k*, v*) counted as reached (default 1e-2 for population
      runs, 5e-2 for SGD).

    **Returns:** an `ExperimentResult` (`flowsim.experiments`), whose states are the overlaps.
    """
    if not isinstance(experiment, Experiment):
        raise InvalidInput(f"experiment must be an Experiment, got {experiment!r}")
    check_choice("engine", engine, ENGINES)
    if m0 is not None:
        m0 = check_shape("m0", m0, (check_count("seeds", seeds, 1), 5), "(seeds, 5) = ")
    train = None
    if engine == "rd":
        mode = "online" if experiment.algorithm == "sgd" else "population"
        train = functools.partial(run_sgd, mode=mode, engine="rd")
    return run_runs(
        experiment,
        key,
        seeds=seeds,
        scale=scale,
        log_points=log_points,
        y0=m0,
        tol=TOLERANCES[experiment.algorithm] if tol is None else tol,
        train=train,
        engine=engine,
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
    each: Callable[[ExperimentResult], None] | None = None,
    unit: Callable | None = None,
) -> list[ExperimentResult]:
    """Run the reference experiments, and draw their figures into `out` if given.

    **Arguments:**

    - `key`: a JAX PRNG key or an integer seed; experiment i of `EXPERIMENTS` uses `jax.random.fold_in(key, i)`,
      so a subset of the experiments reproduces the same runs (any other experiment uses
      `fold_in(key, 5)`).
    - `quick`: run `QUICK_STEPS` steps (by algorithm) instead of the full lengths.
    - `seeds`: runs per experiment (>= 1; the paper uses 30).
    - `out`: a folder: each experiment's figure is written there as NAME.png and NAME.pdf.
    - `experiments`: which experiments (default all five).
    - `log`: called with a line after each experiment (e.g. progress to stderr).
    - `engine`: "overlaps" (default: every run on the five overlaps, seconds) or "rd" (every
      run with vectors in R^d, as the paper's code; about 12 minutes for the SGD run alone).
    - `each`: called with each result as soon as its experiment is done (e.g. to write its files,
      so that an interrupted reproduction keeps the experiments it finished).
    - `unit`: a store of finished work, `unit(name, compute) -> result` (`flowsim.results.RunRecord.unit`):
      each experiment is one unit named after it, read back where the store holds it. Default: computed.

    **Returns:** the results, in the order of `experiments`.
    """
    seeds = check_count("seeds", seeds, 1)
    check_choice("engine", engine, ENGINES)
    results = []
    for experiment in experiments:
        if not isinstance(experiment, Experiment):
            raise InvalidInput(f"experiments must hold Experiment objects, got {experiment!r}")
        index = next((i for i, e in enumerate(EXPERIMENTS) if e == experiment), len(EXPERIMENTS))
        scale = min(1.0, QUICK_STEPS[experiment.algorithm] / experiment.steps) if quick else 1.0
        run = functools.partial(
            run_experiment, experiment, jax.random.fold_in(as_key(key), index), seeds=seeds, scale=scale, engine=engine
        )
        result = run() if unit is None else unit(experiment.name, run)
        results.append(result)
        if out is not None:
            import matplotlib.pyplot as plt

            from flowsim.results import save_figure

            figure = experiment_figure(result)
            save_figure(figure, Path(out) / experiment.name)
            plt.close(figure)
        if log is not None:
            log(f"{experiment.name}: {int(result.steps[-1])} steps x {seeds} seeds in {result.seconds:.1f} s")
        if each is not None:
            each(result)
    return results


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
    """The four panels of docs/science.md section 6 for one experiment.

    Excess risk R - eps^2 against the step (mean over seeds, 2.5-97.5 percentile band, and the
    oracle's excess risk at lam(step)); |kappa| and |nu| against the step (one line per seed);
    trajectories in the (kappa, nu) plane (start hollow, end filled); the distance to M,
    sqrt(theta^2 + eta^2 + rho^2), on a log axis (clipped below at 1e-16, so that runs on M
    stay visible). For SGD the gradient flow from each seed's initial overlaps is drawn dashed.

    **Returns:** the Figure, with `flowsim_result` (the `ExperimentResult` drawn).
    """
    import matplotlib.pyplot as plt

    from flowsim.figures import LABEL_SIZE, LEGEND_SIZE, LOG_FLOOR, TICK_SIZE, TITLE_SIZE

    experiment, steps, m = result.experiment, result.steps.astype(float), result.ys
    fig, grid = plt.subplots(2, 2, figsize=(13, 10), layout="constrained")
    risk_ax, abs_ax, plane_ax, distance_ax = grid.ravel()
    ode = result.ode_ys
    ode_style = dict(linestyles="--", linewidths=1.0, colors="black", alpha=0.5)
    ode_legend = dict(ls="--", lw=1.0, color="black", alpha=0.7, label="gradient flow (ODE)")
    seed_alpha = 0.5 if result.seeds <= 10 else 0.3

    floor = 1e-12
    low, mean, high = _band(np.maximum(result.excess_risk, floor))
    risk_ax.fill_between(steps, low, high, color="tab:blue", alpha=0.25, lw=0, label="95% of seeds")
    risk_ax.plot(steps, mean, color="tab:blue", lw=2, label="mean over seeds")
    risk_ax.plot(steps, np.maximum(result.target_excess, floor), color="tab:green", ls=":", lw=2.5, label="oracle")
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

    distance = np.maximum(distance_to_manifold(m), LOG_FLOOR)
    _lines(distance_ax, steps, distance, colors="tab:purple", linewidths=1.0, alpha=seed_alpha)
    if ode is not None:
        ode_distance = np.maximum(distance_to_manifold(ode), LOG_FLOOR)
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
    how = {"overlaps": f"{algorithm} on the overlaps", "rd": f"{algorithm} in $R^d$"}
    batch = f", batch {experiment.batch}" if experiment.batch else ""
    s = result.summary
    fig.suptitle(
        f"{experiment.name}: {experiment.init} init, $d$ = {experiment.d}, $\\lambda$ = {experiment.describe_lam()}, "
        f"$\\alpha$ = {experiment.alpha:g}, $\\varepsilon$ = {experiment.eps:g}\n"
        f"{how[result.engine]}{batch}, {int(steps[-1])} steps, {result.seeds} seeds: "
        f"{s.target_share:.0%} reach or approach $\\pm(k^*, v^*)$",
        fontsize=TITLE_SIZE,
    )
    fig.flowsim_result = result
    return fig
