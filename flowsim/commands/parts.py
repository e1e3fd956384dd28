"""The parts the commands of every task share: the run's record, failures, figures, portrait, comparison."""

import concurrent.futures
import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from flowsim import results
from flowsim._memory import starting
from flowsim.commands.tables import (
    comparison_tables,
    fixed_point_table,
    format_table,
    sgd_table,
    trajectory_table,
    verify_tables,
)
from flowsim.integrate import Trajectories
from flowsim.sgd import SGDRun

__all__ = [
    "finish",
    "list_files",
    "pyplot",
    "record",
    "record_failures",
    "run_comparison",
    "run_portrait",
    "save",
    "write_interrupted",
    "write_verify",
]


def record(args, inputs: Mapping[str, str | None] | None = None) -> results.RunRecord:
    """The run's folder (created and checked for writing before anything is computed) and record.

    Kept as `args.record`, so that `flowsim.cli.main` can close it if the run is interrupted or fails. `inputs`: the
    digests of what the run reads beyond its parameters (`results.RunRecord`), which `--resume` checks.
    """
    parameters = {name: value for name, value in vars(args).items() if name not in ("run", "checks", "replace")}
    log = results.log_to_stderr if args.progress else None
    args.record = results.RunRecord(
        args.out,
        f"flowsim {args.command}",
        parameters,
        seed=getattr(args, "seed", None),
        log=log,
        replace=args.replace,
        resume=getattr(args, "resume", False),
        inputs=inputs,
    )
    starting()  # the estimate of the run, held until its folder is made (`flowsim.commands.options.estimated`)
    for name in args.record.damaged:
        print(f"{name} is no longer what flowsim wrote (damaged, or another file): computed again", file=sys.stderr)
    if args.record.resumed:
        resumed = f"Resuming the run in {args.record.folder}: {args.record.resumed} finished units read back"
        print(resumed, file=sys.stderr)
    return args.record


def list_files(record: results.RunRecord, stream=None) -> None:
    """Say where the run's files are (run.json last)."""
    print(f"\nResults in {record.folder}/ ({record.elapsed:.1f} s):", file=stream)
    for name in [*record.files, "run.json"]:
        print(f"  {record.folder / name}", file=stream)


def write_interrupted(record: results.RunRecord, interruption: KeyboardInterrupt) -> None:
    """What a computation stopped by Ctrl-C had computed (`flowsim.Interrupted.result`), as a table."""
    result, task = getattr(interruption, "result", None), getattr(interruption, "task", None)
    if isinstance(result, SGDRun):
        record.write_csv("interrupted_sgd.csv", sgd_table(result))
    elif isinstance(result, Trajectories) and task is not None:
        record.write_csv("interrupted_trajectories.csv", trajectory_table(result, task))


def finish(record: results.RunRecord, failed_claim: str | None = None) -> int:
    """Write run.json, say where the files are and report failures; the exit status."""
    record.finish()
    list_files(record)
    for failure in record.failures:
        print(f"{record.command}: numerical failure: {failure['message']}", file=sys.stderr)
    if failed_claim is not None:
        print(f"{record.command}: the claim failed: {failed_claim}", file=sys.stderr)
    return 1 if record.failures or failed_claim is not None else 0


def pyplot():
    """pyplot on the Agg backend: the command line only writes figures, it never shows them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(record: results.RunRecord, figure, stem: str) -> None:
    record.save_figure(figure, stem)
    pyplot().close(figure)


@contextlib.contextmanager
def in_background() -> Iterator[Callable]:
    """Work handed to one worker thread while the command goes on computing (e.g. drawing figures).

    Yields `later(function, *args)`, which queues `function(*args)`; leaving the block waits for
    everything queued (also on an error or Ctrl-C, so that finished results keep their files), then
    raises the first error of the queued work, if any. JAX releases Python's lock while it computes,
    so figures are drawn meanwhile; all of pyplot's work goes to this one thread until the block ends.
    """
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="flowsim-background")
    futures = []
    try:
        yield lambda function, *args: futures.append(pool.submit(function, *args))
    finally:
        pool.shutdown(wait=True)
    for future in futures:
        future.result()


def record_failures(record, result, what: str) -> None:
    """Record every failure of a result (`failures()` of a solve, a map, an SGD run) as a numerical failure."""
    for failure in result.failures():
        record.fail(
            f"{what} {failure.index} failed at t = {failure.time:.6g}: {failure.status.name}: {failure.reason}",
            index=failure.index,
            t=failure.time,
            status=failure.status.name.lower(),
            reason=failure.reason,
            **({} if failure.step is None else {"step": failure.step}),
        )


def run_portrait(record, task, key, prefix: str, *, trajectories: int, t_max: float, grid: int) -> None:
    """The phase portrait of the task's planar flow: fixed points printed, CSV and figure written."""
    from flowsim import figures

    planar = task if task.dimension == 2 else task.restriction()
    with record.phase("portrait", f"phase portrait: {planar.describe()}"):
        figure = figures.phase_portrait(task, trajectories=trajectories, key=key, t_max=t_max, grid=grid)
    points = figure.flowsim_fixed_points
    record.write_csv(f"{prefix}fixed_points.csv", fixed_point_table(points, planar))
    solved = figure.flowsim_trajectories
    if solved is not None:
        record.write_csv(f"{prefix}portrait_trajectories.csv", trajectory_table(solved, planar))
        record_failures(record, solved, "portrait trajectory")
    save(record, figure, f"{prefix}phase_portrait")
    print(f"Fixed points of the {planar.name} ({planar.describe()})")
    rows = [
        (
            "(" + ", ".join(f"{x:+.4f}" for x in p.point) + ")",
            p.kind,
            f"{p.value:.6g}",
            ", ".join(f"{e.real:+.4g}" for e in p.eigenvalues),
        )
        for p in points
    ]
    print(format_table((f"({', '.join(planar.state_names)})", "kind", "risk", "eigenvalues"), rows))


def run_comparison(record, run, prefix: str, *, progress: bool, reference: str = "flow", **options):
    """An SGD run against the flow (or the map) from the same starts: table printed, CSV and overlay written.

    `options` go to `compare` (attractor_tol, settle, and `solve_flow`'s options).

    **Returns:** the `Comparison`.
    """
    from flowsim import compare, figures

    with record.phase("compare", f"the {reference} from the same starts"):
        comparison = compare(run, reference=reference, progress=progress, **options)
    trajectories, deviations = comparison_tables(comparison, run.task)
    record.write_csv(f"{prefix}trajectories.csv", trajectories)
    record.write_csv(f"{prefix}deviations.csv", deviations)
    save(record, figures.comparison_figure(comparison, run.task), f"{prefix}compare")
    steps = {failure.index: failure.step for failure in run.failures()}
    for seed, why in comparison.reasons.items():
        record.fail(f"seed {seed}: {why}", seed=seed, reason=why, step=steps.get(seed))
    return comparison


def write_verify(record, report, task, prefix: str) -> None:
    """A verify report: tables written, failures recorded, the claim in the summary, the report printed."""
    from flowsim.verify import format_report

    table, attractors = verify_tables(report, task)
    record.write_csv(f"{prefix}verify.csv", table)
    record.write_csv(f"{prefix}verify_attractors.csv", attractors)
    for row in report.rows:
        if row.failed:
            record.fail(
                f"{row.setting}, {row.init} starts: the solver failed on {row.failed} of {row.n} trajectories",
                setting=row.setting,
                init=row.init,
                failed=row.failed,
            )
    record.summary["claim_holds"] = report.claim_holds
    print(format_report(report))


def claim_failure(report) -> str | None:
    """What failed when a verify claim did not hold, else None."""
    return None if report.claim_holds else f"not {report.claim}"


def write_trajectories(record, solved, task, name: str, what: str) -> np.ndarray:
    """A solve's trajectories and end points as CSV; its failures recorded. **Returns:** the end-point table."""
    from flowsim.commands.tables import endpoint_table

    endpoints = endpoint_table(solved, task)
    record.write_csv(f"{name}.csv", trajectory_table(solved, task))
    record.write_csv("endpoints.csv", endpoints)
    record_failures(record, solved, what)
    return endpoints
