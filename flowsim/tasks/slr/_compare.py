"""Finite-sample training against its deterministic limit: SGD runs compared with the flow or the map.

A run of `run_sgd` logs overlaps at steps 0, log_every, ..., steps on the clock t = lr * step.
`compare` starts the gradient flow (or the exact projected-gradient-descent map on the overlaps)
from the run's initial overlaps, evaluates it on the same logged times with the same lam
schedule (a schedule is a function of t, so one object serves both), and reports how far the
two trajectories ever are apart. The sweeps repeat this over the step size, the batch size or
the dataset size and fit the log-log slope of the deviation, which theory predicts:

- online SGD around the flow at a fixed horizon: fluctuations of order sqrt(lr / batch)
  (diffusion approximation) plus a bias of order lr (discretisation, and the Ito drift of the
  renormalisation, of order lr * d / batch): slope between 1/2 and 1 in lr, about -1/2 in batch;
- full-batch GD on n samples around population GD: the empirical gradient is off by
  O(sqrt(d / n)): slope -1/2 in n.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from flowsim.schedules import Constant
from flowsim.tasks.slr._dynamics import iterate_map, solve_flow
from flowsim.tasks.slr._overlaps import OVERLAP_NAMES
from flowsim.tasks.slr._problem import Problem
from flowsim.tasks.slr._sgd import SGDRun, run_sgd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "ATTRACTOR_TOL",
    "REFERENCES",
    "Comparison",
    "SweepResult",
    "compare",
    "overlay_figure",
    "sweep_batch",
    "sweep_dataset",
    "sweep_lr",
]

#: What SGD is compared with: the gradient flow, or the population PGD map at the run's step size.
REFERENCES = ("flow", "map")

#: Default tolerance (max norm, up to (k, v) -> (-k, -v)) for "ended at the same attractor":
#: far below the distance between distinct fixed points (the corners of M are 1 or 2 apart, the
#: attractor off M, +-(0, 0, theta, 1, 0), is 1 from them), above what is left of SGD noise once
#: the flow has settled it.
ATTRACTOR_TOL = 0.1
#: Default flow time for which both end points are continued before they are compared again.
SETTLE = 200.0
#: (k, v) -> (-k, -v) leaves the predictor unchanged and maps the overlaps by this sign.
_MIRROR = np.array([-1.0, -1.0, -1.0, -1.0, 1.0])


@dataclass(frozen=True)
class Comparison:
    """An SGD run and its deterministic reference on the same clock t = lr * step.

    **Fields:**

    - `reference`: "flow" (the gradient flow) or "map" (population PGD on the overlaps, same lr).
    - `lr`: the run's step size.
    - `steps`, `times`: the run's logged steps and their times t = lr * step, shape (logs,).
    - `sgd`, `sgd_risk`: the run's overlaps (seeds, logs, 5) and population risk (seeds, logs).
    - `ys`, `risk`: the reference's overlaps and risk at the same times, same shapes.
    - `deviation`: max over the logged times of |sgd - reference| for each overlap, (seeds, 5).
    - `risk_deviation`: the same for the risk, (seeds,).
    - `end_distance`: max-norm distance between the end points, up to (k, v) -> (-k, -v), (seeds,).
    - `same_attractor`: whether both ended at the same attractor (see `compare`), (seeds,).
    - `attractor_tol`: the tolerance used.
    - `failed`: {seed: why} for seeds where either side became non-finite (SGD divergence,
      solver failure); their deviations are inf and same_attractor is False.
    """

    reference: str
    lr: float
    steps: np.ndarray
    times: np.ndarray
    sgd: np.ndarray
    sgd_risk: np.ndarray
    ys: np.ndarray
    risk: np.ndarray
    deviation: np.ndarray
    risk_deviation: np.ndarray
    end_distance: np.ndarray
    same_attractor: np.ndarray
    attractor_tol: float
    failed: dict[int, str]

    @property
    def overlap_deviation(self) -> np.ndarray:
        """Per seed, the largest deviation of any overlap, (seeds,)."""
        return self.deviation.max(axis=-1)

    @property
    def max_deviation(self) -> np.ndarray:
        """Over all seeds, the largest deviation of each overlap, (5,)."""
        return self.deviation.max(axis=0)

    @property
    def max_risk_deviation(self) -> float:
        """Over all seeds, the largest deviation of the risk."""
        return float(self.risk_deviation.max())

    def table(self) -> str:
        """Per seed and overall: max |SGD - reference| of each overlap and of the risk, and the end points."""
        names = [f"|d {name}|" for name in OVERLAP_NAMES] + ["|d risk|"]
        header = f"{'seed':>6} " + " ".join(f"{name:>10}" for name in names) + f" {'end dist':>9} {'same attr.':>10}"
        lines = [
            f"SGD vs {_REFERENCE_NAMES[self.reference]}: max over t in [0, {self.times[-1]:g}] "
            f"(lr = {self.lr:g}, {len(self.times)} logged times, {len(self.deviation)} seeds)",
            header,
        ]
        for seed in range(len(self.deviation)):
            values = [*self.deviation[seed], self.risk_deviation[seed]]
            same = "yes" if self.same_attractor[seed] else "no"
            lines.append(
                f"{seed:>6} " + " ".join(f"{x:>10.3e}" for x in values) + f" {self.end_distance[seed]:>9.3g} {same:>10}"
            )
        for label, reduce in (("max", np.max), ("mean", np.mean)):
            values = [*reduce(self.deviation, axis=0), reduce(self.risk_deviation)]
            lines.append(f"{label:>6} " + " ".join(f"{x:>10.3e}" for x in values))
        lines.append(
            f"same attractor (end points, or where the flow takes them, within {self.attractor_tol:g}): "
            f"{int(self.same_attractor.sum())} of {len(self.same_attractor)} seeds"
        )
        lines += [f"seed {seed}: {why}" for seed, why in sorted(self.failed.items())]
        return "\n".join(lines)


_REFERENCE_NAMES = {"flow": "gradient flow", "map": "population PGD map"}


def _run_lr(run: SGDRun) -> float:
    """The step size of a run, from its clock t = lr * step (the run does not store lr itself)."""
    return float(run.times[-1] / run.steps[-1])


def _check_schedule(run: SGDRun, schedule, problem: Problem) -> None:
    """The reference must see the lam the run saw: a forgotten schedule would compare two different problems."""
    lam = np.asarray(jax.vmap(schedule)(jnp.asarray(run.times, dtype=float)))
    if not np.allclose(lam, np.asarray(run.lam), rtol=1e-12, atol=0.0):
        worst = int(np.argmax(np.abs(lam - np.asarray(run.lam))))
        raise ValueError(
            f"the schedule gives lam = {lam[worst]:.6g} at t = {run.times[worst]:g} where the run used "
            f"lam = {float(run.lam[worst]):.6g}: pass the run's schedule "
            f"(or none if it used problem.lam = {problem.lam})"
        )


def _reference(problem: Problem, m0, steps, times, lr: float, schedule, reference: str, options):
    """The reference overlaps (seeds, logs, 5), risk (seeds, logs) and {seed: failure} on the logged times."""
    if reference == "map":
        log_every = int(steps[1] - steps[0])
        mapped = iterate_map(problem, m0, lr, int(steps[-1]), schedule=schedule, log_every=log_every)
        failed = {seed: f"the map diverged by step {step}" for seed, step in mapped.first_non_finite().items()}
        return np.asarray(mapped.ys), np.asarray(mapped.risk), failed
    solved = solve_flow(problem, m0, times, schedule=schedule, **options)
    failed = {failure.index: f"the flow failed: {failure}" for failure in solved.failures()}
    return np.asarray(solved.ys), np.asarray(solved.observed), failed


def _settle(problem: Problem, schedule, trajectories, t0: float, settle: float, count: int, options) -> np.ndarray:
    """Where the flow takes the trajectories' last points in a time `settle` (from time t0); NaN if it failed."""
    # As many saved times and rows as the comparison's own solve: the same compiled program.
    ts = np.linspace(t0, t0 + settle, count)
    solved = solve_flow(problem, trajectories[:, -1], ts, schedule=schedule, **options)
    return np.where(np.asarray(solved.ok)[:, None], np.asarray(solved.y_final), np.nan)


def _max_abs(a, b, axis):
    """max |a - b| along axis; inf where any compared value is not finite (a diverged side is unboundedly far)."""
    difference = np.abs(a - b)
    return np.where(np.isfinite(difference).all(axis=axis), difference.max(axis=axis, initial=0.0), np.inf)


def _distance_up_to_sign(a, b):
    """Max-norm distance between overlaps (..., 5), the nearer of b and its mirror image.

    Not canonical_sign on both: near a fixed point with kappa = 0 (e.g. (0, 0, theta, 1, 0)) the
    sign of a noisy kappa would decide, and mirror one point but not the other.
    """
    return np.minimum(_max_abs(a, b, axis=-1), _max_abs(a, b * _MIRROR, axis=-1))


def compare(
    run: SGDRun,
    problem: Problem,
    *,
    schedule=None,
    reference: str = "flow",
    attractor_tol: float = ATTRACTOR_TOL,
    settle: float = SETTLE,
    **options,
) -> Comparison:
    """Compare an SGD run with the gradient flow (or the population PGD map) from the same start.

    The reference starts from the run's logged overlaps at step 0 (exact: they are the overlaps
    of the initial vectors) and is evaluated at the run's logged times t = lr * step with the same
    lam schedule. The schedule is checked against the lam the run logged.

    "Same attractor" compares end points up to the symmetry (k, v) -> (-k, -v), in max norm: they
    count as the same when they are within `attractor_tol`, or when the flow, continued from both
    for a time `settle` (under the schedule), brings them within `attractor_tol`. The
    continuation matters for noisy runs: an SGD end point jittered off a slowly approached sink
    is carried to that sink, one past a separatrix to another attractor.

    **Arguments:**

    - `run`: from `run_sgd` (any mode), on `problem`.
    - `problem`: the task the run trained on.
    - `schedule`: lam as a function of t, the one the run used; default: problem.lam.
    - `reference`: "flow" (the gradient flow, the lr -> 0 limit) or "map" (the exact PGD map
      on the overlaps at the run's lr: what mode "population" computes in R^d).
    - `attractor_tol`: the end-point tolerance of `same_attractor`.
    - `settle`: how long the flow continues end points farther apart than `attractor_tol`
      (0: compare the end points only).
    - `options`: passed to `solve_flow` (rtol, atol, max_steps, ...).

    **Returns:** a `Comparison`.
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if not (isinstance(attractor_tol, int | float) and attractor_tol > 0):
        raise ValueError(f"attractor_tol must be a number > 0, got {attractor_tol!r}")
    if not (isinstance(settle, int | float) and np.isfinite(settle) and settle >= 0):
        raise ValueError(f"settle must be a finite number >= 0, got {settle!r}")
    schedule = schedule if schedule is not None else Constant(problem.lam)
    _check_schedule(run, schedule, problem)
    steps, times = np.asarray(run.steps), np.asarray(run.times, dtype=float)
    sgd, sgd_risk = np.asarray(run.overlaps), np.asarray(run.risk)
    lr = _run_lr(run)
    ys, risk, failed = _reference(problem, sgd[:, 0], steps, times, lr, schedule, reference, options)
    for seed, step in run.diverged.items():
        failed[seed] = f"SGD diverged at step {step}"
    deviation = _max_abs(sgd, ys, axis=1)
    risk_deviation = _max_abs(sgd_risk, risk, axis=1)
    end_distance = _distance_up_to_sign(sgd[:, -1], ys[:, -1])
    for seed in failed:
        deviation[seed], risk_deviation[seed], end_distance[seed] = np.inf, np.inf, np.inf
    same = end_distance <= attractor_tol
    apart = ~same & np.isfinite(end_distance)
    if settle > 0 and apart.any():
        settled = [_settle(problem, schedule, ends, times[-1], settle, len(times), options) for ends in (sgd, ys)]
        same |= apart & (_distance_up_to_sign(*settled) <= attractor_tol)
    return Comparison(
        reference=reference,
        lr=lr,
        steps=steps,
        times=times,
        sgd=sgd,
        sgd_risk=sgd_risk,
        ys=ys,
        risk=risk,
        deviation=deviation,
        risk_deviation=risk_deviation,
        end_distance=end_distance,
        same_attractor=same,
        attractor_tol=float(attractor_tol),
        failed=dict(sorted(failed.items())),
    )


@dataclass(frozen=True)
class SweepResult:
    """How the deviation from the deterministic limit changes along one parameter.

    **Fields:**

    - `parameter`: "lr", "batch" or "n".
    - `values`: the swept values, shape (values,).
    - `deviation`: per value, the mean over seeds of the largest deviation of any overlap.
    - `stderr`: its standard error over seeds.
    - `risk_deviation`: per value, the mean over seeds of the largest deviation of the risk.
    - `slope`: the least-squares slope of log(deviation) against log(value), over the values
      where no seed failed (a diverged seed makes its value's deviation inf); NaN if fewer than two.
    - `expected`: the slope theory predicts, as (low, high).
    - `comparisons`: the `Comparison` of each value.
    """

    parameter: str
    values: np.ndarray
    deviation: np.ndarray
    stderr: np.ndarray
    risk_deviation: np.ndarray
    slope: float
    expected: tuple[float, float]
    comparisons: tuple[Comparison, ...]

    def table(self) -> str:
        """One row per value, then the fitted slope."""
        reference = _REFERENCE_NAMES[self.comparisons[0].reference]
        lines = [
            f"Deviation of SGD from the {reference} vs {self.parameter} "
            "(mean over seeds of the max over t and overlaps)",
            f"{self.parameter:>10} {'t_end':>9} {'steps':>8} {'deviation':>11} {'stderr':>9} {'risk dev.':>10} "
            f"{'same attr.':>10}",
        ]
        for value, comparison, deviation, stderr, risk in zip(
            self.values, self.comparisons, self.deviation, self.stderr, self.risk_deviation, strict=True
        ):
            same = f"{comparison.same_attractor.mean():.0%}"
            lines.append(
                f"{value:>10.4g} {comparison.times[-1]:>9.4g} {comparison.steps[-1]:>8d} {deviation:>11.4e} "
                f"{stderr:>9.2e} {risk:>10.3e} {same:>10}"
            )
        low, high = self.expected
        band = f"{low:g}" if low == high else f"{low:g} to {high:g}"
        lines.append(f"log-log slope: {self.slope:.3f} (theory: {band})")
        return "\n".join(lines)


def _sweep(parameter: str, values, comparisons: list[Comparison], expected) -> SweepResult:
    per_seed = np.array([comparison.overlap_deviation for comparison in comparisons])
    deviation = per_seed.mean(axis=1)  # inf where a seed diverged: that value is left out of the fit
    seeds = per_seed.shape[1]
    with np.errstate(invalid="ignore"):  # inf - inf for a value with a diverged seed: NaN, as it should
        stderr = per_seed.std(axis=1, ddof=1) / np.sqrt(seeds) if seeds > 1 else np.full(len(values), np.nan)
    risk = np.array([comparison.risk_deviation.mean() for comparison in comparisons])
    fitted = np.isfinite(deviation)
    slope = float(np.polyfit(np.log(values[fitted]), np.log(deviation[fitted]), 1)[0]) if fitted.sum() >= 2 else np.nan
    return SweepResult(parameter, np.asarray(values), deviation, stderr, risk, slope, expected, tuple(comparisons))


def _check_values(name: str, values, integer: bool) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) < 2 or not (np.isfinite(array).all() and (array > 0).all()):
        raise ValueError(f"{name} must hold at least two finite values > 0, got {values!r}")
    if len(np.unique(array)) != len(array):
        raise ValueError(f"{name} must hold distinct values, got {values!r}")
    if integer and not np.all(array == np.round(array)):
        raise ValueError(f"{name} must hold integers, got {values!r}")
    return array


def _steps_for(lr: float, t_end: float, logs: int) -> tuple[int, int]:
    """(steps, log_every) with `logs` logged intervals and lr * steps as close to t_end as that allows."""
    for name, value in (("lr", lr), ("t_end", t_end)):
        if not (isinstance(value, int | float) and np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if isinstance(logs, bool) or not isinstance(logs, int) or logs < 1:
        raise ValueError(f"logs must be an integer >= 1, got {logs!r}")
    log_every = max(1, round(t_end / (lr * logs)))
    return logs * log_every, log_every


def _online_comparison(problem, key, lr, steps, log_every, online, reference, options) -> Comparison:
    """Run online SGD (`online`: batch, seeds, init, schedule, engine) and compare it with its reference."""
    run = run_sgd(problem, key, lr=lr, steps=steps, log_every=log_every, **online)
    return compare(run, problem, schedule=online["schedule"], reference=reference, **options)


def sweep_lr(
    problem: Problem,
    key,
    lrs,
    *,
    t_end: float,
    batch: int = 1,
    seeds: int = 8,
    init="sphere",
    schedule=None,
    logs: int = 32,
    reference: str = "flow",
    engine: str = "Rd",
    **options,
) -> SweepResult:
    """Online SGD at several step sizes against the flow, at a fixed horizon t_end.

    Every lr runs about t_end / lr steps (rounded to a multiple of `logs`; the horizon actually
    reached is each comparison's times[-1]). All runs use the same key: the same hidden
    directions and initial vectors, so that the sweep shows the effect of lr, not of the seeds.
    Each distinct number of steps compiles its own program.

    **Arguments:**

    - `problem`, `key`: the task and a JAX PRNG key.
    - `lrs`: at least two step sizes.
    - `t_end`: the horizon on the flow's clock.
    - `batch`, `seeds`, `init`, `schedule`, `engine`: passed to `run_sgd` (the schedule, a
      function of t, serves every lr and the flow alike; engine "overlaps" runs the exact
      online-SGD chain on the overlaps, at any d).
    - `logs`: logged intervals per run.
    - `reference`, `options`: passed to `compare` (attractor_tol, settle, solver options).

    **Returns:** a `SweepResult`; theory expects a slope between 1/2 (fluctuations,
    sqrt(lr / batch)) and 1 (bias, lr).
    """
    values = _check_values("lrs", lrs, integer=False)
    online = {"batch": batch, "seeds": seeds, "init": init, "schedule": schedule, "engine": engine}
    comparisons = [
        _online_comparison(problem, key, float(lr), *_steps_for(float(lr), t_end, logs), online, reference, options)
        for lr in values
    ]
    return _sweep("lr", values, comparisons, (0.5, 1.0))


def sweep_batch(
    problem: Problem,
    key,
    batches,
    *,
    lr: float,
    t_end: float,
    seeds: int = 8,
    init="sphere",
    schedule=None,
    logs: int = 32,
    reference: str = "flow",
    engine: str = "Rd",
    **options,
) -> SweepResult:
    """Online SGD at several batch sizes (fixed lr) against the flow, at a fixed horizon t_end.

    Same conventions and arguments as `sweep_lr`; each batch size compiles its own program.

    **Returns:** a `SweepResult`; theory expects a slope of -1/2 (fluctuations, sqrt(lr / batch))
    to -1 (the renormalisation drift, lr * d / batch).
    """
    values = _check_values("batches", batches, integer=True)
    steps, log_every = _steps_for(lr, t_end, logs)
    comparisons = [
        _online_comparison(
            problem,
            key,
            lr,
            steps,
            log_every,
            {"batch": int(batch), "seeds": seeds, "init": init, "schedule": schedule, "engine": engine},
            reference,
            options,
        )
        for batch in values.astype(int)
    ]
    return _sweep("batch", values, comparisons, (-1.0, -0.5))


def sweep_dataset(
    problem: Problem,
    key,
    ns,
    *,
    lr: float,
    steps: int,
    seeds: int = 8,
    init="sphere",
    schedule=None,
    log_every: int = 1,
    n_test: int = 1000,
    **options,
) -> SweepResult:
    """Full-batch GD on fixed datasets of n samples against population GD (the map, same lr).

    Both take the same steps from the same start; only the gradient differs (empirical on n
    samples vs exact), so the deviation isolates the finite dataset. Each n compiles its own program.

    **Arguments:**

    - `problem`, `key`: the task and a JAX PRNG key (the same for every n).
    - `ns`: at least two dataset sizes.
    - `lr`, `steps`, `seeds`, `init`, `schedule`, `log_every`: passed to `run_sgd`.
    - `n_test`: held-out samples for the run's test risk (not used by the comparison).
    - `options`: passed to `compare` (attractor_tol, settle, solver options).

    **Returns:** a `SweepResult`; theory expects a slope of -1/2 (the empirical gradient is
    off by O(sqrt(d / n))).
    """
    values = _check_values("ns", ns, integer=True)
    comparisons = []
    for n in values.astype(int):
        run = run_sgd(
            problem,
            key,
            init=init,
            lr=lr,
            steps=steps,
            batch=int(n),
            mode="dataset",
            schedule=schedule,
            log_every=log_every,
            seeds=seeds,
            n=int(n),
            n_test=n_test,
        )
        comparisons.append(compare(run, problem, schedule=schedule, reference="map", **options))
    return _sweep("n", values, comparisons, (-0.5, -0.5))


def overlay_figure(comparison: Comparison, *, seeds=None, title: str | None = None) -> "Figure":
    """SGD trajectories (thin, one colour per seed) over their reference (dashed), against t.

    Four panels: kappa, nu, the distance to M = sqrt(theta^2 + eta^2 + rho^2) (log axis, clipped
    below at 1e-16 so that runs on M stay visible) and the population risk.

    **Arguments:**

    - `comparison`: from `compare`.
    - `seeds`: which seeds to draw (default: all).
    - `title`: the figure's title (default: a summary of the comparison).

    **Returns:** the Figure, with `flowsim_comparison` set to `comparison`.
    """
    import matplotlib.pyplot as plt

    from flowsim import plots

    chosen = range(len(comparison.sgd)) if seeds is None else [int(i) for i in seeds]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), layout="constrained")
    panels = [
        (r"$\kappa = \langle k, k^*\rangle$", lambda m, r: m[..., 0], "linear"),
        (r"$\nu = \langle v, v^*\rangle$", lambda m, r: m[..., 1], "linear"),
        (
            r"distance to M  $\sqrt{\theta^2 + \eta^2 + \rho^2}$",
            lambda m, r: np.maximum(np.linalg.norm(m[..., 2:], axis=-1), plots.DISTANCE_FLOOR),
            "log",
        ),
        ("population risk", lambda m, r: r, "linear"),
    ]
    t = comparison.times
    for ax, (label, quantity, scale) in zip(axes.ravel(), panels, strict=True):
        for n, seed in enumerate(chosen):
            color = f"C{n % 10}"
            ax.plot(t, quantity(comparison.sgd[seed], comparison.sgd_risk[seed]), color=color, lw=0.9, alpha=0.8)
            ax.plot(t, quantity(comparison.ys[seed], comparison.risk[seed]), color=color, lw=1.8, ls="--")
        ax.set_yscale(scale)
        ax.set_xlabel("time $t$ = lr $\\cdot$ step", fontsize=plots.LABEL_SIZE)
        ax.set_ylabel(label, fontsize=plots.LABEL_SIZE)
        ax.tick_params(labelsize=plots.TICK_SIZE)
        ax.grid(True, color="0.9", lw=0.8, zorder=0)
    reference = _REFERENCE_NAMES[comparison.reference]
    axes[0, 0].plot([], [], color="black", lw=0.9, label="SGD")
    axes[0, 0].plot([], [], color="black", lw=1.8, ls="--", label=reference)
    axes[0, 0].legend(fontsize=plots.LEGEND_SIZE, loc="best")
    if title is None:
        title = (
            f"SGD (lr = {comparison.lr:g}) vs {reference}: max |d overlap| = "
            f"{comparison.max_deviation.max():.3g}, same attractor {int(comparison.same_attractor.sum())}"
            f"/{len(comparison.same_attractor)}"
        )
    fig.suptitle(title, fontsize=plots.TITLE_SIZE)
    fig.flowsim_comparison = comparison
    return fig
