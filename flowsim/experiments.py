"""The experiment runner: many seeds of a discrete algorithm on a task, summarised by where they ended.

An experiment runs population gradient descent (the task's exact map, or a trainer the caller
passes) or finite-sample SGD from many seeds, logs the states, and classifies each seed's end
point (see `Summary`): reached a target (within `tol`, up to the task's symmetries), approaching
one (`AbstractTask.approaching`), at another attractor of the flow at the final time, still moving,
or diverged. An SGD run is shown against the gradient flow from each seed's initial state, on the
clock t = alpha * step.
"""

import time
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from flowsim._checks import as_key, check_choice, check_count, check_positive, check_shape
from flowsim._status import Failure
from flowsim._task import task_risk
from flowsim.fixedpoints import Attractor
from flowsim.integrate import evaluate, solve_flow, traced
from flowsim.maps import iterate_map, risk_along
from flowsim.outcomes import classify_end_points
from flowsim.sgd import run_sgd

__all__ = ["ALGORITHMS", "ExperimentResult", "Summary", "lengths", "run_experiment", "summary_table"]

#: "population": gradient descent on the population risk; "sgd": online SGD.
ALGORITHMS = ("population", "sgd")


class Summary(eqx.Module):
    """Where the seeds of one run ended (see the module's docstring for the classes).

    **Fields:** `seeds`; `tol`; `reached` and `approaching` (a target); `others` (other attractors
    of the flow at the final time, shares relative to all seeds); `unassigned` (ended away from
    every fixed point); `diverged`; `final_time`; `final_excess` (mean over the seeds that did not
    diverge of the excess risk at the last step) and `final_excess_median`; `target_excess` (the
    excess risk of the target at the final time).
    """

    seeds: int
    tol: float
    reached: int
    approaching: int
    others: list[Attractor]
    unassigned: int
    diverged: int
    final_time: float
    final_excess: float
    final_excess_median: float
    target_excess: float

    @property
    def target_share(self) -> float:
        """Share of seeds that reached or are approaching a target."""
        return (self.reached + self.approaching) / self.seeds


class ExperimentResult(eqx.Module):
    """One experiment's run.

    **Fields:**

    - `experiment`: what ran (it names its `task`, `alpha`, `algorithm`, ...); `engine`: how;
      `scale` (fraction of the steps run).
    - `steps`: the logged steps, (logs,); `times`: the same on the clock alpha * step.
    - `ys`: (seeds, logs, n), NaN after a divergence.
    - `excess_risk`: risk minus the task's floor (`AbstractTask.risk_floor`) at each logged state, (seeds, logs).
    - `target_excess`: the same for the target, (logs,).
    - `ode_ys`, `ode_excess_risk`: for SGD, the gradient flow from each seed's initial state at
      the logged times (same shapes); None for population runs.
    - `summary`: a `Summary`; `seconds`: wall time of the run and its summary.
    - `status`: a `Status` per seed (SUCCESS or DIVERGED); `failed`: the run's `Failure`s (also
      `failures()`), each with its first non-finite step.
    """

    experiment: object
    engine: str
    scale: float
    steps: np.ndarray
    times: np.ndarray
    ys: np.ndarray
    excess_risk: np.ndarray
    target_excess: np.ndarray
    ode_ys: np.ndarray | None
    ode_excess_risk: np.ndarray | None
    summary: Summary
    status: np.ndarray
    failed: tuple[Failure, ...]
    seconds: float = float("nan")

    @property
    def seeds(self) -> int:
        return self.ys.shape[0]

    def failures(self) -> list[Failure]:
        """Every diverged seed, with its first non-finite step (as `SGDRun.failures`)."""
        return list(self.failed)

    @property
    def scheduled_values(self) -> np.ndarray:
        """The task's scheduled parameter at the logged steps."""
        return np.asarray(self.experiment.task.schedule().at_step(self.steps))


def lengths(steps: int, scale: float, log_points: int) -> tuple[int, int]:
    """(steps run, log_every): about steps * scale steps, logged about log_points times."""
    total = max(1, round(steps * scale))
    log_every = max(1, total // log_points)
    return max(log_every, total - total % log_every), log_every


def _summarize(task, algorithm: str, finals, final_excess, final_time: float, tol: float) -> Summary:
    # An SGD iterate fluctuates around the fixed point it reached: it is assigned to a fixed
    # point within tol; a population run is assigned within attractors()' default 1e-4.
    merge_tol = tol if algorithm == "sgd" else 1e-4
    outcomes = classify_end_points(task, finals, t=final_time, tol=tol, merge_tol=merge_tol)
    finite = np.isfinite(finals).all(axis=-1)
    excess = final_excess[finite]
    target = np.asarray(task.targets, dtype=float)[0]
    return Summary(
        seeds=len(finals),
        tol=tol,
        reached=int(outcomes.reached.sum()),
        approaching=int(outcomes.approaching.sum()),
        others=outcomes.others,
        unassigned=outcomes.unassigned,
        diverged=outcomes.failed,
        final_time=final_time,
        final_excess=float(np.mean(excess)) if excess.size else float("nan"),
        final_excess_median=float(np.median(excess)) if excess.size else float("nan"),
        target_excess=float(evaluate(task_risk, final_time, target, task)) - task.risk_floor(),
    )


def run_experiment(
    experiment,
    key,
    *,
    seeds: int = 30,
    scale: float = 1.0,
    log_points: int = 200,
    y0=None,
    tol: float,
    train: Callable | None = None,
    engine: str = "overlaps",
) -> ExperimentResult:
    """Run one experiment from many seeds and summarise where they ended.

    **Arguments:**

    - `experiment`: has `task` (its schedule included), `init` (a name of the task's
      initialisations), `alpha` (the step size), `steps`, `algorithm` (one of `ALGORITHMS`) and
      `batch` (samples per SGD step, or None).
    - `key`: a JAX PRNG key or an integer seed (initialisations; for SGD also the data).
    - `seeds`: the number of independent runs (>= 1).
    - `scale`: the fraction of the experiment's steps to run (> 0; 1 is the full length).
    - `log_points`: about how many logged steps (>= 1; every step for short runs).
    - `y0`: initial states, shape (seeds, n), instead of drawing the experiment's initialisation.
    - `tol`: the max-norm distance to a target counted as reached.
    - `train`: the trainer, `train(task, key, init=, lr=, steps=, batch=, log_every=, seeds=) -> SGDRun`;
      default: the task's exact map for population runs and `run_sgd` (its SGD chain) for SGD.
    - `engine`: the name of how the runs are computed, recorded in the result.

    **Returns:** an `ExperimentResult`.
    """
    check_choice("algorithm", experiment.algorithm, ALGORITHMS)
    seeds = check_count("seeds", seeds, 1)
    scale = check_positive("scale", scale)
    log_points = check_count("log_points", log_points, 1)
    tol = check_positive("tol", tol)
    task = experiment.task
    key = as_key(key)
    if y0 is not None:
        y0 = check_shape("y0", y0, (seeds, task.dimension), f"(seeds, {task.dimension}) = ")
    start = time.perf_counter()
    steps, log_every = lengths(experiment.steps, scale, log_points)
    ode_ys = ode_excess = None
    floor = task.risk_floor()
    if experiment.algorithm == "population" and train is None:
        initial = task.initial_states(key, seeds, experiment.init) if y0 is None else y0
        run = iterate_map(task, initial, experiment.alpha, steps, log_every=log_every)
    else:
        trainer = run_sgd if train is None else train
        run = trainer(
            task,
            key,
            init=experiment.init if y0 is None else y0,
            lr=experiment.alpha,
            steps=steps,
            batch=experiment.batch or 1,
            log_every=log_every,
            seeds=seeds,
        )
        if experiment.algorithm == "sgd":
            ode = solve_flow(task, np.asarray(run.ys)[:, 0], run.times, max_steps=1_000_000)
            ode_ys, ode_excess = np.asarray(ode.ys), np.asarray(ode.observed) - floor
    ys, risk, times = np.asarray(run.ys), np.asarray(run.risk), np.asarray(run.times)
    ys = np.where(np.isfinite(ys).all(axis=-1, keepdims=True), ys, np.nan)
    # The target's risk at every logged time at once (one compiled call for every experiment).
    target = jnp.asarray(np.asarray(task.targets, dtype=float)[:1][None])
    target_risk = np.asarray(
        evaluate(
            risk_along, jnp.asarray(times), jnp.broadcast_to(target, (1, len(times), task.dimension)), traced(task)
        )
    )[0]
    excess = risk - floor
    summary = _summarize(task, experiment.algorithm, ys[:, -1], excess[:, -1], float(times[-1]), tol)
    return ExperimentResult(
        experiment=experiment,
        engine=engine,
        scale=scale,
        steps=np.asarray(run.steps),
        times=times,
        ys=ys,
        excess_risk=excess,
        target_excess=target_risk - floor,
        ode_ys=ode_ys,
        ode_excess_risk=ode_excess,
        summary=summary,
        status=np.asarray(run.status),
        failed=tuple(run.failures()),
        seconds=time.perf_counter() - start,
    )


def _percent(count: int, total: int) -> str:
    return f"{count / total:.0%}"


def summary_table(results) -> str:
    """The summaries as a table: shares of seeds by where they ended, final excess risks.

    Columns: steps run, seeds, share that reached a target (within the run's tol, max norm) and
    that is still approaching it, share at other attractors, share ended elsewhere (still moving)
    or diverged, the final value of the scheduled parameter, the mean (over seeds) excess risk at
    the last step and the target's excess risk then. Each other attractor follows on its own line
    (state up to the symmetries, kind, excess risk, share).
    """
    task = results[0].experiment.task
    name = task.scheduled or "t"
    header = (
        f"{'experiment':<21} {'steps':>7} {'seeds':>5} {'reached':>7} {'approach':>8} {'other':>5} "
        f"{'moving':>7} {'diverged':>8} {'final ' + name:>9} {'excess (mean)':>13} {'target excess':>13}"
    )
    lines = [header]
    tolerances = sorted({r.summary.tol for r in results})
    for result in results:
        s = result.summary
        others = sum(a.count for a in s.others)
        final = result.scheduled_values[-1] if task.scheduled else s.final_time
        lines.append(
            f"{result.experiment.name:<21} {int(result.steps[-1]):>7} {s.seeds:>5} "
            f"{_percent(s.reached, s.seeds):>7} {_percent(s.approaching, s.seeds):>8} "
            f"{_percent(others, s.seeds):>5} {_percent(s.unassigned, s.seeds):>7} {_percent(s.diverged, s.seeds):>8} "
            f"{final:>9.4g} {s.final_excess:>13.4e} {s.target_excess:>13.4e}"
        )
        for a in s.others:
            point = ", ".join(f"{x:+.3f}" for x in np.round(a.point, 3) + 0.0)
            lines.append(
                f"    other attractor ({point}) {a.kind}: share {a.share:.0%}, "
                f"excess risk {a.risk - result.experiment.task.risk_floor():.4e}"
            )
    within = ", ".join(
        f"{tol:g} ({' and '.join(sorted({r.experiment.algorithm for r in results if r.summary.tol == tol}))})"
        for tol in tolerances
    )
    lines.append(f"reached: max-norm distance to {task.target_label} <= {within}; approach: {task.approach_text};")
    lines.append(
        "moving: away from every fixed point of the flow at the final time (still moving, if slowly); "
        "excess = risk above the task's floor, mean over seeds."
    )
    return "\n".join(lines)
