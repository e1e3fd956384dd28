"""`flowsim heads ...`: several attention heads on data with several informative locations (docs/heads.md).

One command of single-location regression (`HEADS`, in `slr.cli.COMMANDS`) whose actions are its subcommands:

- `flowsim heads diagram`: the population flow's phase diagram of specialisation over lam0 x d.
- `flowsim heads reproduce`: Marion et al.'s two-head experiment (their appendix E.3) in R^d from many seeds, the
  outcome shares beside their 20 runs, and the population flow from the same starts. Resumable: each block of
  --block seeds, and the flow, is a unit of the run's folder.
"""

import argparse
import math

from flowsim._checks import NOISE, NON_NEGATIVE, POSITIVE, SCALE, Allowed, InvalidInput, at_least
from flowsim.commands import parts
from flowsim.commands.options import (
    Command,
    OneOf,
    Parser,
    comma_separated,
    estimated,
    option,
    output_options,
    quick_option,
)
from flowsim.commands.tables import format_table

__all__ = ["HEADS"]

#: A threshold of the outcome rule (`_heads_outcome.check_threshold`).
_THRESHOLD = Allowed("a number in the open interval (0, 1)", lambda x: 0 < x < 1)


def _problem(args):
    """The `slr.HeadsProblem` of the options, after the checks the options alone cannot make."""
    from flowsim.schedules import InverseTimeDecay
    from flowsim.tasks import slr
    from flowsim.tasks.slr._heads_problem import HeadsProblem

    if args.locations > args.L:
        raise InvalidInput(
            f"--locations must be at most --L = {args.L} (each sequence holds S distinct informative positions), "
            f"got {args.locations}"
        )
    smallest = 2 * args.locations + 2 * args.heads
    if args.d < smallest:
        raise InvalidInput(
            f"--d must be at least 2 --locations + 2 --heads = {smallest} (the targets and the heads), got {args.d}"
        )
    data = slr.marion_slr(args.d, args.L, args.gamma, args.eps, locations=args.locations)
    lam = InverseTimeDecay(args.lam0, args.decay, args.lr, until=args.until)
    return HeadsProblem(data, heads=args.heads, lam=lam, d=args.d)


def _reproduce_work(args):
    from flowsim.tasks.slr._heads_sgd import heads_sgd_work

    problem = _problem(args)
    names = {"seeds": "--seeds", "steps": "--steps", "batch": "--batch", "log_every": "--log-every"}
    logs = args.steps // args.log_every
    # The memory of a block of seeds (they run one block at a time), the time of them all.
    needs = heads_sgd_work(problem, min(args.block, args.seeds), args.steps, args.batch, logs, args.draws, names)[0]
    costs = heads_sgd_work(problem, args.seeds, args.steps, args.batch, logs, args.draws, names)[1]
    if not (args.no_flow or args.shared_noise):
        costs.append(problem.flow_cost(args.seeds, args.lr * args.steps, "lower --seeds, or add --no-flow"))
    return needs, costs


def _share_rows(source: str, shares) -> dict:
    columns = ("outcome", "count", "n", "share", "low", "high", "confidence", "authors", "authors_n", "authors_share",
               "authors_low", "authors_high", "inside", "p_value")  # fmt: skip
    table = {"source": [source] * len(shares)}
    for column in columns:
        table[column] = [getattr(row, column) for row in shares]
    return table


def _states_table(states, outcomes, names) -> dict:
    from flowsim.tasks.slr._heads_outcome import OUTCOMES

    table = {"seed": list(range(len(states)))}
    table["outcome"] = [OUTCOMES[code] if code >= 0 else "not ended" for code in outcomes]
    for i, name in enumerate(names):
        table[name] = states[:, i]
    return table


def _reproduce(args) -> int:
    import jax
    import numpy as np

    from flowsim.tasks.slr._heads_outcome import reproduce_heads

    problem = _problem(args)
    record = parts.record(args)
    flow = not (args.no_flow or args.shared_noise)
    quirk = ", the authors' shared noise" if args.shared_noise else ""
    what = f"{args.seeds} seeds x {args.steps} steps{quirk}" + (", then the flow from their starts" if flow else "")
    print(f"Several heads: {problem.describe()}; SGD lr {args.lr:g}, batch {args.batch}; {what}")
    with record.phase("reproduce", what):
        result = reproduce_heads(
            problem, jax.random.key(args.seed), seeds=args.seeds, block=args.block, lr=args.lr, steps=args.steps,
            batch=args.batch, log_every=args.log_every, k_threshold=args.k_threshold, v_threshold=args.v_threshold,
            flow=flow, draws=args.draws, shared_noise=args.shared_noise, unit=record.unit, log=record.log, force=True,
        )  # fmt: skip
    names = problem.state_names
    record.write_csv("initial_states.csv", _states_table(result.initial, result.outcomes, names))
    record.write_csv("sgd_final_states.csv", _states_table(result.final, result.outcomes, names))
    shares = _share_rows("sgd", result.shares)
    if flow:
        record.write_csv("flow_final_states.csv", _states_table(result.flow_final, result.flow_outcomes, names))
        for column, values in _share_rows("flow", result.flow_shares).items():
            shares[column] += values
    record.write_csv("shares.csv", shares)
    for seed in np.flatnonzero(~result.ended):
        record.fail(f"seed {seed}: SGD did not end with finite heads", seed=int(seed))
    ended = int(result.ended.sum())
    record.summary.update(
        seeds=args.seeds,
        ended=ended,
        sgd_shares={row.outcome: row.share for row in result.shares},
        flow_shares={row.outcome: row.share for row in result.flow_shares} if flow else None,
    )
    header = ("source", "outcome", "count", "share", "95% interval", "authors (of 20)", "theirs inside", "Fisher p")
    rows = [
        (source, row.outcome, f"{row.count}/{row.n}", f"{row.share:.3f}", f"[{row.low:.3f}, {row.high:.3f}]",
         f"{row.authors}/{row.authors_n}", "yes" if row.inside else "no", f"{row.p_value:.3g}")
        for source, listed in (("SGD", result.shares), ("flow", result.flow_shares or []))
        for row in listed
    ]  # fmt: skip
    print(f"\nOutcomes (thresholds |<k_h, k*_j>| >= {result.k_threshold:g}, |<v_h, v*_j>| >= {result.v_threshold:g})")
    print(format_table(header, rows))
    return parts.finish(record)


def _data_options(parser) -> None:
    """The informative tokens' spread and the label noise, the authors' by default."""
    option(parser, "--gamma", float, math.sqrt(0.5), "standard deviation of an informative token", SCALE)
    option(parser, "--eps", float, 0.1, "label noise", NOISE)


def _schedule_options(parser) -> None:
    """The authors' schedule of lambda: lam0 / (1 + decay * step), frozen from step --until."""
    option(parser, "--decay", float, 2e-4, "lambda schedule lam0 / (1 + decay * step)", NON_NEGATIVE)
    option(parser, "--until", int, 25_000, "the step from which lambda stays fixed", at_least(0))


def _threshold_options(parser) -> None:
    """The outcome rule's thresholds (`classify_heads`)."""
    option(parser, "--k-threshold", float, 0.3, "a head takes location j if |<k_h, k*_j>| reaches it", _THRESHOLD)
    option(parser, "--v-threshold", float, 0.3, "... and |<v_h, v*_j>| reaches this", _THRESHOLD)


def _reproduce_options(parser) -> None:
    output_options(parser, "heads", seed=0, resumable=True)  # the folder is named by the command, `heads`
    option(parser, "--seeds", int, 200, "SGD runs, each from its own start and batches", at_least(1))
    option(parser, "--block", int, 50, "seeds per unit of work (a resumed run reads finished blocks back)", at_least(1))
    option(parser, "--heads", int, 2, "H, the heads", at_least(1))
    option(parser, "--locations", int, 2, "S, the informative locations (at most --L)", at_least(1))
    option(parser, "--d", int, 80, "dimension of the tokens (the spike is sqrt(d/2))", at_least(1))
    option(parser, "--L", int, 10, "tokens per sequence", at_least(1))
    _data_options(parser)
    option(parser, "--lam0", float, 2.0, "inverse temperature at step 0", SCALE)
    _schedule_options(parser)
    option(parser, "--lr", float, 1e-3, "SGD's step (the flow's clock is t = lr * step)", POSITIVE)
    option(parser, "--batch", int, 5, "sequences per SGD step", at_least(1))
    option(parser, "--steps", int, 100_000, "SGD steps (a multiple of --log-every)", at_least(1))
    option(parser, "--log-every", int, 1000, "log the order parameters every this many steps", at_least(1))
    _threshold_options(parser)
    parser.add_argument(
        "--draws", type=OneOf(("float32", "float64")), default="float32", help="dtype the tokens are drawn in"
    )
    parser.add_argument("--no-flow", action="store_true", help="leave out the population flow from the same starts")
    parser.add_argument(
        "--shared-noise",
        action="store_true",
        help="draw SGD's batches with the authors' code's quirk, one noise vector shared by the informative tokens "
        "(not the model; no flow)",
    )
    quick_option(parser, "a smoke run", seeds="4", steps="2000", block="2")


def _diagram_problem(args, lam0: float, d: int):
    from flowsim.tasks.slr._heads_phase import two_head_problem

    return two_head_problem(lam0, d, args.L, args.gamma, args.eps, args.decay, args.lr, args.until)


def _diagram_work(args):
    problem = _diagram_problem(args, args.lams[0], args.ds[0])
    cells = len(args.lams) * len(args.ds)
    return [], [problem.flow_cost(cells * args.n, args.lr * args.steps, "lower --n, or take fewer --lams or --ds")]


def _diagram(args) -> int:
    import numpy as np

    from flowsim.tasks.slr._heads_outcome import OUTCOMES
    from flowsim.tasks.slr._heads_phase import specialisation_diagram, specialisation_figure

    record = parts.record(args)
    what = f"{len(args.lams)} values of lam0 x {len(args.ds)} of d, {args.n} starts each"
    with record.phase("diagram", what):
        diagram = specialisation_diagram(
            args.lams, args.ds, n=args.n, key=args.seed, L=args.L, gamma=args.gamma, eps=args.eps, rate=args.decay,
            lr=args.lr, until=args.until, steps=args.steps, saves=args.saves, k_threshold=args.k_threshold,
            v_threshold=args.v_threshold, unit=record.unit, log=record.log,
        )  # fmt: skip
    median = diagram.median_plateau()
    lam_column, d_column = np.repeat(diagram.lams, diagram.ds.size), np.tile(diagram.ds, diagram.lams.size)
    shares = {name: diagram.shares[..., c].ravel() for c, name in enumerate(OUTCOMES)}
    record.write_csv("diagram.csv", {"lam0": lam_column, "d": d_column, **shares, "median_plateau": median.ravel()})
    parts.save(record, specialisation_figure(diagram), "diagram")
    header = ("lam0", "d", *OUTCOMES, "median plateau")
    rows = [
        (f"{lam:g}", str(d), *(f"{diagram.shares[i, j, c]:.2f}" for c in range(len(OUTCOMES))), f"{median[i, j]:.3g}")
        for i, lam in enumerate(diagram.lams)
        for j, d in enumerate(diagram.ds)
    ]
    print(f"Where the flow of two heads ends from {args.n} uniform starts, t = {diagram.times[-1]:g} ({what})")
    print(format_table(header, rows))
    return parts.finish(record)


def _diagram_options(parser) -> None:
    output_options(parser, "heads", seed=0, resumable=True)
    option(parser, "--lams", comma_separated(SCALE), "0.5,1,2,4", "initial inverse temperatures lam0, a,b,c")
    option(parser, "--ds", comma_separated(_DIMENSION), "20,40,80,160,320", "dimensions d, a,b,c")
    option(parser, "--n", int, 50, "uniform starts a cell", at_least(1))
    option(parser, "--L", int, 10, "tokens per sequence (at least 2: the two locations)", at_least(2))
    _data_options(parser)
    _schedule_options(parser)
    option(parser, "--lr", float, 1e-3, "the step that maps steps to flow time t = lr * step", POSITIVE)
    option(parser, "--steps", int, 100_000, "the horizon in steps (t = lr * steps)", at_least(1))
    option(parser, "--saves", int, 201, "saved times, evenly spaced (the plateau's resolution)", at_least(2))
    _threshold_options(parser)
    quick_option(parser, "a smoke run", lams="2", ds="20,80", n="8")


#: Dimensions of the diagram: the two heads and two locations need d >= 8.
_DIMENSION = Allowed("an integer in [8, 2**31 - 1]", lambda d: 8 <= d <= 2**31 - 1, integer=True)


#: The actions of `flowsim heads`: name, what it does, how it runs, its options.
_ACTIONS = (
    Command(
        "reproduce",
        "Marion et al.'s two-head experiment (H = S = 2, d = 80, L = 10, projected SGD, lam0 = 2 decaying to step "
        "25 000, 100 000 steps) from many seeds: outcome shares (specialised, collapsed, partial, none) with exact "
        "binomial intervals beside their 5/20 and 10/20, and the population flow from the same starts; resumable",
        estimated(_reproduce, _reproduce_work),
        _reproduce_options,
    ),
    Command(
        "diagram",
        "a phase diagram of specialisation: the share of each outcome of the two-head population flow from uniform "
        "starts over a grid of lam0 x d, and the time the flow takes to leave the symmetric plateau; one resumable "
        "unit per cell",
        estimated(_diagram, _diagram_work),
        _diagram_options,
    ),
)


def _heads(args) -> int:
    return next(action.run for action in _ACTIONS if action.name == args.heads_action)(args)


def _heads_options(parser) -> None:
    actions = parser.add_subparsers(
        dest="heads_action", metavar="{" + ",".join(a.name for a in _ACTIONS) + "}", required=True, parser_class=Parser
    )
    for action in _ACTIONS:
        sub = actions.add_parser(
            action.name,
            help=action.help,
            description=action.help,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        sub.set_defaults(checks={})  # its own options' checks, which `flowsim.commands.options.check` reads
        action.add_options(sub)


HEADS = Command(
    "heads",
    "several attention heads, several informative locations (docs/heads.md): `flowsim heads reproduce` runs the "
    "authors' two-head experiment, `flowsim heads diagram` the flow's phase diagram of specialisation",
    _heads,
    _heads_options,
)
