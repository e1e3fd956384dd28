"""Finite-sample training against its deterministic limit: SGD runs compared with the flow or the map.

An `SGDRun` logs states at steps 0, log_every, ..., steps on the clock t = lr * step, and holds
the task it trained on, schedule included. `compare` starts the gradient flow (or the task's exact
discrete map) from the run's initial states, evaluates it on the same logged times with that same
task (a schedule is a function of t, so one object serves both), and reports how far the two
trajectories ever are apart. The sweeps repeat this over the step size, the batch size or
the dataset size and fit the log-log slope of the deviation, which theory predicts:

- online SGD around the flow at a fixed horizon: fluctuations of order sqrt(lr / batch)
  (diffusion approximation) plus a bias of order lr (discretisation, and for SGD on spheres the
  Ito drift of the renormalisation, of order lr * d / batch): slope between 1/2 and 1 in lr,
  about -1/2 in batch;
- full-batch GD on n samples around population GD: the empirical gradient is off by
  O(sqrt(d / n)): slope -1/2 in n.
"""

import equinox as eqx
import numpy as np

from flowsim import _status
from flowsim._checks import NON_NEGATIVE, InvalidInput, check_choice, check_count, check_positive
from flowsim._status import Failure, Status
from flowsim._task import distance_up_to_symmetry, max_abs, symmetry_text
from flowsim.integrate import solve_flow
from flowsim.maps import iterate_map
from flowsim.sgd import SGDRun, run_sgd

__all__ = [
    "ATTRACTOR_TOL",
    "REFERENCES",
    "Comparison",
    "SweepResult",
    "compare",
    "sweep_batch",
    "sweep_dataset",
    "sweep_lr",
]

#: What SGD is compared with: the gradient flow, or the population PGD map at the run's step size.
REFERENCES = ("flow", "map")

#: Default tolerance (max norm, up to the task's symmetries) for "ended at the same attractor": for
#: single-location regression far below the distance between distinct fixed points (the corners
#: of M are 1 or 2 apart, the attractor off M, +-(0, 0, theta, 1, 0), is 1 from them), above what
#: is left of SGD noise once the flow has settled it.
ATTRACTOR_TOL = 0.1
#: Default flow time for which both end points are continued before they are compared again.
SETTLE = 200.0


class Comparison(eqx.Module):
    """An SGD run and its deterministic reference on the same clock t = lr * step.

    **Fields:**

    - `reference`: "flow" (the gradient flow) or "map" (the task's exact discrete map, same lr).
    - `state_names`: the names of the state's coordinates.
    - `lr`: the run's step size.
    - `steps`, `times`: the run's logged steps and their times t = lr * step, shape (logs,).
    - `sgd`, `sgd_risk`: the run's states (seeds, logs, n) and population risk (seeds, logs).
    - `ys`, `risk`: the reference's states and risk at the same times, same shapes.
    - `deviation`: max over the logged times of |sgd - reference| for each coordinate, (seeds, n).
    - `risk_deviation`: the same for the risk, (seeds,).
    - `end_distance`: max-norm distance between the end points, up to the task's symmetries, (seeds,).
    - `same_attractor`: whether both ended at the same attractor (see `compare`), (seeds,).
    - `symmetry`: the task's symmetries in words (`symmetry_text`): end points that one of them maps
      onto each other count as the same, while `deviation` compares the states as they are.
    - `attractor_tol`: the tolerance used.
    - `status`: a `Status` per seed: SUCCESS, or the failure of either side (SGD divergence,
      solver failure), whose deviations are inf and same_attractor False.
    - `reasons`: {seed: why} for the failed seeds.
    """

    reference: str
    state_names: tuple[str, ...]
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
    symmetry: str
    status: np.ndarray
    reasons: dict[int, str]

    def failures(self) -> list[Failure]:
        """Every seed where either side failed, with why."""
        return _status.failures(self.status, np.full(len(self.status), self.times[-1]), self.reasons)

    @property
    def state_deviation(self) -> np.ndarray:
        """Per seed, the largest deviation of any coordinate, (seeds,)."""
        return self.deviation.max(axis=-1)

    @property
    def max_deviation(self) -> np.ndarray:
        """Over all seeds, the largest deviation of each coordinate, (n,)."""
        return self.deviation.max(axis=0)

    @property
    def max_risk_deviation(self) -> float:
        """Over all seeds, the largest deviation of the risk."""
        return float(self.risk_deviation.max())

    def table(self) -> str:
        """Per seed and overall: max |SGD - reference| of each overlap and of the risk, and the end points."""
        names = [f"|d {name}|" for name in self.state_names] + ["|d risk|"]
        header = f"{'seed':>6} " + " ".join(f"{name:>10}" for name in names) + f" {'end dist':>9} {'same attr.':>10}"
        lines = [
            f"SGD vs {REFERENCE_NAMES[self.reference]}: max over t in [0, {self.times[-1]:g}] "
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
        if self.symmetry != "none":
            lines.append(
                f"end dist and same attr. are taken up to the symmetry {self.symmetry} (both give one predictor); "
                "|d .| compare the states as they are, so a seed ending at the image of its reference's "
                "end point shows a large |d .| and the same attractor"
            )
        lines += [f"seed {seed}: {why}" for seed, why in sorted(self.reasons.items())]
        return "\n".join(lines)


REFERENCE_NAMES = {"flow": "gradient flow", "map": "population PGD map"}


def _reference(task, y0, steps, times, lr: float, reference: str, options):
    """The reference states (seeds, logs, n), risk (seeds, logs) and {seed: failure} on the logged times."""
    if reference == "map":
        log_every = int(steps[1] - steps[0])
        mapped = iterate_map(task, y0, lr, int(steps[-1]), log_every=log_every)
        failed = {failure.index: failure.reason for failure in mapped.failures()}
        return np.asarray(mapped.ys), np.asarray(mapped.risk), failed
    solved = solve_flow(task, y0, times, **options)
    failed = {failure.index: f"the flow failed: {failure}" for failure in solved.failures()}
    return np.asarray(solved.ys), np.asarray(solved.observed), failed


def _settle(task, trajectories, t0: float, settle: float, count: int, options) -> np.ndarray:
    """Where the flow takes the trajectories' last points in a time `settle` (from time t0); NaN if it failed."""
    # As many saved times and rows as the comparison's own solve: the same compiled program.
    ts = np.linspace(t0, t0 + settle, count)
    solved = solve_flow(task, trajectories[:, -1], ts, **options)
    return np.where(np.asarray(solved.ok)[:, None], np.asarray(solved.y_final), np.nan)


def compare(
    run: SGDRun,
    *,
    reference: str = "flow",
    attractor_tol: float = ATTRACTOR_TOL,
    settle: float = SETTLE,
    **options,
) -> Comparison:
    """Compare an SGD run with the gradient flow (or the task's exact map) from the same start.

    The reference starts from the run's logged states at step 0 and is evaluated at the run's
    logged times t = lr * step, on the task the run trained on (`run.task`, schedule included).

    "Same attractor" compares end points up to the task's symmetries, in max norm: they count as
    the same when they are within `attractor_tol`, or when the flow, continued from both for a
    time `settle` (under the schedule), brings them within `attractor_tol`. The continuation
    matters for noisy runs: an SGD end point jittered off a slowly approached sink is carried to
    that sink, one past a separatrix to another attractor.

    **Arguments:**

    - `run`: an `SGDRun` (from `run_sgd` or a task's own trainer).
    - `reference`: "flow" (the gradient flow, the lr -> 0 limit) or "map" (the task's exact
      discrete map at the run's lr: for single-location regression, population PGD).
    - `attractor_tol`: the end-point tolerance of `same_attractor`.
    - `settle`: how long the flow continues end points farther apart than `attractor_tol`
      (0: compare the end points only).
    - `options`: passed to `solve_flow` (rtol, atol, max_steps, ...).

    **Returns:** a `Comparison`.
    """
    check_choice("reference", reference, REFERENCES)
    attractor_tol = check_positive("attractor_tol", attractor_tol)
    settle = NON_NEGATIVE.check("settle", settle)
    task = run.task
    steps, times = np.asarray(run.steps), np.asarray(run.times, dtype=float)
    sgd, sgd_risk = np.asarray(run.ys), np.asarray(run.risk)
    ys, risk, failed = _reference(task, sgd[:, 0], steps, times, run.lr, reference, options)
    status = np.full(len(sgd), int(Status.SUCCESS))
    for failure in run.failures():
        failed[failure.index] = f"SGD diverged at step {failure.step}"
        status[failure.index] = Status.DIVERGED
    deviation = max_abs(sgd, ys, axis=1)
    risk_deviation = max_abs(sgd_risk, risk, axis=1)
    end_distance = distance_up_to_symmetry(task, sgd[:, -1], ys[:, -1])
    for seed in failed:
        deviation[seed], risk_deviation[seed], end_distance[seed] = np.inf, np.inf, np.inf
        if status[seed] == Status.SUCCESS:
            status[seed] = Status.DIVERGED if reference == "map" else Status.SOLVER_FAILURE
    same = end_distance <= attractor_tol
    apart = ~same & np.isfinite(end_distance)
    if settle > 0 and apart.any():
        settled = [_settle(task, ends, times[-1], settle, len(times), options) for ends in (sgd, ys)]
        same |= apart & (distance_up_to_symmetry(task, *settled) <= attractor_tol)
    return Comparison(
        reference=reference,
        state_names=tuple(task.state_names),
        lr=run.lr,
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
        symmetry=symmetry_text(task),
        status=status,
        reasons=dict(sorted(failed.items())),
    )


class SweepResult(eqx.Module):
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
        reference = REFERENCE_NAMES[self.comparisons[0].reference]
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
    per_seed = np.array([comparison.state_deviation for comparison in comparisons])
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
        raise InvalidInput(f"{name} must hold at least two finite values > 0, got {values!r}")
    if len(np.unique(array)) != len(array):
        raise InvalidInput(f"{name} must hold distinct values, got {values!r}")
    if integer and not np.all(array == np.round(array)):
        raise InvalidInput(f"{name} must hold integers, got {values!r}")
    return array


def _steps_for(lr: float, t_end: float, logs: int) -> tuple[int, int]:
    """(steps, log_every) with `logs` logged intervals and lr * steps as close to t_end as that allows."""
    lr, t_end = check_positive("lr", lr), check_positive("t_end", t_end)
    logs = check_count("logs", logs, 1)
    log_every = max(1, round(t_end / (lr * logs)))
    return logs * log_every, log_every


def sweep_lr(
    task,
    key,
    lrs,
    *,
    t_end: float,
    logs: int = 32,
    reference: str = "flow",
    train=run_sgd,
    train_options: dict | None = None,
    **options,
) -> SweepResult:
    """Online SGD at several step sizes against the flow, at a fixed horizon t_end.

    Every lr runs about t_end / lr steps (rounded to a multiple of `logs`; the horizon actually
    reached is each comparison's times[-1]). All runs use the same key: the same initial states
    (and data), so that the sweep shows the effect of lr, not of the seeds. The task's schedule, a
    function of t, serves every lr and the flow alike. Each distinct number of steps compiles its
    own program.

    **Arguments:**

    - `task`, `key`: the task and a JAX PRNG key.
    - `lrs`: at least two step sizes.
    - `t_end`: the horizon on the flow's clock.
    - `logs`: logged intervals per run.
    - `reference`, `options`: passed to `compare` (attractor_tol, settle, solver options).
    - `train`: the trainer, `train(task, key, lr=, steps=, log_every=, **train_options) -> SGDRun`
      (default `run_sgd`, the task's chain on its state).
    - `train_options`: more arguments of `train` (batch, seeds, init, ...).

    **Returns:** a `SweepResult`; theory expects a slope between 1/2 (fluctuations,
    sqrt(lr / batch)) and 1 (bias, lr).
    """
    values = _check_values("lrs", lrs, integer=False)
    comparisons = []
    for lr in values:
        steps, log_every = _steps_for(float(lr), t_end, logs)
        run = train(task, key, lr=float(lr), steps=steps, log_every=log_every, **(train_options or {}))
        comparisons.append(compare(run, reference=reference, **options))
    return _sweep("lr", values, comparisons, (0.5, 1.0))


def sweep_batch(
    task,
    key,
    batches,
    *,
    lr: float,
    t_end: float,
    logs: int = 32,
    reference: str = "flow",
    train=run_sgd,
    train_options: dict | None = None,
    **options,
) -> SweepResult:
    """Online SGD at several batch sizes (fixed lr) against the flow, at a fixed horizon t_end.

    Same conventions and arguments as `sweep_lr`; each batch size compiles its own program.

    **Returns:** a `SweepResult`; theory expects a slope of -1/2 (fluctuations, sqrt(lr / batch))
    to -1 (for SGD on spheres, the renormalisation drift, lr * d / batch).
    """
    values = _check_values("batches", batches, integer=True)
    steps, log_every = _steps_for(lr, t_end, logs)
    comparisons = []
    for batch in values.astype(int):
        run = train(task, key, lr=lr, steps=steps, log_every=log_every, batch=int(batch), **(train_options or {}))
        comparisons.append(compare(run, reference=reference, **options))
    return _sweep("batch", values, comparisons, (-1.0, -0.5))


def sweep_dataset(
    task,
    key,
    ns,
    *,
    lr: float,
    steps: int,
    log_every: int = 1,
    train,
    train_options: dict | None = None,
    **options,
) -> SweepResult:
    """Full-batch GD on fixed datasets of n samples against population GD (the exact map, same lr).

    Both take the same steps from the same start; only the gradient differs (empirical on n
    samples vs exact), so the deviation isolates the finite dataset. Each n compiles its own program.

    **Arguments:**

    - `task`, `key`: the task and a JAX PRNG key (the same for every n).
    - `ns`: at least two dataset sizes.
    - `lr`, `steps`, `log_every`: the run's length.
    - `train`: a trainer on a fixed dataset, `train(task, key, lr=, steps=, log_every=, n=, batch=,
      **train_options) -> SGDRun` (e.g. single-location regression's `run_sgd` with mode "dataset").
    - `train_options`: more arguments of `train` (seeds, init, ...).
    - `options`: passed to `compare` (attractor_tol, settle, solver options).

    **Returns:** a `SweepResult`; theory expects a slope of -1/2 (the empirical gradient is
    off by O(sqrt(d / n))).
    """
    values = _check_values("ns", ns, integer=True)
    comparisons = []
    for n in values.astype(int):
        run = train(task, key, lr=lr, steps=steps, log_every=log_every, n=int(n), batch=int(n), **(train_options or {}))
        comparisons.append(compare(run, reference="map", **options))
    return _sweep("n", values, comparisons, (-0.5, -0.5))
