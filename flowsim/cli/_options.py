"""Options of the command line: defaults from the paper, allowed values, one adder per command."""

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

from flowsim import slr

#: The paper's reference experiments (SPEC.md section 6) that give the defaults.
_EXPERIMENTS = {experiment.name: experiment for experiment in slr.EXPERIMENTS}
_POPULATION = _EXPERIMENTS["sphere_small_lambda"]
_SGD = _EXPERIMENTS["sgd_sphere_schedule"]
#: --engine values and the names `run_sgd` and `reproduce` give them.
_ENGINES = {"overlaps": "overlaps", "rd": "Rd"}
_SOLVERS = ("tsit5", "kvaerno5")
#: The step budget of `verify_convergence`'s solves, which the demo's comparison uses too (see `_demo`).
_FLOW_MAX_STEPS = 2_000_000
#: Saved times of `verify`'s solves (`verify_convergence`'s default), which the demo's SGD logs match.
_VERIFY_SAVES = 401
_NAMES = slr.OVERLAP_NAMES


# ---------------------------------------------------------------------------------------------
# Options: what each accepts is said in its --help and checked before a command runs


@dataclass(frozen=True)
class _Allowed:
    """The values an option accepts: `text` for --help and error messages, `accepts` to check."""

    text: str
    accepts: Callable[[float], bool]


def _at_least(minimum: int) -> _Allowed:
    return _Allowed(f"an integer >= {minimum}", lambda x: x >= minimum)


_POSITIVE = _Allowed("a finite number > 0", lambda x: math.isfinite(x) and x > 0)
_NON_NEGATIVE = _Allowed("a finite number >= 0", lambda x: math.isfinite(x) and x >= 0)
_SHARE = _Allowed("a number in [0, 1]", lambda x: 0 <= x <= 1)

#: The task's options, shared by the commands with their own defaults: type, meaning, allowed values.
_TASK_OPTIONS = {
    "d": (int, "token dimension d", _at_least(2)),
    "L": (int, "number of tokens L", _at_least(1)),
    "lam": (float, "inverse temperature lambda of the attention (at step 0 under --decay)", _POSITIVE),
    "gamma": (
        float,
        "standard deviation gamma of the informative token (sqrt(1/2): same expected norm as the others)",
        _POSITIVE,
    ),
    "eps": (float, "standard deviation eps of the label noise", _NON_NEGATIVE),
    "seed": (int, "PRNG seed: the same seed and options give the same numbers", _at_least(0)),
}


def _option(parser, flag: str, kind, default, text: str, allowed: _Allowed | None = None, **kwargs) -> None:
    """Add `flag`; its allowed values are appended to its help and checked by `main` (None is not checked)."""
    parser.add_argument(flag, type=kind, default=default, help=f"{text}; {allowed.text}" if allowed else text, **kwargs)
    if allowed is not None:
        parser.get_default("checks")[flag[2:].replace("-", "_")] = (flag, allowed)


def _task_options(parser, command: str, d_minimum: int = 2, **defaults) -> None:
    """Add the task's options named in `defaults` (with those defaults), then --out and --progress."""
    for name, default in defaults.items():
        kind, text, allowed = _TASK_OPTIONS[name]
        _option(parser, f"--{name}", kind, default, text, _at_least(d_minimum) if name == "d" else allowed)
    parser.add_argument(
        "--out", default=f"flowsim-out/{command}", help="folder of the results, created if needed (docs/results.md)"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="phase timings and progress bars on stderr; if neither is given (default: %(default)s), "
        "only when stderr is a terminal",
    )


def _schedule_options(parser, clock: str, default: float) -> None:
    _option(
        parser,
        "--decay",
        float,
        default,
        f"lambda schedule lam / (1 + decay * step), step = t / {clock}; 0 keeps lambda fixed",
        _NON_NEGATIVE,
    )


def _init(text: str):
    """--init: "sphere", "manifold", or five comma-separated overlaps kappa,nu,theta,eta,rho."""
    if text in slr.INITIALISATIONS:
        return text
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 5:
        raise argparse.ArgumentTypeError(
            f"must be sphere, manifold or five comma-separated overlaps kappa,nu,theta,eta,rho, got {text!r}"
        )
    return values


def _init_option(parser, what: str) -> None:
    parser.add_argument(
        "--init",
        type=_init,
        default="sphere",
        help=f"{what}: sphere (k, v uniform on the sphere), manifold (on M, SPEC.md section 6) or "
        "realizable overlaps kappa,nu,theta,eta,rho",
    )


def _engine_option(parser, text: str) -> None:
    parser.add_argument("--engine", choices=tuple(_ENGINES), default="overlaps", help=text)


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line and exit status 2, without the usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


_POPULATION_DEFAULTS = dict(
    d=_POPULATION.d, L=_POPULATION.L, lam=_POPULATION.lam, gamma=_POPULATION.gamma, eps=0.0, seed=0
)
_SGD_DEFAULTS = dict(d=_SGD.d, L=_SGD.L, lam=_SGD.lam, gamma=_SGD.gamma, eps=_SGD.eps, seed=0)


def _demo_options(parser) -> None:
    _task_options(parser, "demo", d_minimum=3, **_POPULATION_DEFAULTS)
    _option(parser, "--bayes-samples", int, 4096, "Monte Carlo samples of the Bayes risk", _at_least(2))
    _option(parser, "--sgd-d", int, _SGD.d, "dimension of the SGD run", _at_least(5))
    _option(parser, "--sgd-steps", int, _SGD.steps, "steps of the SGD run", _at_least(1))
    _option(parser, "--sgd-seeds", int, 8, "seeds of the SGD run", _at_least(1))
    _option(parser, "--verify-d", int, _SGD.d, "dimension of the convergence check", _at_least(3))
    _option(parser, "--verify-n", int, 8, "starts per initialisation and setting of the check", _at_least(1))


def _derive_options(parser) -> None:
    _task_options(parser, "derive")


def _flow_options(parser) -> None:
    _task_options(parser, "flow", **_POPULATION_DEFAULTS)
    _schedule_options(parser, "alpha", _POPULATION.decay)
    _option(parser, "--alpha", float, _POPULATION.alpha, "step size that maps steps to flow time (--decay)", _POSITIVE)
    _init_option(parser, "initial overlaps")
    _option(parser, "--n", int, 16, "number of trajectories", _at_least(1))
    t_max = _POPULATION.alpha * _POPULATION.steps
    _option(parser, "--t-max", float, t_max, "integration horizon (the paper's 20000 steps of 4e-3)", _POSITIVE)
    _option(parser, "--saves", int, 201, "saved times, evenly spaced in [0, t-max]", _at_least(2))
    parser.add_argument(
        "--solver", choices=_SOLVERS, default="tsit5", help="explicit Tsit5, or implicit Kvaerno5 for stiff flows"
    )
    _option(parser, "--max-steps", int, _FLOW_MAX_STEPS, "solver steps per trajectory before it fails", _at_least(1))


def _portrait_options(parser) -> None:
    _task_options(parser, "portrait", d_minimum=3, **_POPULATION_DEFAULTS)
    _option(parser, "--trajectories", int, 8, "sample trajectories drawn from starts on M", _at_least(0))
    _option(parser, "--t-max", float, 200.0, "horizon of the sample trajectories", _POSITIVE)
    _option(parser, "--grid", int, 41, "streamline grid points per side", _at_least(2))
    parser.add_argument("--basins", action="store_true", help="also draw the basin map of the 5-D flow")
    _option(parser, "--basin-n", int, 400, "starts of the basin map", _at_least(1))
    parser.add_argument(
        "--basin-init", choices=slr.INITIALISATIONS, default="sphere", help="initialisation of the basin map's starts"
    )
    _option(parser, "--basin-t-max", float, 500.0, "horizon of the basin map's trajectories", _POSITIVE)


def _sgd_run_options(parser, seeds: int) -> None:
    """The SGD run's options shared by `sgd` and `compare`, at the paper's defaults."""
    _schedule_options(parser, "lr", _SGD.decay)
    _init_option(parser, "initialisation of every seed")
    _option(parser, "--lr", float, _SGD.alpha, "SGD step size; flow time t = lr * step", _POSITIVE)
    _option(parser, "--steps", int, _SGD.steps, "SGD steps", _at_least(1))
    _option(parser, "--batch", int, _SGD.batch, "samples per step", _at_least(1))
    _option(parser, "--log-every", int, 1000, "log every this many steps (must divide --steps)", _at_least(1))
    _option(parser, "--seeds", int, seeds, "independent runs", _at_least(1))
    _engine_option(
        parser,
        "online SGD as the exact chain on the five overlaps (cost independent of d; d >= 5, online mode only) "
        "or with vectors in R^d",
    )


def _sgd_options(parser) -> None:
    _task_options(parser, "sgd", **_SGD_DEFAULTS)
    _sgd_run_options(parser, seeds=30)
    parser.add_argument(
        "--mode",
        choices=slr.MODES,
        default="online",
        help="fresh samples each step, a fixed dataset of --n samples, or the exact population gradient "
        "(dataset and population need --engine rd)",
    )
    _option(parser, "--n", int, None, "dataset size for --mode dataset (a multiple of --batch)", _at_least(1))
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64", help="precision in R^d")


def _compare_options(parser) -> None:
    _task_options(parser, "compare", **_SGD_DEFAULTS)
    _sgd_run_options(parser, seeds=8)
    parser.add_argument(
        "--reference", choices=slr.REFERENCES, default="flow", help="the gradient flow, or the PGD map at the same lr"
    )
    _option(parser, "--attractor-tol", float, slr.ATTRACTOR_TOL, "end-point distance for 'same attractor'", _POSITIVE)


def _verify_options(parser) -> None:
    _task_options(parser, "verify", d_minimum=3, d=_POPULATION.d, L=_POPULATION.L, seed=0)
    _option(parser, "--n", int, 64, "starts per initialisation and setting", _at_least(1))
    _option(parser, "--t-max", float, 1000.0, "integration horizon", _POSITIVE)
    _option(parser, "--tol", float, 1e-3, "max-norm distance to +-(k*, v*) counted as converged", _POSITIVE)
    _option(parser, "--min-share", float, 0.99, "share of starts on M that must converge", _SHARE)
    _option(parser, "--saves", int, _VERIFY_SAVES, "saved times (resolution of the time to converge)", _at_least(2))


def _reproduce_options(parser) -> None:
    _task_options(parser, "reproduce", seed=0)
    parser.add_argument("--quick", action="store_true", help="reduced lengths (6000 population, 2000 SGD steps)")
    _option(parser, "--seeds", int, 30, "runs per experiment", _at_least(1))
    parser.add_argument(
        "--only", nargs="+", choices=tuple(_EXPERIMENTS), metavar="NAME", help=f"only these: {', '.join(_EXPERIMENTS)}"
    )
    _engine_option(
        parser,
        "every run on the five overlaps (the population PGD map, the online-SGD chain: seconds) or with vectors "
        "in R^d (to cross-check: minutes to hours)",
    )


def _check(args) -> None:
    """Every option with allowed values (`_option`) within them; ValueError naming the first that is not."""
    for name, (flag, allowed) in args.checks.items():
        value = getattr(args, name)
        if value is not None and not allowed.accepts(value):
            raise ValueError(f"{flag} must be {allowed.text}, got {value!r}")
