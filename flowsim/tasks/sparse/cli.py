"""The command line of sparse variable creation: the scaling-law sweep and the ERM limit."""

import math

import numpy as np

from flowsim._checks import POSITIVE, at_least
from flowsim.cli import _parts as parts
from flowsim.cli._options import Command, comma_separated, option, output_options
from flowsim.cli._tables import format_table
from flowsim.tasks import sparse

__all__ = ["COMMANDS", "DESCRIPTION"]

DESCRIPTION = "sparse variable creation: learning an s-sparse AND with one attention head (Edelman et al., ICML 2022)"


def _sweep_options(parser) -> None:
    option(
        parser,
        "--Ts",
        comma_separated(at_least(2)),
        ",".join(map(str, sparse.DEFAULT_TS)),
        "input lengths T, comma-separated",
    )
    option(parser, "--s", int, 3, "support size of the AND", at_least(1))
    parser.add_argument(
        "--learners", nargs="+", choices=sparse.LEARNERS, default=list(sparse.LEARNERS), help="learners swept"
    )
    option(
        parser,
        "--mlp-Ts",
        comma_separated(at_least(2)),
        ",".join(map(str, sparse.MLP_TS)),
        "the MLP's input lengths (it needs samples growing like T)",
    )
    option(
        parser,
        "--mlp-span",
        float,
        sparse.MLP_SPAN,
        "the MLP's search span (its largest m over its smallest)",
        POSITIVE,
    )
    option(parser, "--seeds", int, 8, "runs per sample size", at_least(1))
    option(parser, "--candidates", int, 6, "sample sizes per round of the search", at_least(1))
    option(parser, "--rounds", int, 3, "rounds of the search", at_least(1))
    option(
        parser, "--span", float, 8.0, "the head's search span: its largest m over its smallest, log2 C(T, s)", POSITIVE
    )
    option(parser, "--steps", int, 1000, "full-batch Adam steps per run", at_least(1))
    option(parser, "--lr", float, 0.01, "Adam's step size", POSITIVE)
    option(parser, "--erm-trials", int, 200, "trials of the ERM identifiability per T", at_least(1))
    parser.add_argument(
        "--quick", action="store_true", help="T = 16, 64, 256 (the MLP: 16, 32, 64), 4 seeds, 2 rounds: a smoke run"
    )
    output_options(parser, "sparse sweep")


def _sweep(args) -> int:
    import jax

    record = parts.record(args)
    quick = ((16, 64, 256), (16, 32, 64), 4, 2)
    Ts, mlp_Ts, seeds, rounds = quick if args.quick else (args.Ts, args.mlp_Ts, args.seeds, args.rounds)
    what = f"m*(T) of {', '.join(args.learners)} (head at T = {', '.join(map(str, Ts))}), {seeds} seeds"
    with record.phase("sweep", what):
        result = sparse.sweep(
            jax.random.key(args.seed), Ts, s=args.s, learners=tuple(args.learners), learner_Ts={"mlp": mlp_Ts},
            spans={"head": args.span, "mlp": args.mlp_span}, erm_trials=args.erm_trials, log=record.log,
            seeds=seeds, candidates=args.candidates, rounds=rounds, steps=args.steps, lr=args.lr,
            log_every=math.gcd(args.steps, max(1, args.steps // 50)),
        )  # fmt: skip
    record.summary["seconds_per_learner"] = result.seconds
    table = sparse.sweep_table(result)
    record.write_csv("critical.csv", table)
    fits = [
        (learner, name, fit.law, f"{fit.a:.4g}", f"{fit.b:.4g}", f"{fit.r2:.4f}", f"{np.abs(fit.residuals).max():.3g}")
        for learner, learner_fits in result.fits.items()
        for name, fit in learner_fits.items()
    ]
    if fits:
        columns = ("learner", "fit", "law", "a", "b", "r2", "max_abs_residual")
        record.write_csv("fits.csv", {c: [row[i] for row in fits] for i, c in enumerate(columns)})
    parts.save(record, sparse.sweep_figure(result), "sweep")
    rows = zip(
        table["learner"], table["T"], table["critical_m"], table["interval_low"], table["interval_high"],
        table["erm_median"], [f"{x:.3g}" for x in table["information_limit"]], strict=True,
    )  # fmt: skip
    print(format_table(("learner", "T", "m*", "low", "high", "ERM m50", "log2 C(T,s)"), rows))
    if fits:
        print()
        print(format_table(("learner", "fit", "law", "a", "b", "R^2", "max |residual|"), fits))
    return parts.finish(record)


#: name, what it does (its --help), the function that runs it, the function that adds its options.
COMMANDS = (
    Command(
        "sweep",
        "the critical sample size m*(T) of one attention head (and optionally the MLP) over T, against the "
        "information limit and ERM identifiability, with fits against ln T, T and a power of T",
        _sweep,
        _sweep_options,
    ),
)
