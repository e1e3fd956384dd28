"""The `flowsim` command line.

Every computing command writes into its --out folder: the numbers as tidy CSV tables, figures as
PNG and PDF, and run.json (parameters, seed, versions, timings, files, status); docs/results.md
describes every file. Exit status: 0 when the run succeeded; 1 on a numerical failure (the
results computed until then are written, run.json says where it happened) or when `verify`'s
claim fails; 2 on invalid input (one line on stderr, nothing computed).

Option values are checked before anything is compiled; JAX, matplotlib and SymPy work happens
inside the commands.
"""

import argparse
import sys

from flowsim.cli._commands import _compare, _demo, _derive, _flow, _portrait, _reproduce, _sgd, _verify
from flowsim.cli._options import (
    _check,
    _compare_options,
    _demo_options,
    _derive_options,
    _flow_options,
    _Parser,
    _portrait_options,
    _reproduce_options,
    _sgd_options,
    _verify_options,
)

__all__ = ["main"]


#: name, what it does (its --help), the function that runs it, the function that adds its options.
_COMMANDS = (
    (
        "demo",
        "the tour in about a minute: baseline risks, the phase portrait on M, the paper's SGD run against the "
        "gradient flow (overlap engine), and the convergence check of `verify` with few starts",
        _demo,
        _demo_options,
    ),
    (
        "derive",
        "derive every equation with SymPy (about 10 s) into --out, print them and compare them with the "
        "installed package's",
        _derive,
        _derive_options,
    ),
    (
        "flow",
        "integrate the projected gradient flow on the five overlaps from n starts; write the trajectories",
        _flow,
        _flow_options,
    ),
    (
        "portrait",
        "phase portrait of the flow on M = {theta = eta = rho = 0} with its fixed points; optionally the basins "
        "of the 5-D flow's attractors",
        _portrait,
        _portrait_options,
    ),
    (
        "sgd",
        "train (k, v) by SGD (online, on a fixed dataset, or population PGD) from many seeds; defaults: the "
        "paper's SGD run",
        _sgd,
        _sgd_options,
    ),
    (
        "compare",
        "run online SGD and compare it with the gradient flow from the same starts: deviations and overlay; "
        "defaults: the paper's SGD run",
        _compare,
        _compare_options,
    ),
    (
        "verify",
        "integrate the flow from many starts at the paper's settings and check the convergence claims "
        "(exit status 1 if 'almost every start on M converges to +-(k*, v*)' fails)",
        _verify,
        _verify_options,
    ),
    (
        "reproduce",
        "run the paper's five reference experiments (SPEC.md section 6): summary table and the four-panel "
        "figure of each",
        _reproduce,
        _reproduce_options,
    ),
)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="flowsim",
        description="Training dynamics of a simplified attention layer on single-location regression.",
        epilog="Exit status: 0 ok, 1 numerical failure (results kept) or a failed claim, 2 invalid input. "
        "Set JAX_COMPILATION_CACHE_DIR to a folder to reuse compiled programs between runs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, text, run, add_options in _COMMANDS:
        parser_of_command = commands.add_parser(
            name, help=text, description=text, formatter_class=argparse.ArgumentDefaultsHelpFormatter
        )
        parser_of_command.set_defaults(run=run, checks={})
        add_options(parser_of_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `flowsim` command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        _check(args)
        if args.progress is None:
            args.progress = sys.stderr.isatty()
        return args.run(args)
    except ValueError as error:
        print(f"flowsim {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"flowsim {args.command}: interrupted (the files written so far are complete)", file=sys.stderr)
        return 130
