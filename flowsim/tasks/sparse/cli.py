"""The command line of sparse variable creation: the scaling-law sweep and the ERM limit."""

import argparse
import math
import sys

from flowsim._checks import POSITIVE, at_least
from flowsim._memory import format_seconds
from flowsim.commands import parts
from flowsim.commands.options import (
    Command,
    Parser,
    comma_separated,
    estimated,
    names_option,
    option,
    output_options,
    quick_option,
    read_only,
)
from flowsim.commands.tables import format_table
from flowsim.tasks import sparse
from flowsim.tasks.sparse import _estimates, _train

__all__ = ["COMMANDS", "DESCRIPTION"]

DESCRIPTION = (
    "sparse variable creation: the samples an attention head, the paper's one-layer Transformer and an l1 control need "
    "to learn an s-sparse AND of T bits (Edelman et al., ICML 2022)"
)


def _budgets(text: str) -> tuple:
    """The type of --budgets: comma-separated numbers of steps (>= 1) or "converged"."""
    parts_ = tuple(part.strip() for part in text.split(","))
    if not all(part == "converged" or (part.isdigit() and int(part) >= 1) for part in parts_):
        raise argparse.ArgumentTypeError(
            f"must be comma-separated training budgets, each a number of steps >= 1 or 'converged', got {text!r}"
        )
    return tuple(part if part == "converged" else int(part) for part in parts_)


def _trains(args) -> bool:
    """Whether the sweep trains a learner (a step size, budgets), not only the l1 control (a solver to tolerance)."""
    return not set(args.learners) <= {"l1"}


def _sweep_options(parser) -> None:
    option(
        parser,
        "--Ts",
        comma_separated(_estimates.LENGTH),
        ",".join(map(str, sparse.DEFAULT_TS)),
        "input lengths T of the head and the control, comma-separated",
    )
    option(parser, "--s", int, 3, "support size of the AND", at_least(1))
    names_option(
        parser,
        "--learners",
        sparse.LEARNERS,
        "l1,head",
        "learners swept, in the order given: one attention head (head), the MLP on the bits, the paper's one-layer "
        "Transformer, the l1 logistic regression (the positive control, a learner known to need log T samples: "
        "first by default, so that the protocol is shown able to see log T before a learner's law is read)",
    )
    parser.add_argument(
        "--budgets",
        type=_budgets,
        default=",".join(map(str, sparse.BUDGETS)),
        help="training budgets, comma-separated: numbers of optimiser steps, or 'converged' (until the training "
        f"loss is <= {sparse.LOSS_THRESHOLD:g} or stops improving, capped at --max-steps; the control is a solver "
        "run to its tolerance: measured once)",
    )
    option(parser, "--max-steps", int, 16_000, "the cap of a 'converged' budget, in optimiser steps", at_least(1))
    option(
        parser,
        "--transformer-Ts",
        comma_separated(_estimates.LENGTH),
        ",".join(map(str, sparse.TRANSFORMER_TS)),
        "the Transformer's input lengths (about ten heads' cost per sample)",
    )
    option(
        parser,
        "--mlp-Ts",
        comma_separated(_estimates.LENGTH),
        ",".join(map(str, sparse.MLP_TS)),
        "the MLP's input lengths (it needs samples growing like T)",
    )
    option(
        parser,
        "--mlp-span",
        float,
        sparse.MLP_SPAN,
        "the MLP's search span (its largest m over its smallest)",
        _estimates.SPAN,
    )
    option(parser, "--seeds", int, 10, "runs per sample size", at_least(1))
    option(
        parser,
        "--repeats",
        int,
        sparse.DEFAULT_REPEATS,
        "independent searches per learner, budget and T: m* is the median of their m*, its interval over them (the "
        "range below 6 searches), and the fits weigh each T by their spread; 1: one search, its bootstrap interval",
        at_least(1),
    )
    option(parser, "--candidates", int, 6, "sample sizes per round of the search", at_least(1))
    option(parser, "--rounds", int, 3, "rounds of the search", at_least(1))
    option(
        parser,
        "--span",
        float,
        8.0,
        "the search span of the head, the control and the Transformer: the largest m over the smallest, log2 C(T, s)",
        _estimates.SPAN,
    )
    option(
        parser,
        "--lr",
        float,
        None,
        "the step size of the head, the MLP and the Transformer (default: each learner's, sparse.DEFAULTS: "
        "Adam 0.01 for the head and the MLP, AdamW 0.001 with weight decay 1e-4 for the Transformer)",
        POSITIVE,
    )
    # The control is a solver run to its tolerance: no step size, no budget.
    read_only(
        parser,
        ["--lr", "--budgets"],
        "for a trained learner (head, mlp or transformer)",
        "add one to --learners",
        _trains,
    )
    read_only(
        parser,
        ["--max-steps"],
        "with a 'converged' budget of a trained learner",
        "add converged to --budgets (and a trained learner to --learners)",
        lambda args: "converged" in args.budgets and _trains(args),
    )
    read_only(parser, ["--mlp-span"], "with the MLP", "add mlp to --learners", lambda args: "mlp" in args.learners)
    option(parser, "--erm-trials", int, 200, "trials of the ERM identifiability per T", at_least(1))
    quick_option(parser, "a smoke run", Ts="16,64,256", mlp_Ts="16,32,64", transformer_Ts="16,32,64", seeds="4",
                 rounds="2", repeats="2")  # fmt: skip
    output_options(parser, "sparse sweep", resumable=True)


def _sweep(args) -> int:
    import jax

    record = parts.record(args)
    if _is_default(args):
        print(f"flowsim {args.command}: {_extension(args)}", file=sys.stderr, flush=True)
    Ts, mlp_Ts, transformer_Ts, seeds, rounds = args.Ts, args.mlp_Ts, args.transformer_Ts, args.seeds, args.rounds
    what = f"m*(T) of {', '.join(args.learners)} at budgets {', '.join(map(str, args.budgets))}, {seeds} seeds"
    what += f", {args.repeats} searches each" if args.repeats > 1 else ""
    options = {} if args.lr is None else {learner: {"lr": args.lr} for learner in ("head", "mlp", "transformer")}
    with record.phase("sweep", what):
        result = sparse.sweep(
            jax.random.key(args.seed), Ts, s=args.s, learners=tuple(args.learners), budgets=args.budgets,
            learner_Ts={"mlp": mlp_Ts, "transformer": transformer_Ts}, spans={"mlp": args.mlp_span},
            options=options, erm_trials=args.erm_trials, repeats=args.repeats, log=record.log, unit=record.unit,
            seeds=seeds, candidates=args.candidates, rounds=rounds, span=args.span, max_steps=args.max_steps,
            log_every=_log_every(args.budgets, args.max_steps),
        )  # fmt: skip
    record.summary["seconds_per_learner"] = result.seconds
    table = sparse.sweep_table(result)
    record.write_csv("critical.csv", table)
    rows = zip(
        table["learner"], table["budget"], table["T"], table["critical_m"], table["interval_low"],
        table["interval_high"], [f"{x:.0%}" for x in table["converged_share"]], table["max_steps_run"],
        table["erm_median"], [f"{x:.3g}" for x in table["information_limit"]], table["searches_m"], strict=True,
    )  # fmt: skip
    header = ("learner", "budget", "T", "m*", "low", "high", "converged", "most steps", "ERM m50", "log2 C(T,s)",
              "each search's m*")  # fmt: skip
    print(format_table(header, rows))
    if result.fits:
        selection = sparse.selection_table(result)
        record.write_csv("selection.csv", selection)
        record.summary["verdicts"] = {
            f"{learner}, {budget}": sparse.verdict(fits) for (learner, budget), fits in result.fits.items()
        }
        intervals = [
            [f"{v:.4g} [{low:.3g}, {high:.3g}]" for v, low, high in zip(*columns, strict=True)]
            for columns in ([selection[k + end] for end in ("", "_low", "_high")] for k in ("a", "b"))
        ]
        rows = zip(
            selection["learner"], selection["budget"], selection["law"], *intervals,
            [f"{x:.1f}" for x in selection["delta_aic"]], [f"{x:.2g}" for x in selection["p_value"]],
            selection["verdict"], strict=True,
        )  # fmt: skip
        print()
        print(format_table(("learner", "budget", "law", "a [95 %]", "b [95 %]", "dAIC", "p", "verdict"), rows))
    if "transformer" in args.learners:
        record.write_csv("paper.csv", sparse.paper_table(result))
    parts.save(record, sparse.sweep_figure(result), "sweep")
    return parts.finish(record)


def _is_default(args) -> bool:
    """Whether the run sweeps the default lengths, learners and budgets (other options may differ)."""
    return (
        tuple(args.Ts) == sparse.DEFAULT_TS
        and tuple(args.learners) == ("l1", "head")
        and tuple(args.budgets) == sparse.BUDGETS
    )


def _sweep_parser() -> Parser:
    """`flowsim sparse sweep`'s own parser (a task does not import the front end that assembles every command's)."""
    parser = Parser(prog="flowsim sparse sweep")
    parser.set_defaults(checks={})
    _sweep_options(parser)
    return parser


def _extension(args) -> str:
    """The command that extends the default sweep to the paper's scale (T to 4096, the Transformer at the same lengths,
    the budgets 1000 steps and to convergence), with the same search, and its estimate on this machine (and on a GPU,
    when this is the CPU)."""
    lengths = ",".join(map(str, sparse.EXTENDED_TS))
    budgets = ",".join(map(str, sparse.EXTENDED_BUDGETS))
    # The same search as this run's (its units are the extension's at the same T): the options given differently from
    # their defaults, and always the seeds, searches and seed.
    default = _sweep_parser().parse_args([])
    same = [
        f"--{name.replace('_', '-')} {getattr(args, name)}"
        for name in ("seeds", "repeats", "seed", "candidates", "rounds", "span", "s", "erm_trials", "lr", "max_steps")
        if name in ("seeds", "repeats", "seed") or getattr(args, name) != getattr(default, name)
    ]
    command = (f"sparse sweep --Ts {lengths} --learners l1 head transformer --transformer-Ts {lengths} "
               f"--budgets {budgets} {' '.join(same)}")  # fmt: skip
    extended = _sweep_parser().parse_args(command.split()[2:])
    here = _estimates.seconds(extended)
    gpu = "" if _train.on_accelerator() else f"; on one GPU about {format_seconds(_estimates.seconds(extended, True))}"
    return (
        f"this is the default sweep; to extend it to the paper's scale (T to 4096, the Transformer, training to "
        f"convergence): flowsim {command} --yes, estimated at about {format_seconds(here)} here{gpu} (its units "
        "include this run's: read the two folders together with sparse.read_sweep)"
    )


def _log_every(budgets, max_steps) -> int:
    """The logging interval: about 50 logs over the shortest budget, dividing every budget, the cap and (with a
    "converged" budget) the patience over which a run's loss must keep falling."""
    steps = [b for b in budgets if b != "converged"] + [max_steps]
    every = math.gcd(*steps, *([_train.PATIENCE] if "converged" in budgets else []))
    return math.gcd(every, max(1, min(steps) // 50)) if every > 1 else 1


#: name, what it does (its --help), the function that runs it, the function that adds its options.
COMMANDS = (
    Command(
        "sweep",
        "the critical sample size m*(T) of each learner (one attention head, the l1 control; optionally the "
        "paper's one-layer Transformer and an MLP) and training budget over T, each the median of --repeats "
        "independent searches, against the information limit and ERM identifiability, with the laws a, a + b ln T, "
        "a + b T and a T^b compared by fits weighted by the searches' spread and AIC; resumable (--resume). The "
        "default, the control and the head at T = 16 ... 256, 1000 steps, 3 searches each, is estimated within 20 "
        "minutes on 2 CPU cores (measured 6.7 minutes); before it starts it names the command that extends it (T to "
        "4096, the Transformer, training to convergence) with that command's estimate. Measured (docs/science.md, "
        "section 8): the control's m* stops growing beyond T = 256 while the head's keeps growing (at 1000 steps by "
        "some 80 samples per unit of ln T); on a GPU the paper's Transformer (--learners transformer "
        "--transformer-Ts 16,...,4096 --seeds 20, 1000 steps) needs m* = a + b ln T with b = 19.5 [18.3, 20.8], a "
        "log T law, in about 5 minutes of an H200 for one search per T, and more training does not lower its m* "
        "(T = 1024: 95 at 1000 and 4000 steps and to convergence)",
        estimated(_sweep, _estimates.sweep),
        _sweep_options,
    ),
)
