"""The tables the commands write as tidy CSV (docs/results.md) and print: one function per kind of result,
columns named by the task's state names."""

import numpy as np

from flowsim import results
from flowsim._status import Status


def format_table(header, rows) -> str:
    """Columns aligned on the left, two spaces apart."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


def state_columns(m, names) -> dict:
    m = np.asarray(m)
    return {name: m[..., i] for i, name in enumerate(names)}


def eigenvalue_columns(eigenvalues, size: int) -> dict:
    """Real and imaginary parts of `size` eigenvalues per point, one column each."""
    eigenvalues = np.asarray(eigenvalues, dtype=complex).reshape(len(eigenvalues), size)
    columns = {}
    for j in range(size):
        columns[f"eigenvalue_{j + 1}_real"] = eigenvalues[:, j].real
        columns[f"eigenvalue_{j + 1}_imag"] = eigenvalues[:, j].imag
    return columns


# ---------------------------------------------------------------------------------------------
# Tables (docs/results.md): one function per kind of result, shared by the commands


def scheduled_column(task, times) -> dict:
    """{name of the scheduled parameter: its value at the times}, or {} for a task without one."""
    if task.scheduled is None:
        return {}
    return {task.scheduled: np.asarray(task.schedule()(np.asarray(times, dtype=float)))}


def trajectory_table(solved, task) -> dict:
    """Solved trajectories at their saved times."""
    ys = np.asarray(solved.ys)
    return results.long_table(
        [{"trajectory": np.arange(len(ys))}, {"t": np.asarray(solved.ts), **scheduled_column(task, solved.ts)}],
        {**state_columns(ys, task.state_names), "risk": np.asarray(solved.observed)},
    )


def endpoint_table(solved, task) -> dict:
    status = np.asarray(solved.status)
    y_final = np.asarray(solved.y_final)
    return {
        "trajectory": np.arange(len(status)),
        "status": [Status(int(code)).name.lower() for code in status],
        "t_final": np.asarray(solved.t_final),
        "solver_steps": np.asarray(solved.num_steps),
        **state_columns(y_final, task.state_names),
        "reason": [solved.reasons.get(i, "") for i in range(len(status))],
    }


def fixed_point_table(points, task) -> dict:
    located = np.array([point.point for point in points]).reshape(len(points), task.dimension)
    return {
        "point": np.arange(len(points)),
        **state_columns(located, task.state_names),
        "kind": [point.kind for point in points],
        "risk": np.array([point.value for point in points], dtype=float),
        "residual": np.array([point.residual for point in points], dtype=float),
        **eigenvalue_columns([point.eigenvalues for point in points], located.shape[1]),
    }


def attractor_table(found, task) -> dict:
    return {
        "attractor": np.arange(len(found)),
        **state_columns(np.array([a.point for a in found]).reshape(len(found), task.dimension), task.state_names),
        "kind": [a.kind for a in found],
        "risk": np.array([a.risk for a in found], dtype=float),
        "count": np.array([a.count for a in found], dtype=int),
        "share": np.array([a.share for a in found], dtype=float),
        "is_target": np.array([a.is_target for a in found], dtype=bool),
        **eigenvalue_columns([a.eigenvalues for a in found], task.dimension),
    }


def sgd_table(run) -> dict:
    task = run.task
    values = {**state_columns(run.ys, task.state_names), "risk": np.asarray(run.risk)}
    if run.train_risk is not None:
        values |= {"train_risk": np.asarray(run.train_risk), "test_risk": np.asarray(run.test_risk)}
    seeds = np.arange(len(run.ys))
    return results.long_table(
        [{"seed": seeds}, {"step": run.steps, "t": run.times, **scheduled_column(task, run.times)}], values
    )


def comparison_tables(comparison, task) -> tuple[dict, dict]:
    """(SGD and its reference along the logged steps, per-seed deviations)."""
    seeds = np.arange(len(comparison.sgd))
    trajectories = results.long_table(
        [
            {"source": ["sgd", comparison.reference]},
            {"seed": seeds},
            {"step": comparison.steps, "t": comparison.times, **scheduled_column(task, comparison.times)},
        ],
        {
            **state_columns(np.stack([comparison.sgd, comparison.ys]), task.state_names),
            "risk": np.stack([comparison.sgd_risk, comparison.risk]),
        },
    )
    deviations = {
        "seed": seeds,
        **{f"max_dev_{name}": comparison.deviation[:, i] for i, name in enumerate(task.state_names)},
        "max_dev_risk": comparison.risk_deviation,
        "end_distance": comparison.end_distance,
        "same_attractor": comparison.same_attractor,
        "failure": [comparison.reasons.get(int(seed), "") for seed in seeds],
    }
    return trajectories, deviations


def verify_tables(report, task) -> tuple[dict, dict]:
    """(one row per setting and initialisation, the other attractors they reached)."""
    rows = report.rows
    table = {
        "setting": [row.setting for row in rows],
        "init": [row.init for row in rows],
        "n": [row.n for row in rows],
        "converged": [row.converged for row in rows],
        "approaching": [row.slow for row in rows],
        "other": [sum(a.count for a in row.others) for row in rows],
        "unassigned": [row.unassigned for row in rows],
        "failed": [row.failed for row in rows],
        "median_time": np.array([row.median_time for row in rows], dtype=float),
        "target_share": np.array([row.target_share for row in rows], dtype=float),
    }
    others = [(row, a) for row in rows for a in row.others]
    attractors = {
        "setting": [row.setting for row, _ in others],
        "init": [row.init for row, _ in others],
        **state_columns(np.array([a.point for _, a in others]).reshape(len(others), task.dimension), task.state_names),
        "kind": [a.kind for _, a in others],
        "risk": np.array([a.risk for _, a in others], dtype=float),
        "count": [a.count for _, a in others],
        "share": np.array([a.share for _, a in others], dtype=float),
    }
    return table, attractors


def experiment_tables(runs, task) -> tuple[dict, dict]:
    """(one row per experiment, the other attractors reached) of `reproduce`."""
    summary = {
        "experiment": [r.experiment.name for r in runs],
        "algorithm": [r.experiment.algorithm for r in runs],
        "engine": [r.engine for r in runs],
        "steps": [int(r.steps[-1]) for r in runs],
        "seeds": [r.summary.seeds for r in runs],
        "tol": [r.summary.tol for r in runs],
        "reached": [r.summary.reached for r in runs],
        "approaching": [r.summary.approaching for r in runs],
        "other": [sum(a.count for a in r.summary.others) for r in runs],
        "unassigned": [r.summary.unassigned for r in runs],
        "diverged": [r.summary.diverged for r in runs],
        **({f"{task.scheduled}_final": [r.scheduled_values[-1] for r in runs]} if task.scheduled else {}),
        "final_excess_mean": [r.summary.final_excess for r in runs],
        "final_excess_median": [r.summary.final_excess_median for r in runs],
        "target_excess": [r.summary.target_excess for r in runs],
    }
    others = [(r, a) for r in runs for a in r.summary.others]
    attractors = {
        "experiment": [r.experiment.name for r, _ in others],
        **state_columns(np.array([a.point for _, a in others]).reshape(len(others), task.dimension), task.state_names),
        "kind": [a.kind for _, a in others],
        "excess_risk": np.array([a.risk - r.experiment.task.risk_floor() for r, a in others], dtype=float),
        "count": [a.count for _, a in others],
        "share": np.array([a.share for _, a in others], dtype=float),
    }
    return summary, attractors


def experiment_trajectories(run, task) -> dict:
    """Every logged iterate of one experiment of `reproduce` (and, for SGD, of its gradient flow): its rows of
    trajectories.csv."""
    parts = []
    sources = [("run", run.ys, run.excess_risk)]
    if run.ode_ys is not None:
        sources.append(("flow", run.ode_ys, run.ode_excess_risk))
    for source, m, excess in sources:
        axes = [
            {"experiment": [run.experiment.name], "source": [source]},
            {"seed": np.arange(run.seeds)},
            {"step": run.steps, "t": run.times, **({task.scheduled: run.scheduled_values} if task.scheduled else {})},
        ]
        values = {**state_columns(m[None], task.state_names), "excess_risk": excess[None]}
        parts.append(results.long_table(axes, values))
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
