"""The command line of single-location regression: its options (defaults from the paper) and commands.

`flowsim.cli` builds the parser from `COMMANDS`; the shared parts (the run's record, portrait,
comparison, tables) are in the toolkit `flowsim.commands`.
"""

import math
import sys
from dataclasses import dataclass

import numpy as np

from flowsim._checks import POSITIVE, SCALE, SHARE, Allowed, InvalidInput, at_least
from flowsim.commands import parts
from flowsim.commands.options import (
    Command,
    OneOf,
    comma_separated,
    estimated,
    init_option,
    names_option,
    option,
    output_options,
    parameter_options,
    quick_option,
    read_only,
    read_with,
    schedule_option,
)
from flowsim.commands.tables import (
    attractor_table,
    experiment_tables,
    experiment_trajectories,
    format_table,
    sgd_table,
    state_columns,
)
from flowsim.compare import ATTRACTOR_TOL, REFERENCES
from flowsim.results import csv_text
from flowsim.schedules import InverseTimeDecay
from flowsim.tasks import slr
from flowsim.tasks.slr import _estimates
from flowsim.tasks.slr._approach import TOLERANCE
from flowsim.tasks.slr._own_maps import OWN_MAP, check_spec, loaded_digest, own_map
from flowsim.tasks.slr._problem import PARAMETERS
from flowsim.verify import VerifyReport

__all__ = ["COMMANDS", "DESCRIPTION"]

DESCRIPTION = (
    "single-location regression with erf attention (Marion et al., ICLR 2025), softmax, linear, softplus "
    "(Duranthon et al., 2025), sigmoid (Ramapuram et al., 2024) and ReLU attention (Wortsman et al., 2023)"
)

#: The paper's reference experiments (docs/science.md section 6) that give the defaults.
_EXPERIMENTS = {experiment.name: experiment for experiment in slr.EXPERIMENTS}
_POPULATION = _EXPERIMENTS["sphere_small_lambda"]
_SGD = _EXPERIMENTS["sgd_sphere_schedule"]
_SOLVERS = ("tsit5", "rodas5", "rosenbrock4", "kvaerno5")
#: The step budget of `verify_convergence`'s solves, which the demo's comparison uses too (see `_demo`).
_FLOW_MAX_STEPS = 2_000_000
#: Saved times of `verify`'s solves (`verify_convergence`'s default), which the demo's SGD logs match.
_VERIFY_SAVES = 401
_NAMES = slr.OVERLAP_NAMES
_INIT_TEXT = (
    "sphere (k, v uniform on the sphere), manifold (on M, docs/science.md section 6) or realizable overlaps "
    "kappa,nu,theta,eta,rho"
)


# ---------------------------------------------------------------------------------------------
# Options: what each accepts is said in its --help and checked before a command runs


#: One minimum of --d for every command (the Python API takes d >= 2, starts on M d >= 3).
_D = Allowed(
    "an integer in [5, 2**53] (every command: SGD on the overlaps needs d >= 5)",
    lambda d: 5 <= d <= 2**53,
    integer=True,
)


def _task_options(parser, command: str, seed=0, resumable: bool = False, **defaults) -> None:
    """Add the task's options named in `defaults` (with those defaults), then --seed, --out and --progress."""
    parameter_options(parser, PARAMETERS, defaults, {"d": _D})
    output_options(parser, command, seed, resumable)


def _init_option(parser, what: str) -> None:
    init_option(parser, slr.Problem, what, _INIT_TEXT)


def _attention(spec: str, flag: str = "--attention") -> "str | slr.AttentionMap":
    """A built-in map's name as it is, a researcher's map (`OWN_MAP`) loaded (when the run needs it).

    **Raises:** `InvalidInput` naming `flag` and what is wrong.
    """
    if spec in slr.ATTENTION_MAPS:
        return spec
    try:
        return own_map(spec)
    except InvalidInput as error:
        raise InvalidInput(f"{flag} {error}") from None


def _record(args):
    """`parts.record`, with the SHA-256 of the source of each researcher's map the run names, as this process ran it
    (the command loads its maps, `_attention`, first): run.json keeps them, so that --resume refuses a run whose map
    was edited since."""
    specs = (getattr(args, "attention", "erf"), *getattr(args, "maps", ()))
    own = [spec for spec in specs if spec not in slr.ATTENTION_MAPS]
    return parts.record(args, {check_spec(spec)[0]: loaded_digest(spec) for spec in own})


def _attention_option(parser) -> None:
    parser.add_argument(
        "--attention",
        type=OneOf(tuple(slr.ATTENTION_MAPS), check_spec),  # a researcher's map: its form checked, loaded later
        default="erf",
        metavar="MAP",
        help=f"the attention weight map (docs/science.md section 7): one of {', '.join(slr.ATTENTION_MAPS)}, or a "
        f"researcher's own slr.AttentionMap as {OWN_MAP} (docs/own-attention-map.md); every map but erf takes its "
        "risk by a rule over the scores (flowsim.quadrature.default_rule)",
    )


def _engine_option(parser, text: str) -> None:
    parser.add_argument("--engine", choices=slr.ENGINES, default="overlaps", help=text)


_POPULATION_DEFAULTS = dict(d=_POPULATION.d, L=_POPULATION.L, lam=_POPULATION.lam, gamma=_POPULATION.gamma, eps=0.0)
_SGD_DEFAULTS = dict(d=_SGD.d, L=_SGD.L, lam=_SGD.lam, gamma=_SGD.gamma, eps=_SGD.eps)


def _demo_options(parser) -> None:
    _task_options(parser, "demo", **_POPULATION_DEFAULTS)
    option(parser, "--bayes-samples", int, 4096, "Monte Carlo samples of the Bayes risk", at_least(2))
    option(parser, "--sgd-d", int, _SGD.d, "dimension of the SGD run", _D)
    option(parser, "--sgd-steps", int, _SGD.steps, "steps of the SGD run", at_least(1))
    option(parser, "--sgd-seeds", int, 8, "seeds of the SGD run", at_least(1))
    option(parser, "--verify-d", int, _SGD.d, "dimension of the convergence check", _D)
    option(parser, "--verify-n", int, 8, "starts per initialisation and setting of the check", at_least(1))


def _flow_options(parser) -> None:
    _attention_option(parser)
    _task_options(parser, "flow", **_POPULATION_DEFAULTS)
    schedule_option(parser, "alpha", _POPULATION.decay)
    option(parser, "--alpha", float, _POPULATION.alpha, "step size that maps steps to flow time (--decay)", POSITIVE)
    read_only(
        parser, ["--alpha"], "with --decay above 0 (the schedule's clock)", "add --decay", lambda args: args.decay > 0
    )
    _init_option(parser, "initial overlaps")
    option(parser, "--n", int, 16, "number of trajectories", at_least(1))
    t_max = _POPULATION.alpha * _POPULATION.steps
    option(parser, "--t-max", float, t_max, "integration horizon (the paper's 20000 steps of 4e-3)", POSITIVE)
    option(parser, "--saves", int, 201, "saved times, evenly spaced in [0, t-max]", at_least(2))
    parser.add_argument(
        "--solver",
        choices=("auto", *_SOLVERS),
        default="auto",
        help="explicit Tsit5; linearly implicit Rodas5 (order 5) or Rosenbrock4 (order 4), or implicit Kvaerno5, "
        "for stiff flows; or auto: Rodas5 where the Jacobian at the starts and at (k*, v*) says Tsit5's stable "
        "steps would cost more than Rodas5's or exceed --max-steps (flowsim.integrate.choose_solver; for a map "
        "taken by a rule: the task's Rodas5 at rtol 1e-5)",
    )
    option(parser, "--max-steps", int, _FLOW_MAX_STEPS, "solver steps per trajectory before it fails", at_least(1))


def _portrait_options(parser) -> None:
    _attention_option(parser)
    _task_options(parser, "portrait", **_POPULATION_DEFAULTS)
    option(parser, "--trajectories", int, 8, "sample trajectories drawn from starts on M", at_least(0))
    option(parser, "--t-max", float, 200.0, "horizon of the sample trajectories", POSITIVE)
    option(parser, "--grid", int, 41, "streamline grid points per side", at_least(2))
    parser.add_argument("--basins", action="store_true", help="also draw the basin map of the 5-D flow")
    option(parser, "--basin-n", int, 400, "starts of the basin map", at_least(1))
    parser.add_argument(
        "--basin-init", choices=slr.INITIALISATIONS, default="sphere", help="initialisation of the basin map's starts"
    )
    option(parser, "--basin-t-max", float, 500.0, "horizon of the basin map's trajectories", POSITIVE)
    read_with(parser, "--basins", "--basin-n", "--basin-init", "--basin-t-max")
    read_only(
        parser, ["--t-max"], "with --trajectories above 0", "raise --trajectories", lambda args: args.trajectories > 0
    )


def _sgd_run_options(parser, seeds: int) -> None:
    """The SGD run's options shared by `sgd` and `compare`, at the paper's defaults."""
    schedule_option(parser, "lr", _SGD.decay)
    _init_option(parser, "initialisation of every seed")
    option(parser, "--lr", float, _SGD.alpha, "SGD step size; flow time t = lr * step", POSITIVE)
    option(parser, "--steps", int, _SGD.steps, "SGD steps", at_least(1))
    option(parser, "--batch", int, _SGD.batch, "samples per step", at_least(1))
    option(parser, "--log-every", int, 1000, "log every this many steps (must divide --steps)", at_least(1))
    option(parser, "--seeds", int, seeds, "independent runs", at_least(1))
    _engine_option(
        parser,
        "online SGD as the exact chain on the five overlaps (cost independent of d; d >= 5, online mode only) "
        "or with vectors in R^d",
    )


def _sgd_options(parser) -> None:
    _attention_option(parser)
    _task_options(parser, "sgd", **_SGD_DEFAULTS)
    _sgd_run_options(parser, seeds=30)
    parser.add_argument(
        "--mode",
        choices=slr.MODES,
        default="online",
        help="fresh samples each step, a fixed dataset of --n samples, or the exact population gradient "
        "(dataset and population need --engine rd)",
    )
    option(parser, "--n", int, None, "dataset size for --mode dataset (a multiple of --batch)", at_least(1))
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64", help="precision in R^d")
    read_only(
        parser,
        ["--batch"],
        "by --mode online and dataset (the population gradient takes no samples)",
        "take another --mode",
        lambda args: args.mode != "population",
    )


def _compare_options(parser) -> None:
    _attention_option(parser)
    _task_options(parser, "compare", **_SGD_DEFAULTS)
    _sgd_run_options(parser, seeds=8)
    parser.add_argument(
        "--reference", choices=REFERENCES, default="flow", help="the gradient flow, or the PGD map at the same lr"
    )
    option(parser, "--attractor-tol", float, ATTRACTOR_TOL, "end-point distance for 'same attractor'", TOLERANCE)


def _verify_options(parser) -> None:
    _task_options(parser, "verify", resumable=True, d=_POPULATION.d, L=_POPULATION.L)
    _attention_option(parser)
    option(parser, "--n", int, 64, "starts per initialisation and setting", at_least(1))
    option(parser, "--t-max", float, 1000.0, "integration horizon", POSITIVE)
    option(parser, "--tol", float, 1e-3, "max-norm distance to +-(k*, v*) counted as converged", TOLERANCE)
    option(parser, "--min-share", float, 0.99, "share of starts on M that must converge", SHARE)
    option(parser, "--saves", int, _VERIFY_SAVES, "saved times (resolution of the time to converge)", at_least(2))


def _reproduce_options(parser) -> None:
    _task_options(parser, "reproduce", resumable=True)
    parser.add_argument("--quick", action="store_true", help="reduced lengths (6000 population, 2000 SGD steps)")
    option(parser, "--seeds", int, 30, "runs per experiment", at_least(1))
    names_option(parser, "--only", _EXPERIMENTS, None, "the experiments run")
    _engine_option(
        parser,
        "every run on the five overlaps (the population PGD map, the online-SGD chain: seconds) or with vectors "
        "in R^d (to cross-check: minutes to hours)",
    )


def _advantage_options(parser) -> None:
    _task_options(parser, "advantage", resumable=True, d=80, L=10, gamma=1.0, eps=0.1)
    option(
        parser,
        "--lams",
        comma_separated(SCALE),
        ",".join(f"{lam:.6g}" for lam in slr.DEFAULT_LAMS),
        "inverse temperatures, a,b,c",
    )
    maps = slr.ATTENTION_MAPS
    names_option(parser, "--maps", maps, ",".join(maps), "the maps compared", others=(OWN_MAP, check_spec))
    option(parser, "--starts", int, 64, "sphere starts of the flow, and SGD seeds", at_least(1))
    option(parser, "--t-max", float, 100.0, "horizon of the flow and of SGD (t = lr * step)", POSITIVE)
    option(parser, "--lr", float, 0.01, "SGD step size", POSITIVE)
    option(parser, "--batch", int, 5, "SGD samples per step", at_least(1))
    option(
        parser,
        "--rule-points",
        int,
        2**12,
        "Sobol' points of the rule over the L scores for L > 4 (a power of 2)",
        _POWER,
    )
    option(parser, "--bayes-samples", int, 100_000, "Monte Carlo samples of the Bayes risk", at_least(2))
    read_only(
        parser,
        ["--rule-points"],
        "for a map other than erf in --maps at --L > 4 (erf's risk is closed-form; up to L = 4 the rule is a product "
        "rule)",
        "add such a map, or raise --L",
        lambda args: args.L > 4 and any(name != "erf" for name in args.maps),
    )
    quick_lams = ",".join(f"{lam:.6g}" for lam in slr.DEFAULT_LAMS[::3])
    quick_option(parser, "a smoke run", lams=quick_lams, starts="16", t_max="30")


_POWER = Allowed("a power of 2 >= 2", lambda n: n >= 2 and not n & (n - 1), integer=True)


# ---------------------------------------------------------------------------------------------
# Shared steps of the commands


def _problem(args, decay: float = 0.0, clock: float = 1.0) -> slr.Problem:
    """The task from the options; with decay > 0, lam follows the paper's schedule lam / (1 + decay * step),
    step = t / clock."""
    lam = InverseTimeDecay(args.lam, decay, clock) if decay > 0 else args.lam
    attention = _attention(getattr(args, "attention", "erf"))
    return slr.Problem(d=args.d, L=args.L, lam=lam, gamma=args.gamma, eps=args.eps, attention=attention)


def _given_overlaps(init):
    """--init overlaps checked for realizability (exit status 2 if unrealizable); names pass through."""
    if isinstance(init, str):
        return init
    try:
        return slr.check_overlaps(init)
    except ValueError as error:
        raise InvalidInput(f"--init {','.join(f'{x:g}' for x in init)}: {error}") from None


@dataclass(frozen=True)
class _SGDSetting:
    """What an SGD run needs besides the problem (from the options, or the demo's)."""

    init: object
    lr: float
    steps: int
    batch: int
    log_every: int
    seeds: int
    engine: str

    def run(self, problem: slr.Problem, key, **options) -> slr.SGDRun:
        """`run_sgd` with these settings (`options`: its mode, n, dtype)."""
        return slr.run_sgd(
            problem,
            key,
            init=self.init,
            lr=self.lr,
            steps=self.steps,
            batch=self.batch,
            log_every=self.log_every,
            seeds=self.seeds,
            engine=self.engine,
            **options,
        )


def _run_sgd_and_compare(record, problem: slr.Problem, key, prefix: str, setting: _SGDSetting, **options) -> None:
    """Online SGD against the flow (or the map) from the same starts: table printed, CSV and overlay written.

    `options` go to `flowsim.commands.parts.run_comparison` (progress, reference, attractor_tol, solver options).
    """
    what = f"online SGD ({setting.engine} engine), {setting.steps} steps x {setting.seeds} seeds, d = {problem.d}"
    with record.phase("sgd", what):
        run = setting.run(problem, key)
    _record_risk_rises(record, problem, run)  # as `flowsim sgd` says of the same run
    comparison = parts.run_comparison(record, run, prefix, **options)
    init = setting.init if isinstance(setting.init, str) else "given overlaps"
    print(
        f"{what}: L = {problem.L}, lam = {problem.schedule().describe()}, gamma = {problem.gamma:.4g}, "
        f"eps = {problem.eps:g}, init = {init}, lr = {setting.lr:g}, batch = {setting.batch}\n"
    )
    print(comparison.table())


def _run_verify(record, key, prefix: str, *, d: int, L: int, n: int, attention="erf", **check) -> VerifyReport:
    """`verify_convergence` at the paper's settings with the map `attention` (`check`: its options); table printed,
    CSV written."""
    settings = slr.default_settings(d, L, attention)
    with record.phase("verify", f"flow from {n} starts on M and {n} on the sphere per setting, d = {d}"):
        report = slr.verify_convergence(settings, key=key, n=n, **check)
    parts.write_verify(record, report, settings[0].task, prefix)
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
    print(format_table(("predictor", "risk", "how"), zip(risks["predictor"], shown, risks["how"], strict=True)))
    print()
    parts.run_portrait(record, problem, keys[1], "portrait/", trajectories=8, t_max=200.0, grid=41)

    print(f"\nThe paper's SGD run ({_SGD.name}) against the gradient flow, {args.sgd_seeds} seeds")
    log_every = max(1, args.sgd_steps // (_VERIFY_SAVES - 1))
    setting = _SGDSetting(
        init=_SGD.init,
        lr=_SGD.alpha,
        steps=args.sgd_steps - args.sgd_steps % log_every,
        batch=_SGD.batch,
        log_every=log_every,
        seeds=args.sgd_seeds,
        engine="overlaps",
    )
    schedule = InverseTimeDecay(_SGD.lam, _SGD.decay, _SGD.alpha)
    sgd_problem = slr.Problem(args.sgd_d, args.L, schedule, args.gamma, _SGD.eps)
    _run_sgd_and_compare(
        record, sgd_problem, keys[2], "compare/", setting, progress=args.progress, max_steps=_FLOW_MAX_STEPS
    )
    print(f"\nConvergence claims (flowsim verify --d {args.verify_d} --n {args.verify_n})")
    report = _run_verify(
        record,
        keys[3],
        "verify/",
        d=args.verify_d,
        L=args.L,
        n=args.verify_n,
        progress=args.progress,
        # With the defaults (--verify-d = --sgd-d, --verify-n = --sgd-seeds) the check integrates as many
        # starts at the same d, on as many saved times and with the same step budget (a static argument)
        # as the comparison's flow under the schedule: one compiled solve serves both, some 10 s less.
        n_saves=setting.steps // log_every + 1,
    )
    return parts.finish(record, failed_claim=parts.claim_failure(report))


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


def _choose_solver(args, problem, m0):
    """--solver, or for `auto` the engine's choice (`flowsim.integrate.choose_solver`), said before the solve."""
    import diffrax

    from flowsim.integrate import Rodas5, Rosenbrock4, choose_solver

    if args.solver in ("auto", "tsit5"):  # the estimate decides auto and warns an explicit solve of a stiff flow
        chosen, why = choose_solver(problem, m0, args.t_max, max_steps=args.max_steps)
        if args.solver == "auto":
            print(f"flowsim {args.command}: {why}", file=sys.stderr)
            return chosen, type(chosen).__name__
        if isinstance(chosen, Rodas5):
            warning = f"warning: {why.split(';')[0]}: --solver rodas5 (or auto) takes it"
            print(f"flowsim {args.command}: {warning}", file=sys.stderr)
    solvers = {"tsit5": diffrax.Tsit5, "rodas5": Rodas5, "rosenbrock4": Rosenbrock4, "kvaerno5": diffrax.Kvaerno5}
    solver = solvers[args.solver]()
    return solver, type(solver).__name__


def _flow(args) -> int:
    import jax

    problem = _problem(args, args.decay, args.alpha)
    init = _given_overlaps(args.init)
    record = _record(args)

    from flowsim import figures

    if isinstance(init, str):
        m0 = np.asarray(slr.initial_overlaps(jax.random.key(args.seed), problem.d, args.n, init))
    else:
        m0 = np.broadcast_to(init, (args.n, 5))
    ts = np.linspace(0.0, args.t_max, args.saves)
    if args.solver == "auto" and problem.flow_solver():
        # A map whose risk is taken by a rule: the task's own solver and tolerances (`Problem.flow_solver`).
        options = {}
        name = f"{type(problem.flow_solver()['solver']).__name__}, the task's default for {problem.attention.name}"
    else:
        solver, name = _choose_solver(args, problem, m0)
        options = {"solver": solver}
    with record.phase("integrate", f"{args.n} trajectories to t = {args.t_max:g} ({name})"):
        solved = slr.solve_flow(problem, m0, ts, max_steps=args.max_steps, progress=args.progress, **options)
    endpoints = parts.write_trajectories(record, solved, problem, "trajectories", "trajectory")
    parts.save(record, figures.trajectory_projections(solved, problem), "trajectories")
    print(
        f"Gradient flow: d = {problem.d}, L = {problem.L}, lam = {problem.schedule().describe()}, "
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
    print(format_table(("trajectory", "status", "t_final", *_NAMES, "risk"), rows))
    return parts.finish(record)


def _portrait(args) -> int:
    import jax

    problem = _problem(args)
    record = _record(args)
    key = jax.random.key(args.seed)
    parts.run_portrait(
        record,
        problem,
        jax.random.fold_in(key, 0),
        "",
        trajectories=args.trajectories,
        t_max=args.t_max,
        grid=args.grid,
    )
    if args.basins:
        from flowsim import figures

        with record.phase("basins", f"{args.basin_n} {args.basin_init} starts to t = {args.basin_t_max:g}"):
            figure = figures.basin_map(
                problem, n=args.basin_n, key=jax.random.fold_in(key, 1), kind=args.basin_init, t_max=args.basin_t_max
            )
        found, labels, starts = figure.flowsim_attractors, figure.flowsim_labels, figure.flowsim_starts
        record.write_csv(
            "basins.csv", {"start": np.arange(len(starts)), **state_columns(starts, _NAMES), "attractor": labels}
        )
        record.write_csv("attractors.csv", attractor_table(found, problem))
        parts.record_failures(record, figure.flowsim_trajectories, "basin start")
        parts.save(record, figure, "basins")
        print(f"\nAttractors reached from {len(starts)} {args.basin_init} starts by t = {args.basin_t_max:g}")
        rows = [
            (
                ", ".join(f"{x:+.4f}" for x in a.point),
                a.kind,
                f"{a.risk:.6g}",
                f"{a.share:.1%}",
                "yes" if a.is_target else "",
            )
            for a in found
        ]
        print(format_table(("(kappa, nu, theta, eta, rho)", "kind", "risk", "share", "oracle"), rows))
        print(f"not converged: {np.mean(labels < 0):.1%}")
    return parts.finish(record)


def _sgd(args) -> int:
    import jax

    setting = _sgd_setting(args)
    problem = _problem(args, args.decay, args.lr)
    if args.mode != "online" and args.engine == "overlaps":
        raise InvalidInput(f"--engine overlaps runs online SGD only: --mode {args.mode} needs --engine rd")
    if args.mode == "dataset" and args.n is None:
        raise InvalidInput("--mode dataset needs --n, the dataset size (a multiple of --batch)")
    if args.mode != "dataset" and args.n is not None:
        raise InvalidInput(f"--n is the dataset size of --mode dataset: --mode {args.mode} draws no dataset")
    if args.mode == "dataset" and args.n % args.batch:
        # Before the run's folder and its estimate are said (`run_sgd` names its arguments, not these options).
        raise InvalidInput(f"--batch {args.batch} must divide --n {args.n}, the dataset size of --mode dataset")
    record = _record(args)
    what = f"{args.mode} SGD ({args.engine} engine), {args.steps} steps x {args.seeds} seeds, d = {problem.d}"
    with record.phase("sgd", what):
        run = setting.run(problem, jax.random.key(args.seed), mode=args.mode, n=args.n, dtype=args.dtype)
    record.write_csv("trajectories.csv", sgd_table(run))
    title = f"{what}, lr = {args.lr:g}, batch = {args.batch}, $\\lambda$ = {problem.schedule().describe()}"
    parts.save(record, _sgd_figure(run, title), "sgd")
    for failure in run.failures():
        record.fail(
            f"seed {failure.index} diverged at step {failure.step} (t = {failure.time:.6g}): "
            "the iterate became non-finite",
            seed=failure.index,
            step=failure.step,
            t=failure.time,
        )
    rose = _record_risk_rises(record, problem, run)
    print(f"{what}: overlaps and population risk at step {run.steps[-1]} (t = {run.times[-1]:g})\n")
    m, risk = np.asarray(run.ys)[:, -1], np.asarray(run.risk)[:, -1]
    diverged = rose | {failure.index: failure.step for failure in run.failures()}
    rows = [
        (seed, *(f"{x:+.4f}" for x in m[seed]), f"{risk[seed]:.6g}", diverged.get(seed, ""))
        for seed in range(args.seeds)
    ]
    print(format_table(("seed", *_NAMES, "risk", "diverged at step"), rows))
    return parts.finish(record)


#: An SGD run whose risk ends above this factor times its start's (and the null predictor's) has diverged.
_RISE = 1.1


def _record_risk_rises(record, problem: slr.Problem, run: slr.SGDRun) -> dict[int, int]:
    """Record the seeds of a finite run whose risk ended well above where it started and above the null predictor's
    (the chain on the overlaps stays finite where SGD in R^d would blow up: lr too large) as diverged.

    **Returns:** {seed: the run's last step} for those seeds.
    """
    null, risks = problem.eps**2 + problem.gamma**2, np.asarray(run.risk)
    rose = {}
    for seed in np.flatnonzero(risks[:, -1] > _RISE * np.maximum(risks[:, 0], null)):
        rose[int(seed)] = int(run.steps[-1])
        record.fail(
            f"seed {seed} diverged: its risk rose from {risks[seed, 0]:.4g} to {risks[seed, -1]:.4g} by step "
            f"{run.steps[-1]}, above the null predictor's {null:.4g} (lower --lr)",
            seed=int(seed),
            step=int(run.steps[-1]),
            t=float(run.times[-1]),
        )
    return rose


def _sgd_figure(run: slr.SGDRun, title: str):
    """kappa, nu, the distance to M (log axis) and the risks against t, one colour per seed; held-out risk dashed."""
    from flowsim import figures

    ys, risk = np.asarray(run.ys), np.asarray(run.risk)
    figure = figures.sgd_figure(run.task, run.times, ys, risk, title=title)
    if run.test_risk is not None:
        ax = figure.axes[-1]
        for seed, series in enumerate(np.asarray(run.test_risk)):
            ax.plot(run.times, series, color=f"C{seed % 10}", lw=1.0, ls="--")
        ax.plot([], [], color="black", ls="--", label="held-out risk")
        ax.legend(fontsize=figures.LEGEND_SIZE)
    return figure


def _compare(args) -> int:
    import jax

    setting = _sgd_setting(args)
    problem = _problem(args, args.decay, args.lr)
    record = _record(args)
    _run_sgd_and_compare(
        record,
        problem,
        jax.random.key(args.seed),
        "",
        setting,
        progress=args.progress,
        reference=args.reference,
        attractor_tol=args.attractor_tol,
    )
    return parts.finish(record)


def _sgd_setting(args) -> _SGDSetting:
    """The SGD options of `sgd` and `compare`, checked together."""
    if args.steps % args.log_every:
        raise InvalidInput(f"--log-every {args.log_every} must divide --steps {args.steps}")
    return _SGDSetting(
        init=_given_overlaps(args.init),
        lr=args.lr,
        steps=args.steps,
        batch=args.batch,
        log_every=args.log_every,
        seeds=args.seeds,
        engine=args.engine,
    )


def _verify(args) -> int:
    import jax

    attention = _attention(args.attention)
    record = _record(args)
    report = _run_verify(
        record,
        jax.random.key(args.seed),
        "",
        d=args.d,
        L=args.L,
        n=args.n,
        attention=attention,
        t_max=args.t_max,
        tol=args.tol,
        min_share=args.min_share,
        progress=args.progress,
        n_saves=args.saves,
        unit=record.unit,
    )
    return parts.finish(record, failed_claim=parts.claim_failure(report))


def _reproduce(args) -> int:
    import jax

    from flowsim.experiments import summary_table

    chosen = [_EXPERIMENTS[name] for name in args.only] if args.only else list(slr.EXPERIMENTS)
    record = _record(args)
    length = "quick" if args.quick else "full"
    print(
        f"Reproducing {len(chosen)} reference experiments ({length} length, {args.seeds} seeds, "
        f"{args.engine} engine, seed {args.seed})"
    )
    record.log(f"experiments: {', '.join(experiment.name for experiment in chosen)}")

    def draw(result) -> None:
        parts.save(record, slr.experiment_figure(result), result.experiment.name)

    def write(result) -> None:
        # Each experiment's files as soon as it is done, the tables rewritten with every finished one (the
        # trajectories' earlier rows from their text, not formatted again); its figure drawn in the background
        # while the next experiment computes.
        finished.append(result)
        record.phases[result.experiment.name] = result.seconds
        later(draw, result)
        parts.record_failures(record, result, f"{result.experiment.name}, seed")
        summary, attractors = experiment_tables(finished, task)
        record.write_csv("summary.csv", summary)
        record.write_csv("attractors.csv", attractors)
        trajectories = experiment_trajectories(result, task)
        rows.append(csv_text(trajectories, header=not rows))  # the first experiment's text begins with the header
        record.write_text("trajectories.csv", "".join(rows))

    task = chosen[0].task
    finished, rows = [], []
    with parts.in_background() as later:
        runs = slr.reproduce(
            jax.random.key(args.seed),
            quick=args.quick,
            seeds=args.seeds,
            experiments=chosen,
            log=record.log,
            engine=args.engine,
            each=write,
            unit=record.unit,
        )
    print()
    print(summary_table(runs))
    return parts.finish(record)


def _advantage(args) -> int:
    import jax

    from flowsim import quadrature

    maps = tuple(_attention(name, "--maps") for name in args.maps)
    record = _record(args)
    lams, starts, t_max = args.lams, args.starts, args.t_max
    rule = quadrature.default_rule(args.L, args.rule_points)
    what = f"{len(args.maps)} maps x {len(lams)} values of lam, {starts} starts, t = {t_max:g}, d = {args.d}"
    with record.phase("advantage", what):
        result = slr.statistical_advantage(
            jax.random.key(args.seed), d=args.d, L=args.L, gamma=args.gamma, eps=args.eps, lams=lams,
            attention=maps, starts=starts, t_max=t_max, lr=args.lr, batch=args.batch, rule=rule,
            bayes_samples=args.bayes_samples, log=record.log, unit=record.unit,
        )  # fmt: skip
    parts.record_failures(record, result, "run")
    table = result.table()
    record.write_csv("advantage.csv", table)
    parts.save(record, slr.advantage_figure(result), "advantage")
    header = ("map", "lam", "flow median", "SGD median", "oracle")
    rows = zip(
        table["attention"],
        *([f"{x:.5g}" for x in table[name]] for name in ("lam", "flow_median", "sgd_median", "oracle")),
        strict=True,
    )
    print(f"Risk reached from {starts} sphere starts ({what}; rule {rule.name}); Bayes risk {result.bayes.mean:.5g}")
    print(format_table(header, rows))
    return parts.finish(record)


#: name, what it does (its --help), the function that runs it, the function that adds its options.
COMMANDS = (
    Command(
        "demo",
        "the tour in about a minute: baseline risks, the phase portrait on M, the paper's SGD run against the "
        "gradient flow (overlap engine), and the convergence check of `verify` with few starts",
        estimated(_demo, _estimates.COMMANDS["demo"]),
        _demo_options,
    ),
    Command(
        "flow",
        "integrate the projected gradient flow on the five overlaps from n starts; write the trajectories",
        estimated(_flow, _estimates.COMMANDS["flow"]),
        _flow_options,
    ),
    Command(
        "portrait",
        "phase portrait of the flow on M = {theta = eta = rho = 0} with its fixed points; optionally the basins "
        "of the 5-D flow's attractors",
        estimated(_portrait, _estimates.COMMANDS["portrait"]),
        _portrait_options,
    ),
    Command(
        "sgd",
        "train (k, v) by SGD (online, on a fixed dataset, or population PGD) from many seeds; defaults: the "
        "paper's SGD run",
        estimated(_sgd, _estimates.COMMANDS["sgd"]),
        _sgd_options,
    ),
    Command(
        "compare",
        "run online SGD and compare it with the gradient flow from the same starts: deviations and overlay; "
        "defaults: the paper's SGD run",
        estimated(_compare, _estimates.COMMANDS["compare"]),
        _compare_options,
    ),
    Command(
        "verify",
        "integrate the flow from many starts at the paper's settings and check the convergence claims "
        "(exit status 1 if 'almost every start on M converges to +-(k*, v*)' fails)",
        estimated(_verify, _estimates.COMMANDS["verify"]),
        _verify_options,
    ),
    Command(
        "advantage",
        "the statistical advantage of softmax: the risk each built-in attention map (erf, softmax, linear, softplus, "
        "sigmoid, relu) reaches by the gradient flow and by online SGD from sphere starts, against lam, with the "
        "oracle and Bayes risks",
        estimated(_advantage, _estimates.COMMANDS["advantage"]),
        _advantage_options,
    ),
    Command(
        "reproduce",
        "run the paper's five reference experiments (docs/science.md section 6): summary table and the four-panel "
        "figure of each",
        estimated(_reproduce, _estimates.COMMANDS["reproduce"]),
        _reproduce_options,
    ),
)
