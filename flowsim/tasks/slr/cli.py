"""The command line of single-location regression: its options (defaults from the paper) and commands.

`flowsim.cli` builds the parser from `COMMANDS`; the shared parts (the run's record, portrait,
comparison, tables) are in the toolkit `flowsim.commands`. `flow` and `verify` take the model family too
(docs/follow-up-models.md): --data chooses the data model, --geometry the norms, and every option a chosen model
does not read is refused; `compare` runs the family's SGD in R^D against its flow; `portrait` takes Marion et al.'s
data only, and says why.
"""

import argparse
import functools
import json
import math
import sys
from dataclasses import dataclass

import numpy as np

from flowsim._checks import NOISE, NON_NEGATIVE, POSITIVE, SCALE, SHARE, Allowed, InvalidInput, at_least
from flowsim.commands import parts
from flowsim.commands.options import (
    Command,
    OneOf,
    comma_separated,
    estimated,
    follows,
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
from flowsim.tasks.slr._family import LONGEST
from flowsim.tasks.slr._own_maps import OWN_MAP, check_spec, loaded_digest, own_map
from flowsim.tasks.slr._problem import PARAMETERS
from flowsim.tasks.slr.heads_cli import HEADS
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


def _start(text: str):
    """The type of the flow's --init: a name of an initialisation, or a state of either geometry (5 or 7 numbers),
    checked against the task chosen before the run (`_given_start`)."""
    if text in ("sphere", "manifold", "small"):
        return text
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) not in (len(slr.OVERLAP_NAMES), len(slr.SEVEN)):
        raise argparse.ArgumentTypeError(
            f"must be sphere or manifold or {len(slr.OVERLAP_NAMES)} comma-separated values "
            f"{','.join(slr.OVERLAP_NAMES)} (--geometry unit), or small or {len(slr.SEVEN)} comma-separated values "
            f"{','.join(slr.SEVEN)} (--geometry free), got {text!r}"
        )
    return values


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


def _attention_option(parser, family: bool = False) -> None:
    """--attention; for a command that takes the family (`family`), its default follows --data."""
    parser.add_argument(
        "--attention",
        type=OneOf(tuple(slr.ATTENTION_MAPS), check_spec),  # a researcher's map: its form checked, loaded later
        default="erf",
        metavar="MAP",
        help=f"the attention weight map (docs/science.md section 7): one of {', '.join(slr.ATTENTION_MAPS)}, or a "
        f"researcher's own slr.AttentionMap as {OWN_MAP} (docs/own-attention-map.md); every map but erf takes its "
        "risk by a rule over the scores (flowsim.quadrature.default_rule)"
        + (
            "; with --data spiked or max, every map takes a variable L: it acts on each sequence's own tokens (a "
            "normalised map normalises over them)"
            if family
            else ""
        ),
    )
    if family:
        # The follow-up's models are those where softmax is the Bayes predictor's form (docs/follow-up-models.md).
        follows(parser, "--attention", "--data", {"marion": "erf", "spiked": "softmax", "max": "softmax"})


def _engine_option(parser, text: str) -> None:
    parser.add_argument("--engine", choices=slr.ENGINES, default="overlaps", help=text)


# ---------------------------------------------------------------------------------------------
# The model family's options (docs/follow-up-models.md): the data model and the geometry


#: The data models: Marion et al.'s, and the follow-up's spiked-SLR(nu) and max-SLR(nu) (Duranthon et al., 2026).
_DATA = ("marion", "spiked", "max")
_GEOMETRIES = ("unit", "free")
#: The options that only Marion et al.'s data reads, and those that only the follow-up's data models read.
_MARION_ONLY = ("--d", "--L", "--gamma", "--eps")
_FAMILY_ONLY = ("--nu", "--lengths", "--noise", "--D")
#: The dimension of the family's starts (`slr.FamilyProblem.D`: >= 4, a frame of k*, v* and room for k, v).
_STARTS_D = Allowed("an integer in [4, 2**31 - 1]", lambda D: 4 <= D <= 2**31 - 1, integer=True)
_FAMILY_DATA = "with --data spiked or max"
_DATA_TEXT = (
    "the data model (docs/follow-up-models.md): marion, Marion et al.'s (the relevant token N(sqrt(d/2) k*, gamma^2 "
    "I), L tokens: --d, --L, --gamma, --eps); spiked, spiked-SLR(nu) (the relevant token N(sqrt(nu) k*, I), the others "
    "N(0, I)); or max, max-SLR(nu) (every token N(0, I), the relevant one drawn as softmax_l(nu <x_l, k*>)): both of "
    "Duranthon et al. (ICLR 2026), read with --nu, --lengths, --noise and --D"
)


def _length_law(text: str) -> tuple[tuple[int, float], ...]:
    """The type of --lengths: "L", "L1,L2,..." (drawn uniformly) or "L1:P1,L2:P2,..." (P summing to 1).

    **Returns:** ((L, P(L)), ...) by increasing L, the form run.json keeps.
    """
    allowed = (
        f'must be one length ("2"), lengths drawn uniformly ("1,2,3") or lengths with their probabilities '
        f'("1:0.2,2:0.8", positive, summing to 1), each length an integer in [1, {LONGEST}]'
    )
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}: no length")
    parts = [part.strip() for part in text.split(",")]
    weighted = [":" in part for part in parts]
    try:
        if any(weighted) and not all(weighted):
            raise ValueError("give every length a probability, or none")
        pairs = [part.split(":") if ":" in part else (part, str(1 / len(parts))) for part in parts]
        lengths = [int(length) for length, _ in pairs]
        probabilities = [float(probability) for _, probability in pairs]
    except ValueError as error:
        why = str(error) if str(error).startswith("give") else "a length that is not an integer, or a missing one"
        raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}: {why}") from None
    if any(weighted):
        total = sum(probabilities)
        if not all(math.isfinite(p) and p > 0 for p in probabilities) or abs(total - 1) > 1e-9:
            raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}: the probabilities sum to {total:g}")
        probabilities = [p / total for p in probabilities]  # exactly 1 for slr.Lengths, from a sum within 1e-9
    if len(set(lengths)) != len(lengths):
        raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}: a length given twice")
    law = tuple(sorted(zip(lengths, probabilities, strict=True)))
    try:
        slr.Lengths(*zip(*law, strict=True))
    except InvalidInput as error:
        raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}: {error}") from None
    return law


def _family_options(parser, geometry: bool = True) -> None:
    """--data and the options of the follow-up's data models; --geometry (unless the command fixes it: `geometry`),
    --ridge, and the starts' --D and --scale. Each refused where the model chosen does not read it."""
    _data_option(parser, _DATA_TEXT)
    option(parser, "--nu", float, 3.0, f"the signal nu of spiked-SLR(nu) and max-SLR(nu), {_FAMILY_DATA}", NON_NEGATIVE)
    option(
        parser,
        "--lengths",
        _length_law,
        "2",
        f"the law of the sequence length L, {_FAMILY_DATA}: one length (2), lengths drawn uniformly (1,2,3) or "
        "lengths with their probabilities (1:0.2,2:0.8); every attention map takes a variable L (it acts on each "
        "sequence's own tokens; a normalised map normalises over them), and the risk averages over the law",
    )
    option(parser, "--noise", float, 0.0, f"the label noise Delta, y = <x_j, v*> + Delta xi, {_FAMILY_DATA}", NOISE)
    read_only(parser, _FAMILY_ONLY[:3], _FAMILY_DATA, "take --data spiked or max", _family_data)
    if geometry:
        parser.add_argument(
            "--geometry",
            choices=_GEOMETRIES,
            help="unit: k, v on the unit sphere, the scores times --lam (Marion et al.'s; the state: the five overlaps "
            "kappa,nu,theta,eta,rho); free: k, v free vectors with a ridge (r/2)(|k|^2 + |v|^2), r = --ridge (the "
            "follow-up's; the state: the seven order parameters a,b,c,e,Q_k,Q_v,Q_kv)",
        )
        follows(parser, "--geometry", "--data", {"marion": "unit", "spiked": "free", "max": "free"})
        read_only(
            parser,
            ["--lam"],
            "with --geometry unit (free norms have no temperature: |k| is it)",
            "take --geometry unit",
            lambda args: args.geometry == "unit",
        )
    free = "with --geometry free" if geometry else _FAMILY_DATA
    option(parser, "--ridge", float, 0.0, f"the ridge r on |k|^2 + |v|^2, {free}", NON_NEGATIVE)
    read_only(parser, ["--ridge"], free, f"take {free[5:]}", lambda args: _geometry(args) == "free")
    option(
        parser,
        "--D",
        int,
        100,
        f"dimension D of the vectors the starts are drawn in, {_FAMILY_DATA} (the risk does not depend on it; "
        "with --data marion the starts' dimension is --d)",
        _STARTS_D,
    )
    option(parser, "--scale", float, 0.1, f"sigma of the small starts, k, v ~ N(0, sigma^2 I / D), {free}", POSITIVE)
    read_only(parser, ["--D"], _FAMILY_DATA, "take --data spiked or max", _family_data)
    read_only(parser, ["--scale"], free, f"take {free[5:]}", lambda args: _geometry(args) == "free")
    marion_only = [flag for flag in _MARION_ONLY if flag[2:] in parser.get_default("checks")]
    read_only(
        parser,
        marion_only,
        "with --data marion (Marion et al.'s data; the follow-up's take --nu, --lengths, --noise)",
        "take --data marion",
        lambda args: not _family_data(args),
    )


def _data_option(parser, text: str) -> None:
    """--data, said by `text` (a command that takes Marion et al.'s data only says why, and `_marion_only` refuses)."""
    parser.add_argument("--data", choices=_DATA, default="marion", help=text)


def _family_data(args) -> bool:
    """Whether the options choose one of the follow-up's data models (spiked- or max-SLR)."""
    return args.data != "marion"


def _geometry(args) -> str:
    """--geometry; for a command without it (verify), the data model's own: unit for marion, free for the others."""
    return getattr(args, "geometry", None) or ("unit" if args.data == "marion" else "free")


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
    _attention_option(parser, family=True)
    _task_options(parser, "flow", **_POPULATION_DEFAULTS)
    _family_options(parser)
    schedule_option(parser, "alpha", _POPULATION.decay)
    read_only(
        parser,
        ["--decay"],
        "with --data marion and --geometry unit (the schedule of slr.Problem's lam; the family's unit norms take a "
        "fixed --lam)",
        "take --data marion and --geometry unit",
        lambda args: not _family_data(args) and args.geometry == "unit",
    )
    option(parser, "--alpha", float, _POPULATION.alpha, "step size that maps steps to flow time (--decay)", POSITIVE)
    read_only(
        parser, ["--alpha"], "with --decay above 0 (the schedule's clock)", "add --decay", lambda args: args.decay > 0
    )
    parser.add_argument(
        "--init",
        type=_start,
        help=f"the starts: with --geometry unit, {_INIT_TEXT}; with --geometry free, small (k, v ~ N(0, sigma^2 I / "
        "D), sigma = --scale) or realizable order parameters a,b,c,e,Q_k,Q_v,Q_kv (their Gram matrix with k*, v* "
        "positive semidefinite)",
    )
    follows(parser, "--init", "--geometry", {"unit": "sphere", "free": "small"})
    option(parser, "--n", int, 16, "number of trajectories", at_least(1))
    t_max = _POPULATION.alpha * _POPULATION.steps
    option(
        parser,
        "--t-max",
        float,
        None,
        "integration horizon (with --geometry unit, the paper's 20000 steps of 4e-3; free norms grow |k| slowly: "
        "from small starts, spiked-SLR(3) at L = 2 is within 1e-3 of softmax's Bayes point by t = 500)",
        POSITIVE,
    )
    follows(parser, "--t-max", "--geometry", {"unit": f"{t_max:g}", "free": "1000"})
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
    _data_option(
        parser,
        "the data model: the portrait takes Marion et al.'s only; spiked and max are refused, since the family's "
        "plane k || k*, v || v* (slr.FamilyOnPlane) takes its rule at every grid point: about 5 minutes at a 21 x 21 "
        "grid on 2 cores (in Python: flowsim.figures.phase_portrait(slr.FamilyProblem(...)); their flow: flowsim "
        "flow --data spiked or max)",
    )
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
    _attention_option(parser, family=True)
    _task_options(parser, "compare", **_SGD_DEFAULTS)
    _family_options(parser)
    _sgd_run_options(parser, seeds=8)
    parser.add_argument(
        "--reference",
        choices=REFERENCES,
        default="flow",
        help="the gradient flow, or the PGD map at the same lr (the map: Marion et al.'s task on the sphere only)",
    )
    option(parser, "--attractor-tol", float, ATTRACTOR_TOL, "end-point distance for 'same attractor'", TOLERANCE)
    marion = "with --data marion and --geometry unit (slr.Problem's SGD; the family's draws its own starts, small "
    marion += "with free norms or on the spheres with unit norms, in R^D, and has no schedule)"
    read_only(parser, ["--init", "--engine", "--decay"], marion, "take --data marion and --geometry unit", _marion_task)


def _marion_task(args) -> bool:
    """Whether the options choose Marion et al.'s task on the sphere (`slr.Problem`), not the family's."""
    return not _family_data(args) and _geometry(args) == "unit"


def _verify_options(parser) -> None:
    _task_options(parser, "verify", resumable=True, d=_POPULATION.d, L=_POPULATION.L)
    _attention_option(parser, family=True)
    _family_options(parser, geometry=False)
    option(parser, "--n", int, 64, "starts per initialisation and setting", at_least(1))
    option(parser, "--t-max", float, 1000.0, "integration horizon", POSITIVE)
    option(
        parser,
        "--tol",
        float,
        1e-3,
        "max-norm distance to the target counted as converged (with --data spiked or max the target is softmax's "
        "exact Bayes point, while the flow ends at the rule's minimum: at L = 3 about 6e-3 from it in Q_k with the "
        "default rule; raise --tol there)",
        TOLERANCE,
    )
    option(
        parser,
        "--min-share",
        float,
        0.99,
        "share of the claim's starts (on M; the small ones with --data spiked or max) that must converge",
        SHARE,
    )
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


def _optima_options(parser) -> None:
    output_options(parser, "optima", seed=0, resumable=True)
    names = slr.FIGURE_TWO_NAMES
    settings = ", ".join(f"{name} ({text})" for name, text in names.items())
    names_option(parser, "--settings", tuple(names), ",".join(names), f"the data models: {settings}")
    names_option(parser, "--maps", slr.FIGURE_TWO_MAPS, ",".join(slr.FIGURE_TWO_MAPS), "the maps compared")
    nus = ",".join(f"{nu:g}" for nu in slr.FIGURE_TWO_NUS)
    option(parser, "--nus", comma_separated(POSITIVE), nus, "the grid of nu, a,b,c")
    option(parser, "--starts", int, 8, "BFGS starts of each optimum's search", at_least(1))
    option(parser, "--n", int, 8, "small starts of the flow in each cell", at_least(1))
    option(parser, "--t-end", float, 1e5, "horizon of the flow", POSITIVE)
    option(parser, "--tol", float, 0.05, "size of a fixed point's neighbourhood (relative, per coordinate)", SHARE)
    quick_option(parser, "a smoke run", nus="1,4", starts="2", n="2")


_POWER = Allowed("a power of 2 >= 2", lambda n: n >= 2 and not n & (n - 1), integer=True)


# ---------------------------------------------------------------------------------------------
# Shared steps of the commands


def _problem(args, decay: float = 0.0, clock: float = 1.0) -> slr.Problem:
    """The task from the options; with decay > 0, lam follows the paper's schedule lam / (1 + decay * step),
    step = t / clock."""
    lam = InverseTimeDecay(args.lam, decay, clock) if decay > 0 else args.lam
    attention = _attention(getattr(args, "attention", "erf"))
    return slr.Problem(d=args.d, L=args.L, lam=lam, gamma=args.gamma, eps=args.eps, attention=attention)


def _data_model(args) -> slr.DataModel:
    """The data model of --data (Marion et al.'s from --d, --L, --gamma, --eps; the follow-up's from --nu,
    --lengths, --noise)."""
    if not _family_data(args):
        return slr.marion_slr(args.d, args.L, args.gamma, args.eps)
    lengths = slr.Lengths(*zip(*args.lengths, strict=True))
    model = slr.spiked_slr if args.data == "spiked" else slr.max_slr
    return model(args.nu, lengths, args.noise)


def _task(args, decay: float = 0.0, clock: float = 1.0) -> "slr.Problem | slr.FamilyProblem":
    """The task the options choose: `slr.Problem` for Marion et al.'s data on the sphere (`_problem`, as before the
    family), else `slr.FamilyProblem` (data model, map, geometry, the starts' D and sigma)."""
    free = _geometry(args) == "free"
    if not (free or _family_data(args)):
        return _problem(args, decay, clock)
    if not _family_data(args) and args.L > LONGEST:
        raise InvalidInput(
            f"--L must be at most {LONGEST} with --geometry free (the family's risk takes a rule over the scores of "
            f"each length), got {args.L}"
        )
    geometry = slr.FreeNorms(args.ridge) if free else slr.UnitNorms(args.lam)
    D = args.D if _family_data(args) else args.d
    attention = _attention(args.attention)
    starts = {"scale": args.scale} if free else {}  # unit norms draw on the sphere: no sigma
    return slr.FamilyProblem(_data_model(args), attention, geometry, D=D, **starts)


def _given_start(init, task):
    """--init checked against the task: a name of its initialisations, or a state of its size that vectors realise
    (exit status 2 if not); Marion et al.'s overlaps as `_given_overlaps` checks them."""
    geometry = "free" if isinstance(task, slr.FamilyProblem) and task.free else "unit"
    if isinstance(init, str):
        if init not in task.initialisations:
            raise InvalidInput(
                f"--init {init} does not start the flow with --geometry {geometry}: take "
                f"{' or '.join(task.initialisations)}, or {task.dimension} values {','.join(task.state_names)}"
            )
        return init
    if len(init) != task.dimension:
        raise InvalidInput(
            f"--init with --geometry {geometry} takes {task.dimension} values {','.join(task.state_names)}, got "
            f"{len(init)}"
        )
    if isinstance(task, slr.Problem):
        return _given_overlaps(init)
    problems = task.unrealizable(np.array([init]))
    if problems:
        raise InvalidInput(f"--init {','.join(f'{x:g}' for x in init)} {problems[0]}")
    return np.asarray(init, dtype=float)


def _refusing(check, run):
    """`run` (a command, with its estimate) after `check(args)` (or None), which refuses a combination of options
    before the estimate and the run's folder; the options the chosen model does not read are then None, so that
    run.json records none of them (a value given for one was refused when parsed)."""

    @functools.wraps(run)
    def checked(args) -> int:
        if check is not None:
            check(args)
        for flag in _unread(args):
            if hasattr(args, flag[2:]):
                setattr(args, flag[2:], None)
        return run(args)

    return checked


def _unread(args) -> tuple[str, ...]:
    """The options of the model family that the chosen data model and geometry do not read."""
    unread = (*_MARION_ONLY, "--decay", "--alpha") if _family_data(args) else _FAMILY_ONLY
    if _geometry(args) == "free":
        return (*unread, "--lam", "--decay", "--alpha")
    return (*unread, "--ridge", "--scale")


def _flow_refusals(args) -> None:
    # Marion et al.'s task on the sphere is checked as before the family: by its estimate, then by the run.
    if _family_data(args) or args.geometry == "free":
        _given_start(args.init, _task(args))


def _marion_only(command: str, why: str):
    """The refusal of the follow-up's data by a command that takes Marion et al.'s only, saying `why`."""

    def refuse(args) -> None:
        if _family_data(args):
            raise InvalidInput(
                f"--data {args.data}: {command} {why}: take --data marion, or see the flow alone: flowsim flow --data "
                f"{args.data}"
            )

    return refuse


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

    problem = _task(args, args.decay, args.alpha)
    init = _given_start(args.init, problem)
    record = _record(args)

    from flowsim import figures

    if isinstance(init, str):
        m0 = np.asarray(problem.initial_states(jax.random.key(args.seed), args.n, init))
    else:
        m0 = np.broadcast_to(init, (args.n, problem.dimension))
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
    pairs = problem.projection_pairs or _FAMILY_PAIRS[_geometry(args)]
    parts.save(record, figures.trajectory_projections(solved, problem, pairs), "trajectories")
    init_text = args.init if isinstance(init, str) else "given"
    if isinstance(problem, slr.Problem):
        print(
            f"Gradient flow: d = {problem.d}, L = {problem.L}, lam = {problem.schedule().describe()}, "
            f"gamma = {problem.gamma:.4g}, eps = {problem.eps:g}, init = {init_text}"
            f", {args.n} trajectories to t = {args.t_max:g}\n"
        )
    else:
        print(f"Gradient flow of the SLR family: {problem.describe()}; init = {_start_text(args, problem, init)}, "
              f"{args.n} trajectories to t = {args.t_max:g}\n")  # fmt: skip
    names = problem.state_names
    risk = np.asarray(solved.observed)[:, -1]
    rows = [
        (
            i,
            endpoints["status"][i],
            f"{endpoints['t_final'][i]:.6g}",
            *(f"{endpoints[name][i]:+.4f}" for name in names),
            f"{risk[i]:.6g}",
        )
        for i in range(args.n)
    ]
    print(format_table(("trajectory", "status", "t_final", *names, "risk"), rows))
    if isinstance(problem, slr.FamilyProblem):
        _print_targets(problem, solved)
    return parts.finish(record)


#: The pairs the flow's figure draws for the family (`slr.FamilyProblem` names none): the plane k || k*, v || v*
#: and the norms, then the coordinates off the invariant set M' = {b = c = Q_kv = 0}.
_FAMILY_PAIRS = {
    "free": (("a", "e"), ("Q_k", "Q_v"), ("b", "Q_kv")),
    "unit": slr.Problem.projection_pairs,
}


def _start_text(args, problem, init) -> str:
    if not isinstance(init, str):
        return "given"
    if init == "small":
        return f"small (k, v ~ N(0, {problem.scale:g}^2 I / D), D = {problem.D})"
    return f"{init} (D = {problem.D})"


def _print_targets(problem: slr.FamilyProblem, solved) -> None:
    """Where the family's flow should end: its target (softmax's Bayes point, or (k*, v*) on the sphere) and each
    end point's distance to it; with the data model's Bayes risk."""
    from flowsim._task import distance_to_targets

    target = ", ".join(f"{x:g}" for x in problem.targets[0])
    distance = distance_to_targets(problem, np.asarray(solved.y_final))
    bayes = float(slr.family_bayes_risk(problem.data))
    print(
        f"\n{problem.target_label} ({', '.join(problem.state_names)}) = ({target}); max-norm distance of each end "
        f"point to it (up to the symmetries): {', '.join(f'{x:.3g}' for x in distance)}; Bayes risk {bayes:.6g}"
    )


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

    if not _marion_task(args):
        return _compare_family(args)
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


def _check_log_every(args) -> None:
    """--log-every must divide --steps (SGD logs at whole multiples of it), for `sgd` and `compare` alike."""
    if args.steps % args.log_every:
        raise InvalidInput(f"--log-every {args.log_every} must divide --steps {args.steps}")


def _compare_refusals(args) -> None:
    if not _marion_task(args) and args.reference == "map":
        raise InvalidInput(
            "--reference map is the PGD map of Marion et al.'s task on the sphere: take --reference flow with the "
            "family's data or free norms"
        )
    _check_log_every(args)


def _compare_family(args) -> int:
    """Online SGD in R^D of the family's task (`slr.run_family_sgd`) against its flow from the same starts."""
    import jax

    problem = _task(args)
    args.init = args.engine = args.decay = None  # not read (`_marion_task`): run.json records none
    record = _record(args)
    what = f"online SGD in R^{problem.D}, {args.steps} steps x {args.seeds} seeds"
    with record.phase("sgd", what):
        run = slr.run_family_sgd(
            problem, jax.random.key(args.seed), lr=args.lr, steps=args.steps, batch=args.batch,
            log_every=args.log_every, seeds=args.seeds,
        )  # fmt: skip
    comparison = parts.run_comparison(
        record, run, "", progress=args.progress, reference="flow", attractor_tol=args.attractor_tol
    )
    print(f"{what}: {problem.describe()}, lr = {args.lr:g}, batch = {args.batch}\n")
    print(comparison.table())
    return parts.finish(record)


def _sgd_setting(args) -> _SGDSetting:
    """The SGD options of `sgd` and `compare`, checked together."""
    _check_log_every(args)
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

    if _family_data(args):
        return _verify_family(args)
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


def _verify_family(args) -> int:
    """The follow-up's question as a claim: almost every small start's flow (free norms) reaches softmax's Bayes
    point, for the data model and map of the options."""
    import jax

    from flowsim.verify import Setting, verify_convergence

    problem = _task(args)
    record = _record(args)
    setting = Setting(f"{args.data}-SLR({args.nu:g}), {problem.data.lengths!r}", problem)
    with record.phase("verify", f"flow from {args.n} small starts, D = {problem.D}"):
        report = verify_convergence(
            [setting],
            inits=("small",),
            claim_inits=("small",),
            claim=f"almost every small start converges to {problem.target_label}",
            key=jax.random.key(args.seed),
            n=args.n,
            t_max=args.t_max,
            n_saves=args.saves,
            tol=args.tol,
            min_share=args.min_share,
            progress=args.progress,
            unit=record.unit,
        )
    print(f"The SLR family: {problem.describe()}\n")
    parts.write_verify(record, report, problem, "")
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


def _optima(args) -> int:
    settings = tuple(slr.FIGURE_TWO_NAMES[name] for name in args.settings)
    record = _record(args)
    what = f"{len(settings)} settings x {len(args.maps)} maps x {len(args.nus)} values of nu"
    with record.phase("optima", what):
        result = slr.figure_two(
            settings, args.maps, args.nus, key=args.seed, starts=args.starts, n=args.n, t_end=args.t_end,
            tol=args.tol, progress=False, log=record.log, unit=record.unit,
        )  # fmt: skip
    text = slr.figure_two_text(result)
    record.write_text("optima.md", text)
    record.write_text("optima.json", json.dumps(slr.figure_two_records(result), indent=1))
    parts.save(record, slr.figure_two_figure(result), "optima")
    print(text)
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
        "integrate the gradient flow from n starts and write the trajectories: Marion et al.'s projected flow on the "
        "five overlaps, or with --data spiked or max (the follow-up's models, Duranthon et al. 2026) the flow of the "
        "seven order parameters a,b,c,e,Q_k,Q_v,Q_kv (free norms; or the five overlaps with --geometry unit)",
        _refusing(_flow_refusals, estimated(_flow, _estimates.COMMANDS["flow"])),
        _flow_options,
    ),
    Command(
        "portrait",
        "phase portrait of the flow on M = {theta = eta = rho = 0} with its fixed points; optionally the basins "
        "of the 5-D flow's attractors (Marion et al.'s data only: see --data)",
        _refusing(
            _marion_only("portrait", "draws Marion et al.'s M only (the family's plane: see flowsim portrait --help)"),
            estimated(_portrait, _estimates.COMMANDS["portrait"]),
        ),
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
        "defaults: the paper's SGD run; with --data spiked or max (or --geometry free), SGD in R^D of the follow-up's "
        "models against the flow of the seven order parameters (or the five overlaps with --geometry unit)",
        _refusing(_compare_refusals, estimated(_compare, _estimates.COMMANDS["compare"])),
        _compare_options,
    ),
    Command(
        "verify",
        "integrate the flow from many starts at the paper's settings and check the convergence claims "
        "(exit status 1 if 'almost every start on M converges to +-(k*, v*)' fails); with --data spiked or max, "
        "the follow-up's question for the map chosen, with free norms: 'almost every small start converges to "
        "softmax's Bayes point' (k = sqrt(nu) k* or nu k*, v = v*; a map other than softmax does not reach it)",
        _refusing(None, estimated(_verify, _estimates.COMMANDS["verify"])),
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
        "optima",
        "the follow-up's Figure 2 with dynamics (Duranthon et al., ICLR 2026): in spiked-SLR and max-SLR, each map's "
        "population optimum over the seven order parameters against the Bayes risk, and beside it where the gradient "
        "flow goes from small random starts (the share of starts at each fixed point, the time to softmax's Bayes "
        "point); one resumable unit per cell",
        estimated(_optima, _estimates.COMMANDS["optima"]),
        _optima_options,
    ),
    Command(
        "reproduce",
        "run the paper's five reference experiments (docs/science.md section 6): summary table and the four-panel "
        "figure of each",
        estimated(_reproduce, _estimates.COMMANDS["reproduce"]),
        _reproduce_options,
    ),
    HEADS,
)
