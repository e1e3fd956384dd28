"""The tables the commands write as tidy CSV (docs/results.md) and print."""

import numpy as np

from flowsim import results, slr
from flowsim.cli._options import _NAMES


def _format_table(header, rows) -> str:
    """Columns aligned on the left, two spaces apart."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )


def _overlap_columns(m, names=_NAMES) -> dict:
    m = np.asarray(m)
    return {name: m[..., i] for i, name in enumerate(names)}


def _eigenvalue_columns(eigenvalues, size: int) -> dict:
    """Real and imaginary parts of `size` eigenvalues per point, one column each."""
    eigenvalues = np.asarray(eigenvalues, dtype=complex).reshape(len(eigenvalues), size)
    columns = {}
    for j in range(size):
        columns[f"eigenvalue_{j + 1}_real"] = eigenvalues[:, j].real
        columns[f"eigenvalue_{j + 1}_imag"] = eigenvalues[:, j].imag
    return columns


def _lam_along(schedule, lam: float, times) -> np.ndarray:
    """lam at the given flow times: the schedule's, or the fixed lam."""
    times = np.asarray(times, dtype=float)
    return np.full(times.shape, float(lam)) if schedule is None else np.asarray(schedule(times))


# ---------------------------------------------------------------------------------------------
# Tables (docs/results.md): one function per kind of result, shared by the commands


def _trajectory_table(solved, lam) -> dict:
    """Solved trajectories (5-D, or (kappa, nu) on M) at their saved times."""
    ys = np.asarray(solved.ys)
    return results.long_table(
        [{"trajectory": np.arange(len(ys))}, {"t": np.asarray(solved.ts), "lam": lam}],
        {**_overlap_columns(ys, _NAMES[: ys.shape[-1]]), "risk": np.asarray(solved.observed)},
    )


def _endpoint_table(solved) -> dict:
    from flowsim.integrate import Status

    status = np.asarray(solved.status)
    y_final = np.asarray(solved.y_final)
    return {
        "trajectory": np.arange(len(status)),
        "status": [Status(int(code)).name.lower() for code in status],
        "t_final": np.asarray(solved.t_final),
        "solver_steps": np.asarray(solved.num_steps),
        **_overlap_columns(y_final, _NAMES[: y_final.shape[-1]]),
        "reason": [solved.reasons.get(i, "") for i in range(len(status))],
    }


def _fixed_point_table(points) -> dict:
    located = np.array([point.point for point in points]).reshape(len(points), 2)  # on M: (kappa, nu)
    return {
        "point": np.arange(len(points)),
        **_overlap_columns(located, _NAMES[: located.shape[1]]),
        "kind": [point.kind for point in points],
        "risk": np.array([point.value for point in points], dtype=float),
        "residual": np.array([point.residual for point in points], dtype=float),
        **_eigenvalue_columns([point.eigenvalues for point in points], located.shape[1]),
    }


def _attractor_table(found) -> dict:
    return {
        "attractor": np.arange(len(found)),
        **_overlap_columns(np.array([a.point for a in found]).reshape(len(found), 5)),
        "kind": [a.kind for a in found],
        "risk": np.array([a.risk for a in found], dtype=float),
        "count": np.array([a.count for a in found], dtype=int),
        "share": np.array([a.share for a in found], dtype=float),
        "is_oracle": np.array([a.is_oracle for a in found], dtype=bool),
        **_eigenvalue_columns([a.eigenvalues for a in found], 5),
    }


def _sgd_table(run: slr.SGDRun) -> dict:
    values = {**_overlap_columns(run.overlaps), "risk": np.asarray(run.risk)}
    if run.train_risk is not None:
        values |= {"train_risk": np.asarray(run.train_risk), "test_risk": np.asarray(run.test_risk)}
    seeds = np.arange(len(run.overlaps))
    return results.long_table(
        [{"seed": seeds}, {"step": run.steps, "t": run.times, "lam": np.asarray(run.lam)}], values
    )


def _comparison_tables(comparison: slr.Comparison, lam) -> tuple[dict, dict]:
    """(SGD and its reference along the logged steps, per-seed deviations)."""
    seeds = np.arange(len(comparison.sgd))
    trajectories = results.long_table(
        [
            {"source": ["sgd", comparison.reference]},
            {"seed": seeds},
            {"step": comparison.steps, "t": comparison.times, "lam": lam},
        ],
        {
            **_overlap_columns(np.stack([comparison.sgd, comparison.ys])),
            "risk": np.stack([comparison.sgd_risk, comparison.risk]),
        },
    )
    deviations = {
        "seed": seeds,
        **{f"max_dev_{name}": comparison.deviation[:, i] for i, name in enumerate(_NAMES)},
        "max_dev_risk": comparison.risk_deviation,
        "end_distance": comparison.end_distance,
        "same_attractor": comparison.same_attractor,
        "failure": [comparison.failed.get(int(seed), "") for seed in seeds],
    }
    return trajectories, deviations


def _verify_tables(report: slr.VerifyReport) -> tuple[dict, dict]:
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
        "oracle_share": np.array([row.oracle_share for row in rows], dtype=float),
    }
    others = [(row, a) for row in rows for a in row.others]
    attractors = {
        "setting": [row.setting for row, _ in others],
        "init": [row.init for row, _ in others],
        **_overlap_columns(np.array([a.point for _, a in others]).reshape(len(others), 5)),
        "kind": [a.kind for _, a in others],
        "risk": np.array([a.risk for _, a in others], dtype=float),
        "count": [a.count for _, a in others],
        "share": np.array([a.share for _, a in others], dtype=float),
    }
    return table, attractors


def _experiment_tables(runs) -> tuple[dict, dict, dict]:
    """(one row per experiment, the other attractors reached, every logged iterate) of `reproduce`."""
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
        "lam_final": [r.summary.lam_final for r in runs],
        "final_excess_mean": [r.summary.final_excess for r in runs],
        "final_excess_median": [r.summary.final_excess_median for r in runs],
        "oracle_excess": [r.summary.oracle_excess for r in runs],
    }
    others = [(r, a) for r in runs for a in r.summary.others]
    attractors = {
        "experiment": [r.experiment.name for r, _ in others],
        **_overlap_columns(np.array([a.point for _, a in others]).reshape(len(others), 5)),
        "kind": [a.kind for _, a in others],
        "excess_risk": np.array([a.risk - r.experiment.eps**2 for r, a in others], dtype=float),
        "count": [a.count for _, a in others],
        "share": np.array([a.share for _, a in others], dtype=float),
    }
    parts = []
    for r in runs:
        sources = [("run", r.overlaps, r.excess_risk)]
        if r.ode_overlaps is not None:
            sources.append(("flow", r.ode_overlaps, r.ode_excess_risk))
        for source, m, excess in sources:
            axes = [
                {"experiment": [r.experiment.name], "source": [source]},
                {"seed": np.arange(r.seeds)},
                {"step": r.steps, "t": r.times, "lam": r.lam},
            ]
            parts.append(results.long_table(axes, {**_overlap_columns(m[None]), "excess_risk": excess[None]}))
    trajectories = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    return summary, attractors, trajectories
