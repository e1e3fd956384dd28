"""The commands, and the parts several of them run (portrait, SGD against the flow, verify)."""

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flowsim import results, slr
from flowsim.cli._options import _ENGINES, _EXPERIMENTS, _FLOW_MAX_STEPS, _NAMES, _SGD, _VERIFY_SAVES
from flowsim.cli._tables import (
    _attractor_table,
    _comparison_tables,
    _endpoint_table,
    _experiment_tables,
    _fixed_point_table,
    _format_table,
    _lam_along,
    _overlap_columns,
    _sgd_table,
    _trajectory_table,
    _verify_tables,
)

# ---------------------------------------------------------------------------------------------
# Shared steps of the commands


def _problem(args) -> slr.Problem:
    return slr.Problem(d=args.d, L=args.L, lam=args.lam, gamma=args.gamma, eps=args.eps)


def _schedule(lam: float, decay: float, clock: float):
    """The paper's schedule lam / (1 + decay * step) on the clock t = clock * step; None for a fixed lam."""
    from flowsim.schedules import InverseTimeDecay

    return InverseTimeDecay(lam, decay, clock) if decay > 0 else None


def _describe_lam(lam: float, decay: float) -> str:
    return f"{lam:g}/(1 + {decay:g} step)" if decay > 0 else f"{lam:g}"


def _given_overlaps(init):
    """--init overlaps checked for realizability (exit status 2 if unrealizable); names pass through."""
    if isinstance(init, str):
        return init
    try:
        return slr.check_overlaps(init)
    except ValueError as error:
        raise ValueError(f"--init {','.join(f'{x:g}' for x in init)}: {error}") from None


def _record(args) -> results.RunRecord:
    """The run's folder (created and checked for writing before anything is computed) and record."""
    parameters = {name: value for name, value in vars(args).items() if name not in ("run", "checks")}
    log = results.log_to_stderr if args.progress else None
    return results.RunRecord(args.out, f"flowsim {args.command}", parameters, seed=getattr(args, "seed", None), log=log)


def _finish(record: results.RunRecord, failed_claim: str | None = None) -> int:
    """Write run.json, say where the files are and report failures; the exit status."""
    record.finish()
    print(f"\nResults in {record.folder}/ ({record.elapsed:.1f} s):")
    for name in [*record.files, "run.json"]:
        print(f"  {record.folder / name}")
    for failure in record.failures:
        print(f"{record.command}: numerical failure: {failure['message']}", file=sys.stderr)
    if failed_claim is not None:
        print(f"{record.command}: the claim failed: {failed_claim}", file=sys.stderr)
    return 1 if record.failures or failed_claim is not None else 0


def _claim(report: slr.VerifyReport) -> str | None:
    """What failed when the convergence claim of `verify` did not hold, else None."""
    return None if report.claim_holds else "not almost every start on M converged to +-(k*, v*)"


def _progress_bars(args) -> bool:
    """Whether solves draw progress bars (diffrax's tqdm meter)."""
    return args.progress


def _pyplot():
    """pyplot on the Agg backend: the command line only writes figures, it never shows them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(record: results.RunRecord, figure, stem: str) -> None:
    record.save_figure(figure, stem)
    _pyplot().close(figure)


# ---------------------------------------------------------------------------------------------
# Parts that several commands run


def _run_portrait(record, problem, key, prefix: str, *, trajectories: int, t_max: float, grid: int):
    from flowsim import plots

    with record.phase("portrait", f"phase portrait on M at d = {problem.d}, lam = {problem.lam:g}"):
        figure = plots.phase_portrait(problem, trajectories=trajectories, key=key, t_max=t_max, grid=grid)
    points = figure.flowsim_fixed_points
    record.write_csv(f"{prefix}fixed_points.csv", _fixed_point_table(points))
    solved = figure.flowsim_trajectories
    if solved is not None:
        lam = _lam_along(None, problem.lam, solved.ts)
        record.write_csv(f"{prefix}portrait_trajectories.csv", _trajectory_table(solved, lam))
        _record_solver_failures(record, solved, "portrait trajectory")
    _save(record, figure, f"{prefix}phase_portrait")
    print(f"Fixed points of the flow on M (d = {problem.d}, L = {problem.L}, lam = {problem.lam:g})")
    rows = [
        (
            f"({p.point[0]:+.4f}, {p.point[1]:+.4f})",
            p.kind,
            f"{p.value:.6g}",
            ", ".join(f"{e.real:+.4g}" for e in p.eigenvalues),
        )
        for p in points
    ]
    print(_format_table(("(kappa, nu)", "kind", "risk", "eigenvalues"), rows))


def _record_solver_failures(record, solved, what: str) -> None:
    for failure in solved.failures():
        record.fail(
            f"{what} {failure.index} failed at t = {failure.time:.6g}: {failure.status.name}: {failure.reason}",
            index=failure.index,
            t=failure.time,
            status=failure.status.name.lower(),
            reason=failure.reason,
        )


@dataclass(frozen=True)
class _SGDSetting:
    """What an SGD run and its comparison need besides the problem (from the options, or the demo's)."""

    init: object
    lr: float
    steps: int
    batch: int
    decay: float
    log_every: int
    seeds: int
    engine: str


def _run_comparison(
    record,
    problem: slr.Problem,
    key,
    prefix: str,
    setting: _SGDSetting,
    *,
    progress: bool,
    reference: str = "flow",
    attractor_tol: float = slr.ATTRACTOR_TOL,
    **options,
) -> None:
    """Online SGD against the flow (or the map) from the same starts: table printed, CSV and overlay written.

    `options` go to `solve_flow` through `compare`.
    """
    lam = float(problem.lam)
    schedule = _schedule(lam, setting.decay, setting.lr)
    what = f"online SGD ({setting.engine} engine), {setting.steps} steps x {setting.seeds} seeds, d = {problem.d}"
    with record.phase("sgd", what):
        run = slr.run_sgd(
            problem,
            key,
            init=setting.init,
            lr=setting.lr,
            steps=setting.steps,
            batch=setting.batch,
            schedule=schedule,
            log_every=setting.log_every,
            seeds=setting.seeds,
            engine=_ENGINES[setting.engine],
        )
    with record.phase("compare", f"the {reference} from the same starts"):
        comparison = slr.compare(
            run,
            problem,
            schedule=schedule,
            reference=reference,
            attractor_tol=attractor_tol,
            progress=progress,
            **options,
        )
    trajectories, deviations = _comparison_tables(comparison, np.asarray(run.lam))
    record.write_csv(f"{prefix}trajectories.csv", trajectories)
    record.write_csv(f"{prefix}deviations.csv", deviations)
    _save(record, slr.overlay_figure(comparison), f"{prefix}compare")
    for seed, why in comparison.failed.items():
        record.fail(f"seed {seed}: {why}", seed=seed, reason=why, step=run.diverged.get(seed))
    init = setting.init if isinstance(setting.init, str) else "given overlaps"
    print(
        f"{what}: L = {problem.L}, lam = {_describe_lam(lam, setting.decay)}, gamma = {problem.gamma:.4g}, "
        f"eps = {problem.eps:g}, init = {init}, lr = {setting.lr:g}, batch = {setting.batch}\n"
    )
    print(comparison.table())


def _run_verify(record, key, prefix: str, *, d: int, L: int, n: int, **check) -> slr.VerifyReport:
    """`verify_convergence` at the paper's settings (`check`: its options); table printed, CSV written."""
    with record.phase("verify", f"flow from {n} starts on M and {n} on the sphere per setting, d = {d}"):
        report = slr.verify_convergence(slr.default_settings(d, L), key=key, n=n, **check)
    table, attractors = _verify_tables(report)
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
    print(slr.format_report(report))
    return report


# ---------------------------------------------------------------------------------------------
# Commands


def _demo(args) -> int:
    import jax

    problem = _problem(args)
    record = _record(args)
    keys = [jax.random.fold_in(jax.random.key(args.seed), part) for part in range(4)]
    with record.phase("risks", f"risks of the baseline predictors (Bayes: {args.bayes_samples} samples)"):
        risks = _baseline_risks(problem, keys[0], args.bayes_samples)
    record.write_csv("risks.csv", risks)
    print(
        f"Single-location regression: d = {problem.d}, L = {problem.L}, lam = {problem.lam:g}, "
        f"gamma = {problem.gamma:.4g}, eps = {problem.eps:g}, seed = {args.seed}"
    )
    print(f"Population risk E[(Y - T)^2] (Bayes risk >= eps^2 = {problem.eps**2:g})\n")
    shown = [
        f"{risk:.6f}" if math.isnan(stderr) else f"{risk:.3e} ± {stderr:.1e}"
        for risk, stderr in zip(risks["risk"], risks["stderr"], strict=True)
    ]
    print(_format_table(("predictor", "risk", "how"), zip(risks["predictor"], shown, risks["how"], strict=True)))
    print()
    _run_portrait(record, problem, keys[1], "portrait/", trajectories=8, t_max=200.0, grid=41)

    print(f"\nThe paper's SGD run ({_SGD.name}) against the gradient flow, {args.sgd_seeds} seeds")
    log_every = max(1, args.sgd_steps // (_VERIFY_SAVES - 1))
    setting = _SGDSetting(
        init=_SGD.init,
        lr=_SGD.alpha,
        steps=args.sgd_steps - args.sgd_steps % log_every,
        batch=_SGD.batch,
        decay=_SGD.decay,
        log_every=log_every,
        seeds=args.sgd_seeds,
        engine="overlaps",
    )
    sgd_problem = slr.Problem(args.sgd_d, args.L, _SGD.lam, args.gamma, _SGD.eps)
    _run_comparison(
        record, sgd_problem, keys[2], "compare/", setting, progress=_progress_bars(args), max_steps=_FLOW_MAX_STEPS
    )
    print(f"\nConvergence claims (flowsim verify --d {args.verify_d} --n {args.verify_n})")
    report = _run_verify(
        record,
        keys[3],
        "verify/",
        d=args.verify_d,
        L=args.L,
        n=args.verify_n,
        progress=_progress_bars(args),
        # With the defaults (--verify-d = --sgd-d, --verify-n = --sgd-seeds) the check integrates as many
        # starts at the same d, on as many saved times and with the same step budget (a static argument)
        # as the comparison's flow under the schedule: one compiled solve serves both, some 10 s less.
        n_saves=setting.steps // log_every + 1,
    )
    return _finish(record, failed_claim=_claim(report))


def _baseline_risks(problem: slr.Problem, key, bayes_samples: int) -> dict:
    """The risks of the oracle, linear, Bayes, random and null predictors, as a table."""
    import jax
    import jax.numpy as jnp

    key_truth, key_bayes, key_random = jax.random.split(key, 3)
    truth = slr.ground_truth(key_truth, problem.d)
    k, v = jax.random.normal(key_random, (2, problem.d))
    random = slr.overlaps(k / jnp.linalg.norm(k), v / jnp.linalg.norm(v), truth)
    bayes = slr.bayes_risk(problem, truth, key_bayes, bayes_samples)
    oracle, linear = float(slr.oracle_risk(problem)), float(slr.linear_risk(problem))
    random_risk, null = float(slr.population_risk(problem, random)), problem.eps**2 + problem.gamma**2
    nan = float("nan")
    rows = [
        ("oracle (k, v) = (k*, v*)", oracle, nan, "closed form"),
        ("best linear predictor", linear, nan, "closed form"),
        ("Bayes predictor", bayes.mean, bayes.stderr, f"Monte Carlo, n = {bayes.n}"),
        ("random (k, v) on the sphere", random_risk, nan, "closed form"),
        ("null predictor T = 0", null, nan, "eps^2 + gamma^2"),
    ]
    predictor, risk, stderr, how = zip(*rows, strict=True)
    return {"predictor": predictor, "risk": np.array(risk), "stderr": np.array(stderr), "how": how}


def _derive(args) -> int:
    import tempfile

    import flowsim

    installed = Path(flowsim.__file__).resolve().parent / "tasks" / "slr" / "_generated.py"
    if (Path(args.out) / "flowsim" / "tasks" / "slr" / "_generated.py").resolve() == installed:
        raise ValueError(
            f"--out {args.out} would overwrite the installed package's {installed}: give another folder "
            "(`python -m derivations` regenerates a checkout)"
        )
    record = _record(args)
    from derivations.build import generate

    with record.phase("derive", "SymPy derives the risk, the flow, its Jacobians and the PGD map (about 10 s)"):
        # generate() writes in place: into a scratch folder first, then each file atomically into --out.
        with tempfile.TemporaryDirectory(dir=record.folder, prefix=".derive-") as scratch:
            for path in generate(Path(scratch)):
                record.write_text(path.relative_to(scratch).as_posix(), path.read_text())
    checkout = installed.parents[3]
    same = {}
    for name in record.files:
        reference = checkout / name
        same[name] = reference.read_text() == (record.folder / name).read_text() if reference.exists() else None
    record.summary["same_as_installed"] = same
    print(_equation_listing((record.folder / "docs" / "equations.md").read_text()))
    print()
    for name, equal in same.items():
        verdict = {True: "identical to", False: "DIFFERS from", None: "no counterpart at"}[equal]
        print(f"{name}: {verdict} {checkout / name}")
    return _finish(record)


def _equation_listing(markdown: str, width: int = 160) -> str:
    """The headings and equations of equations.md; equations longer than `width` characters are cut."""
    lines, in_equation = [], False
    for line in markdown.splitlines():
        if line == "$$":
            in_equation = not in_equation
        elif in_equation:
            lines.append(f"    {line if len(line) <= width else f'{line[:width]} ... ({len(line)} characters)'}")
        elif line.startswith("#") or (line.startswith("**") and line.endswith("**")):
            lines.append(line.strip("*"))
    return "\n".join(lines)


def _flow(args) -> int:
    import jax

    problem = _problem(args)
    schedule = _schedule(args.lam, args.decay, args.alpha)
    init = _given_overlaps(args.init)
    record = _record(args)
    import diffrax

    from flowsim import plots

    if isinstance(init, str):
        m0 = np.asarray(slr.initial_overlaps(jax.random.key(args.seed), problem.d, args.n, init))
    else:
        m0 = np.broadcast_to(init, (args.n, 5))
    ts = np.linspace(0.0, args.t_max, args.saves)
    solver = {"tsit5": diffrax.Tsit5, "kvaerno5": diffrax.Kvaerno5}[args.solver]()
    with record.phase("integrate", f"{args.n} trajectories to t = {args.t_max:g} ({args.solver})"):
        solved = slr.solve_flow(
            problem, m0, ts, schedule=schedule, solver=solver, max_steps=args.max_steps, progress=_progress_bars(args)
        )
    endpoints = _endpoint_table(solved)
    record.write_csv("trajectories.csv", _trajectory_table(solved, _lam_along(schedule, args.lam, ts)))
    record.write_csv("endpoints.csv", endpoints)
    _save(record, plots.trajectory_projections(solved), "trajectories")
    _record_solver_failures(record, solved, "trajectory")
    print(
        f"Gradient flow: d = {problem.d}, L = {problem.L}, lam = {_describe_lam(args.lam, args.decay)}, "
        f"gamma = {problem.gamma:.4g}, eps = {problem.eps:g}, init = {args.init if isinstance(init, str) else 'given'}"
        f", {args.n} trajectories to t = {args.t_max:g}\n"
    )
    risk = np.asarray(solved.observed)[:, -1]
    rows = [
        (
            i,
            endpoints["status"][i],
            f"{endpoints['t_final'][i]:.6g}",
            *(f"{endpoints[name][i]:+.4f}" for name in _NAMES),
            f"{risk[i]:.6g}",
        )
        for i in range(args.n)
    ]
    print(_format_table(("trajectory", "status", "t_final", *_NAMES, "risk"), rows))
    return _finish(record)


def _portrait(args) -> int:
    import jax

    problem = _problem(args)
    record = _record(args)
    key = jax.random.key(args.seed)
    _run_portrait(
        record,
        problem,
        jax.random.fold_in(key, 0),
        "",
        trajectories=args.trajectories,
        t_max=args.t_max,
        grid=args.grid,
    )
    if args.basins:
        from flowsim import plots

        with record.phase("basins", f"{args.basin_n} {args.basin_init} starts to t = {args.basin_t_max:g}"):
            figure = plots.basin_map(
                problem, n=args.basin_n, key=jax.random.fold_in(key, 1), kind=args.basin_init, t_max=args.basin_t_max
            )
        found, labels, starts = figure.flowsim_attractors, figure.flowsim_labels, figure.flowsim_starts
        record.write_csv(
            "basins.csv", {"start": np.arange(len(starts)), **_overlap_columns(starts), "attractor": labels}
        )
        record.write_csv("attractors.csv", _attractor_table(found))
        _record_solver_failures(record, figure.flowsim_trajectories, "basin start")
        _save(record, figure, "basins")
        print(f"\nAttractors reached from {len(starts)} {args.basin_init} starts by t = {args.basin_t_max:g}")
        rows = [
            (
                ", ".join(f"{x:+.4f}" for x in a.point),
                a.kind,
                f"{a.risk:.6g}",
                f"{a.share:.1%}",
                "yes" if a.is_oracle else "",
            )
            for a in found
        ]
        print(_format_table(("(kappa, nu, theta, eta, rho)", "kind", "risk", "share", "oracle"), rows))
        print(f"not converged: {np.mean(labels < 0):.1%}")
    return _finish(record)


def _sgd(args) -> int:
    import jax

    problem = _problem(args)
    setting = _sgd_setting(args)
    if args.mode != "online" and args.engine == "overlaps":
        raise ValueError(f"--engine overlaps runs online SGD only: --mode {args.mode} needs --engine rd")
    if args.mode == "dataset" and args.n is None:
        raise ValueError("--mode dataset needs --n, the dataset size (a multiple of --batch)")
    record = _record(args)
    what = f"{args.mode} SGD ({args.engine} engine), {args.steps} steps x {args.seeds} seeds, d = {problem.d}"
    with record.phase("sgd", what):
        run = slr.run_sgd(
            problem,
            jax.random.key(args.seed),
            init=setting.init,
            lr=setting.lr,
            steps=setting.steps,
            batch=setting.batch,
            mode=args.mode,
            schedule=_schedule(args.lam, setting.decay, setting.lr),
            log_every=setting.log_every,
            seeds=setting.seeds,
            n=args.n,
            dtype=args.dtype,
            engine=_ENGINES[setting.engine],
        )
    record.write_csv("trajectories.csv", _sgd_table(run))
    title = f"{what}, lr = {args.lr:g}, batch = {args.batch}, $\\lambda$ = {_describe_lam(args.lam, args.decay)}"
    _save(record, _sgd_figure(run, title), "sgd")
    for seed, step in run.diverged.items():
        record.fail(
            f"seed {seed} diverged at step {step} (t = {args.lr * step:.6g}): the iterate became non-finite",
            seed=seed,
            step=step,
            t=args.lr * step,
        )
    print(f"{what}: overlaps and population risk at step {run.steps[-1]} (t = {run.times[-1]:g})\n")
    m, risk = np.asarray(run.overlaps)[:, -1], np.asarray(run.risk)[:, -1]
    rows = [
        (seed, *(f"{x:+.4f}" for x in m[seed]), f"{risk[seed]:.6g}", run.diverged.get(seed, ""))
        for seed in range(args.seeds)
    ]
    print(_format_table(("seed", *_NAMES, "risk", "diverged at step"), rows))
    return _finish(record)


def _sgd_figure(run: slr.SGDRun, title: str):
    """kappa, nu, the distance to M (log axis) and the risks against t, one colour per seed."""
    from flowsim import plots

    plt = _pyplot()
    m, t = np.asarray(run.overlaps), run.times
    figure, axes = plt.subplots(2, 2, figsize=(11, 8.5), layout="constrained")
    distance = np.maximum(np.linalg.norm(m[..., 2:], axis=-1), plots.DISTANCE_FLOOR)
    panels = [(plots.SYMBOLS["kappa"], m[..., 0]), (plots.SYMBOLS["nu"], m[..., 1])]
    panels += [(r"distance to M  $\sqrt{\theta^2 + \eta^2 + \rho^2}$", distance), ("population risk", run.risk)]
    for ax, (label, values) in zip(axes.ravel(), panels, strict=True):
        for seed, series in enumerate(np.asarray(values)):
            ax.plot(t, series, color=f"C{seed % 10}", lw=1.0, alpha=0.8)
        ax.set_xlabel("time $t$ = lr $\\cdot$ step", fontsize=plots.LABEL_SIZE)
        ax.set_ylabel(label, fontsize=plots.LABEL_SIZE)
        ax.tick_params(labelsize=plots.TICK_SIZE)
        ax.grid(True, color="0.9", lw=0.8, zorder=0)
    axes[1, 0].set_yscale("log")
    if run.test_risk is not None:
        for seed, series in enumerate(np.asarray(run.test_risk)):
            axes[1, 1].plot(t, series, color=f"C{seed % 10}", lw=1.0, ls="--")
        axes[1, 1].plot([], [], color="black", ls="--", label="held-out risk")
        axes[1, 1].legend(fontsize=plots.LEGEND_SIZE)
    figure.suptitle(title, fontsize=plots.TITLE_SIZE)
    return figure


def _compare(args) -> int:
    import jax

    problem = _problem(args)
    setting = _sgd_setting(args)
    record = _record(args)
    key = jax.random.key(args.seed)
    _run_comparison(
        record,
        problem,
        key,
        "",
        setting,
        progress=_progress_bars(args),
        reference=args.reference,
        attractor_tol=args.attractor_tol,
    )
    return _finish(record)


def _sgd_setting(args) -> _SGDSetting:
    """The SGD options of `sgd` and `compare`, checked together."""
    if args.steps % args.log_every:
        raise ValueError(f"--log-every {args.log_every} must divide --steps {args.steps}")
    return _SGDSetting(
        init=_given_overlaps(args.init),
        lr=args.lr,
        steps=args.steps,
        batch=args.batch,
        decay=args.decay,
        log_every=args.log_every,
        seeds=args.seeds,
        engine=args.engine,
    )


def _verify(args) -> int:
    import jax

    record = _record(args)
    report = _run_verify(
        record,
        jax.random.key(args.seed),
        "",
        d=args.d,
        L=args.L,
        n=args.n,
        t_max=args.t_max,
        tol=args.tol,
        min_share=args.min_share,
        progress=_progress_bars(args),
        n_saves=args.saves,
    )
    return _finish(record, failed_claim=_claim(report))


def _reproduce(args) -> int:
    import jax

    chosen = [_EXPERIMENTS[name] for name in args.only] if args.only else list(slr.EXPERIMENTS)
    record = _record(args)
    length = "quick" if args.quick else "full"
    print(
        f"Reproducing {len(chosen)} reference experiments ({length} length, {args.seeds} seeds, "
        f"{args.engine} engine, seed {args.seed})"
    )
    record.log(f"experiments: {', '.join(experiment.name for experiment in chosen)}")
    runs = slr.reproduce(
        jax.random.key(args.seed),
        quick=args.quick,
        seeds=args.seeds,
        experiments=chosen,
        log=record.log,
        engine=_ENGINES[args.engine],
    )
    for result in runs:
        record.phases[result.experiment.name] = result.seconds
        _save(record, slr.experiment_figure(result), result.experiment.name)
        _record_divergences(record, result)
    summary, attractors, trajectories = _experiment_tables(runs)
    record.write_csv("summary.csv", summary)
    record.write_csv("attractors.csv", attractors)
    record.write_csv("trajectories.csv", trajectories)
    print()
    print(slr.summary_table(runs))
    return _finish(record)


def _record_divergences(record, result: slr.ExperimentResult) -> None:
    finite = np.isfinite(result.overlaps).all(axis=-1)
    for seed in np.flatnonzero(~finite.all(axis=1)):
        step = int(result.steps[np.argmin(finite[seed])])
        record.fail(
            f"{result.experiment.name}, seed {seed}: diverged by logged step {step}",
            experiment=result.experiment.name,
            seed=int(seed),
            step=step,
        )
