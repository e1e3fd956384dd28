"""The memory and time of single-location regression's work, estimated before it starts (`flowsim._memory`).

Each size a command or an entry point takes is counted here once: the API's functions check their own work
(`advantage_work`, `bayes_work`), and the command line checks each command's whole run (`COMMANDS`) before
its folder is made. The per-unit costs were measured on the 2-core CPU of BENCHMARKS.md (section "Estimates
before work", on a machine shared with other work: load average 9 to 13 on its 2 cores), those of the chain and
of the rule's flows from the measurements made alone on the machine that BENCHMARKS.md records (named at each):
the estimates err long.
"""

import math

from flowsim._checks import InvalidInput
from flowsim._memory import Cost, Need, float_bytes

__all__ = [
    "COMMANDS",
    "advantage_work",
    "bayes_work",
    "family_flow_cost",
    "family_table_cost",
    "rule_points",
    "sgd_steps",
    "sgd_work",
]

#: Seconds of the exact online-SGD chain on the overlaps per (seed x step x sample x token): the paper's SGD run,
#: 15.3 s alone on the 2 cores for 30 seeds x 200 000 steps x batch 5 x L 10 (BENCHMARKS.md, "Estimates before
#: work"): 5.1e-8, rounded up (compilation included).
CHAIN_SECONDS = 1e-7
#: Seconds of online SGD with vectors in R^d per (seed x step x sample x token x dimension).
VECTOR_SECONDS = 2.5e-8
#: Seconds of the Bayes risk's Monte Carlo per (sample x token x dimension).
BAYES_SECONDS = 2e-7
#: Seconds of the population PGD map per (seed x step).
MAP_SECONDS = 1.1e-5
#: Seconds of the gradient flow per trajectory (erf attention, to t = 1000: 66 s for 64), and per (trajectory x
#: rule point x unit of time) for each map whose risk is taken by a rule over the L scores: the full `flowsim
#: advantage` run, alone on the 2 cores, 7 x 64 flows to t = 100 with 4096 Sobol' points per map, its SGD runs
#: included (BENCHMARKS.md, "Estimates before work"): linear 40 s, 2.2e-7;
#: softmax 61 s, 3.3e-7; sigmoid 77 s, 4.2e-7; softplus 84 s, 4.6e-7; relu, the slowest (its kinks cost steps),
#: 383 s, 2.1e-6. Rounded up; a researcher's map, whose cost is unknown, is counted as the slowest.
FLOW_SECONDS = 1.0
RULE_FLOW_SECONDS = {"linear": 2.5e-7, "softmax": 3.5e-7, "sigmoid": 4.5e-7, "softplus": 5e-7, "relu": 2.1e-6}
#: Values kept per saved state of a trajectory (the state, its risk, and the table's columns), in two copies.
_SAVED_VALUES = 24
#: Float64 values held per point of the portrait's streamline grid at its peak: the grid and the field (NumPy's
#: copies of them, the device's blocks), the line widths, and matplotlib's streamplot's masked copies of the field
#: in grid units and its speed. Measured (benchmarks/portrait_memory.py; BENCHMARKS.md, "The portrait's memory
#: against its estimate"): the peak resident memory above a run at the default grid is 15.8, 17.1 and 19.1 values
#: per point at grids 2500, 4000 and 6000 (NumPy's temporaries grow with the arrays; peak / estimate 1.17, 1.01,
#: 1.02); 8 before, 2.5x short.
STREAMLINE_VALUES = 20


#: Seconds of the SLR family's flow (`slr.FamilyProblem`: Rodas5 from small starts to convergence, about the same at
#: any horizon) per (trajectory x rule point x token), summed over the length law, by token law; and the fixed
#: seconds per length of the law (compiling its rule's risk and Jacobian). Measured for softmax at nu = 3 from 4 and
#: 16 small starts on the 2-core CPU shared with other work (load average 6 to 10, so that wall time was about three
#: times the CPU time): spiked-SLR, L = 2 (8192 point-tokens): 33.5 s and 61.8 s, 59 Rodas5 steps; L = 3: 39.8 s and
#: 95.9 s; max-SLR, L = 2: 69.7 s and 401.6 s, 255 to 274 steps (its rule's minimum is further from the start);
#: L ~ uniform{1, 2, 3} (20544): 157 s from 4. Rounded up.
FAMILY_FLOW_SECONDS = {"spiked": 5e-4, "max": 3.5e-3}
FAMILY_COMPILE_SECONDS = 30.0
#: Seconds of the family's flow with its moments from a table (`slr.tabulate_moments`) per trajectory, and once per
#: run (the table's build and the solve's compilation). Measured (benchmarks/family_flow_speed.py; BENCHMARKS.md, "The
#: SLR family's flow"): spiked-SLR(3), L = 3, 2.2 ms a start and 14.6 s once, under a load of 4 to 6. Rounded up.
FAMILY_TABLE_SECONDS, FAMILY_TABLE_ONCE = 3e-3, 20.0


def family_table_cost(trajectories: int, advice: str) -> Cost:
    """The time of `trajectories` flows of the family with tabulated moments (to convergence, from small starts)."""
    seconds = FAMILY_TABLE_ONCE + FAMILY_TABLE_SECONDS * trajectories
    return Cost(f"the flow with tabulated moments ({trajectories} trajectories)", seconds, advice)


#: Values held per (state x rule point x token) while a chunk of states' Jacobians is taken (`slr.FamilyProblem`
#: maps over states 64 at a time): each token's six moments, with a tangent per order parameter (7 + 1). Counted,
#: not measured.
_FAMILY_CHUNK, _FAMILY_VALUES = 64, 48


def _lower(*options: str | None) -> str:
    """The advice `lower a, b or c` of the options the user can change (None: one they cannot)."""
    named = [option for option in options if option]
    return f"lower {', '.join(named[:-1])} or {named[-1]}" if len(named) > 1 else f"lower {named[0]}"


def saved_need(what: str, trajectories: int, saves: int, advice: str) -> Need:
    """The memory of `trajectories` x `saves` saved states, their risks and their table."""
    return Need(
        f"the saved states ({what}: {trajectories} trajectories x {saves} saved times)",
        float_bytes(_SAVED_VALUES, trajectories, saves),
        advice,
    )


def rule_flow_seconds(attention: str | None) -> float:
    """Seconds per (trajectory x rule point x unit of time) of the flow of the map named `attention` (a built-in
    map's name; any other, or None, is counted as the slowest built-in map)."""
    return RULE_FLOW_SECONDS.get(attention, max(RULE_FLOW_SECONDS.values()))


def flow_cost(
    what: str,
    trajectories: int,
    rule_points: int | None,
    advice: str,
    t_max: float = 1000.0,
    attention: str | None = None,
) -> Cost:
    """The time of `trajectories` flows to `t_max` (each taking `rule_points` per risk if its map, named
    `attention`, is taken by a rule: `rule_flow_seconds`; erf's flows settle, and cost about the same to any
    horizon)."""
    each = FLOW_SECONDS if rule_points is None else rule_flow_seconds(attention) * rule_points * t_max
    return Cost(f"the flow ({what}: {trajectories} trajectories)", each * trajectories, advice)


def bayes_work(d: int, L: int, samples: int, names=None, batch: int = 4096) -> tuple[list, list]:
    """The memory and time of `bayes_risk`'s Monte Carlo (samples drawn `batch` at a time, every loss kept)."""
    names = {"samples": "n", "d": "d"} | (names or {})
    needs = [
        Need(f"the Bayes risk's losses ({samples} samples)", float_bytes(2, samples), _lower(names["samples"])),
        Need(
            f"a batch of the Bayes risk's samples ({batch} x L {L} x d {d}, three copies)",
            float_bytes(3, batch, L, d),
            _lower(names["d"]),
        ),
    ]
    costs = [
        Cost(
            f"the Bayes risk ({samples} samples x L {L} x d {d})",
            BAYES_SECONDS * samples * L * d,
            _lower(names["samples"], names["d"]),
        )
    ]
    return needs, costs


def sgd_work(engine: str, seeds: int, steps: int, batch: int, L: int, d: int, logs: int, names=None):
    """The time and memory of an online SGD run (the chain on the overlaps, or vectors in R^d): its logs and one
    step's random numbers (the chain's: about 2L + 3 per sample) or samples (in R^d)."""
    names = {"steps": "steps", "seeds": "seeds", "batch": "batch", "log_every": "log_every", "d": "d"} | (names or {})
    per_step = CHAIN_SECONDS * batch * L if engine == "overlaps" else VECTOR_SECONDS * batch * L * d
    needs = [
        Need(
            f"the logged values ({seeds} seeds x {logs + 1} logs x 8 values, twice)",
            float_bytes(16, seeds, logs + 1),
            _lower(names["seeds"]) if names["log_every"] is None else f"raise {names['log_every']}",
        ),
        Need(
            f"the random numbers of one step ({seeds} seeds x batch {batch} x {2 * L + 3} values, twice)",
            float_bytes(2, seeds, batch, 2 * L + 3),
            _lower(names["batch"], names["seeds"]),
        )
        if engine == "overlaps"
        else Need(
            f"the samples of one step ({seeds} seeds x batch {batch} x L {L} x d {d}, three copies)",
            float_bytes(3, seeds, batch, L, d),
            _lower(names["batch"], names["seeds"], names["d"]) + ", or use the overlap engine",
        ),
    ]
    costs = [
        Cost(
            f"SGD ({engine} engine: {seeds} seeds x {steps} steps x batch {batch})",
            per_step * seeds * steps,
            _lower(names["seeds"], names["batch"], names["steps"]),
        )
    ]
    return needs, costs


def sgd_steps(t_max: float, lr: float) -> int:
    """The SGD steps that reach the flow's time t_max at step size lr (at least one).

    **Raises:** `InvalidInput` where their number is not finite (lr = 1e-320: t_max / lr overflows).
    """
    ratio = t_max / lr
    if not math.isfinite(ratio):
        raise InvalidInput(
            f"t_max / lr = {ratio} SGD steps is not a finite number (t_max = {t_max:g}, lr = {lr:g}): raise lr"
        )
    return max(1, round(ratio))


def advantage_work(d, L, lams, maps, rule_maps, starts, t_max, lr, batch, rule_points, bayes_samples, names=None):
    """The memory and time of `statistical_advantage`: per map and lam a flow and an SGD run from `starts`, and the
    Bayes risk; `maps`: how many, `rule_maps` the names of those (all but erf) taking their risk by a rule of
    `rule_points` (`rule_flow_seconds`: a researcher's map as None, or by a name no built-in map has)."""
    names = {
        "starts": "starts",
        "steps": "t_max (or raise lr)",
        "lams": "lams",
        "d": "d",
        "rule_points": "rule",
        "bayes_samples": "bayes_samples",
        "maps": "attention",
    } | (names or {})
    steps = sgd_steps(t_max, lr)
    cells = maps * lams
    needs, costs = bayes_work(d, L, bayes_samples, {"samples": names["bayes_samples"], "d": names["d"]})
    needs += [
        Need(f"the starts ({starts} starts x d {d}, two vectors)", float_bytes(2, starts, d), _lower(names["starts"])),
        saved_need(f"{cells} runs of map and lam", starts, 4 * cells, _lower(names["starts"], names["lams"])),
    ]
    if rule_maps:
        needs.append(
            Need(
                f"the rule ({rule_points} points x L {L}, and the scores of a batch of starts)",
                float_bytes(4, rule_points, L, min(starts, 64)),
                _lower(names["rule_points"]),
            )
        )
    work = sgd_work(
        "overlaps", starts, steps, batch, L, d, 1,
        {"steps": names["steps"], "seeds": names["starts"], "batch": names.get("batch", "batch")},
    )  # fmt: skip
    needs.append(work[0][1])
    costs += [
        Cost(f"{cells} SGD runs: {work[1][0].what}", cells * work[1][0].seconds, work[1][0].advice),
        flow_cost(
            f"{cells} flows", (maps - len(rule_maps)) * lams * starts, None, _lower(names["starts"], names["lams"])
        ),
    ]
    if rule_maps:
        flows, trajectories = len(rule_maps) * lams, len(rule_maps) * lams * starts
        seconds = sum(map(rule_flow_seconds, rule_maps)) * rule_points * t_max * lams * starts
        what = f"the flow ({flows} flows of the maps taken by a rule: {trajectories} trajectories)"
        costs.append(Cost(what, seconds, _lower(names["starts"], names["lams"], names["maps"])))
    return needs, costs


def rule_points(L: int, points: int | None = None) -> int:
    """The points of `quadrature.default_rule(L, points)`, counted without drawing it."""
    from flowsim.quadrature import DEFAULT_SOBOL_POINTS, MAX_ORDER, MAX_PRODUCT_POINTS, MIN_ORDER

    order = min(MAX_ORDER, math.floor(MAX_PRODUCT_POINTS ** (1 / L) + 1e-9))
    return order**L if order >= MIN_ORDER else points or DEFAULT_SOBOL_POINTS


def _rule_points(args) -> int | None:
    """The points of the rule a non-erf map's risk takes (None for erf)."""
    if getattr(args, "attention", "erf") == "erf":
        return None
    return rule_points(args.L, getattr(args, "rule_points", None))


def _rule_needs(args) -> list:
    from flowsim.quadrature import SOBOL_DIMENSIONS

    points = _rule_points(args)
    if points is None:
        return []
    if args.L > SOBOL_DIMENSIONS:
        raise InvalidInput(
            f"--L must be at most {SOBOL_DIMENSIONS} with --attention {args.attention} (its risk is taken by a "
            f"Sobol' rule over the L scores, which has at most {SOBOL_DIMENSIONS} dimensions), got {args.L}"
        )
    return [
        Need(
            f"the rule over the scores ({points} points x L {args.L}, three copies)",
            float_bytes(3, points, args.L),
            "lower --L, or take --attention erf",
        )
    ]


def _family(args) -> bool:
    """Whether the options choose the SLR family's task (`slr.FamilyProblem`): the follow-up's data, or free norms."""
    data = getattr(args, "data", "marion")
    return data != "marion" or getattr(args, "geometry", None) == "free"


def _family_rules(args) -> list[tuple[int, int]]:
    """(L, the points of the rule at L) for each length of the family's length law (its default rules,
    `slr.FamilyProblem`'s: a rule over the L scores, or over 2L coordinates for max-SLR)."""
    data = getattr(args, "data", "marion")
    lengths = [(args.L, 1.0)] if data == "marion" else args.lengths
    return [(L, rule_points(2 * L if data == "max" else L)) for L, _ in lengths]


def _family_needs(args, states: int) -> list:
    rules = _family_rules(args)
    size = sum(points * L for L, points in rules)
    return [
        Need(
            f"the rule's moments of a chunk of {min(states, _FAMILY_CHUNK)} states ({size} rule points x tokens, "
            f"{_FAMILY_VALUES} values each)",
            float_bytes(_FAMILY_VALUES, min(states, _FAMILY_CHUNK), size),
            "lower --lengths",
        )
    ]


def family_flow_cost(args, what: str, trajectories: int, advice: str) -> Cost:
    """The time of `trajectories` flows of the family (to convergence: about the same at any horizon); a map other
    than softmax in the ratio of its flows' costs in Marion et al.'s task (`rule_flow_seconds`: erf, whose risk the
    family takes by a rule too, and a researcher's map, as the slowest)."""
    rules = _family_rules(args)
    size = sum(points * L for L, points in rules)
    law = FAMILY_FLOW_SECONDS["max" if getattr(args, "data", "marion") == "max" else "spiked"]
    each = law * rule_flow_seconds(args.attention) / RULE_FLOW_SECONDS["softmax"]
    seconds = FAMILY_COMPILE_SECONDS * len(rules) + each * trajectories * size
    return Cost(f"the flow ({what}: {trajectories} trajectories)", seconds, advice)


def _map_flow_cost(args, what: str, trajectories: int, advice: str, t_max: float) -> Cost:
    """`flow_cost` of the command's map (`--attention`) and its rule."""
    return flow_cost(what, trajectories, _rule_points(args), advice, t_max, args.attention)


def _flow(args):
    if _family(args):
        needs = [
            saved_need("--n x --saves", args.n, args.saves, _lower("--n", "--saves")),
            *_family_needs(args, args.n),
        ]
        return needs, [family_flow_cost(args, "--n", args.n, _lower("--n"))]
    needs = [saved_need("--n x --saves", args.n, args.saves, _lower("--n", "--saves")), *_rule_needs(args)]
    return needs, [_map_flow_cost(args, "--n", args.n, _lower("--n"), args.t_max)]


def _portrait(args):
    needs = [
        Need(f"the streamline grid ({args.grid} x {args.grid} points, {STREAMLINE_VALUES} values each)",
             float_bytes(STREAMLINE_VALUES, args.grid, args.grid), _lower("--grid")),
        saved_need("--trajectories", args.trajectories, 201, _lower("--trajectories")),
        *_rule_needs(args),
    ]  # fmt: skip
    costs = [_map_flow_cost(args, "--trajectories", args.trajectories, _lower("--trajectories"), args.t_max)]
    if args.basins:
        needs.append(saved_need("--basin-n", args.basin_n, 101, _lower("--basin-n")))
        costs.append(_map_flow_cost(args, "--basin-n", args.basin_n, _lower("--basin-n"), args.basin_t_max))
    return needs, costs


def _sgd_run(args, names=None):
    return sgd_work(
        args.engine, args.seeds, args.steps, args.batch, args.L, args.d, args.steps // args.log_every,
        {"steps": "--steps", "seeds": "--seeds", "batch": "--batch", "log_every": "--log-every", "d": "--d"}
        | (names or {}),
    )  # fmt: skip


def _sgd(args):
    needs, costs = _sgd_run(args)
    return needs + _rule_needs(args), costs


def _compare(args):
    if _family(args):
        longest = max(L for L, _ in args.lengths) if args.data != "marion" else args.L
        D = args.D if args.data != "marion" else args.d
        logs = args.steps // args.log_every
        names = {"steps": "--steps", "seeds": "--seeds", "log_every": "--log-every", "batch": "--batch", "d": "--D"}
        needs, costs = sgd_work("rd", args.seeds, args.steps, args.batch, longest, D, logs, names)
        needs += _family_needs(args, args.seeds)
        return needs, [*costs, family_flow_cost(args, "from every seed's start", args.seeds, _lower("--seeds"))]
    needs, costs = _sgd(args)
    logs = args.steps // args.log_every + 1
    needs.append(saved_need("the flow from every seed's start", args.seeds, logs, "raise --log-every"))
    horizon = args.lr * args.steps
    costs.append(_map_flow_cost(args, "from every seed's start", args.seeds, _lower("--seeds"), horizon))
    return needs, costs


def _verify_work(
    n: int, saves: int, option: str, rule_points: int | None = None, t_max: float = 1000.0, attention: str | None = None
):
    trajectories = 3 * 2 * n  # three settings, starts on M and on the sphere
    what = f"3 settings x 2 kinds of start x {option}"
    return (
        [saved_need(what, trajectories, saves, _lower(option))],
        [flow_cost(what, trajectories, rule_points, _lower(option), t_max, attention)],
    )


def _verify(args):
    if _family(args):
        needs = [
            saved_need("--n small starts", args.n, args.saves, _lower("--n", "--saves")),
            *_family_needs(args, args.n),
        ]
        return needs, [family_flow_cost(args, "--n small starts", args.n, _lower("--n"))]
    needs, costs = _verify_work(args.n, args.saves, "--n", _rule_points(args), args.t_max, args.attention)
    needs[0] = needs[0]._replace(advice=_lower("--n", "--saves"))
    return needs + _rule_needs(args), costs


def _demo(args):
    needs, costs = bayes_work(args.d, args.L, args.bayes_samples, {"samples": "--bayes-samples", "d": "--d"})
    log_every = max(1, args.sgd_steps // 400)
    sgd = sgd_work(
        "overlaps", args.sgd_seeds, args.sgd_steps, 5, args.L, args.sgd_d, args.sgd_steps // log_every,
        {"steps": "--sgd-steps", "seeds": "--sgd-seeds", "log_every": None, "batch": None, "d": "--sgd-d"},
    )  # fmt: skip
    verify = _verify_work(args.verify_n, 401, "--verify-n")
    compared = flow_cost("the comparison, --sgd-seeds", args.sgd_seeds, None, _lower("--sgd-seeds"))
    return needs + sgd[0] + verify[0], [*costs, *sgd[1], *verify[1], compared]


def _reproduce(args):
    from flowsim.tasks.slr._experiments import EXPERIMENTS, QUICK_STEPS

    chosen = [e for e in EXPERIMENTS if not args.only or e.name in args.only]
    needs, costs = [], []
    for experiment in chosen:
        steps = min(experiment.steps, QUICK_STEPS[experiment.algorithm]) if args.quick else experiment.steps
        needs.append(saved_need(f"{experiment.name}, --seeds", args.seeds, 201, _lower("--seeds")))
        if experiment.algorithm == "population" and args.engine == "overlaps":
            costs.append(
                Cost(f"{experiment.name} ({args.seeds} seeds x {steps} steps)", MAP_SECONDS * args.seeds * steps,
                     _lower("--seeds") + ", or run --quick")
            )  # fmt: skip
        else:
            engine = args.engine
            run = sgd_work(engine, args.seeds, steps, experiment.batch or 1, experiment.L, experiment.d, 200)
            needs.append(run[0][1]._replace(advice=_lower("--seeds")))
            costs.append(run[1][0]._replace(advice=_lower("--seeds") + ", or run --quick"))
    return needs, costs


def _advantage(args):
    rule_maps = [name for name in args.maps if name != "erf"]  # a researcher's (FILE.py:NAME) is no built-in's name
    return advantage_work(
        args.d, args.L, len(args.lams), len(args.maps), rule_maps, args.starts, args.t_max, args.lr, args.batch,
        rule_points(args.L, args.rule_points), args.bayes_samples,
        {"starts": "--starts", "steps": "--t-max (or raise --lr)", "lams": "--lams", "d": "--d", "batch": "--batch",
         "rule_points": "--rule-points", "bayes_samples": "--bayes-samples", "maps": "--maps"},
    )  # fmt: skip


def _optima(args):
    from flowsim.tasks.slr._family_figure import FIGURE_TWO_NAMES, FigureRules, figure_two_work

    settings = [FIGURE_TWO_NAMES[name] for name in args.settings]
    return figure_two_work(settings, args.maps, args.nus, starts=args.starts, n=args.n, rules=FigureRules())


#: The estimate of each command's run, by name (`flowsim.commands.options.estimated`).
COMMANDS = {
    "demo": _demo,
    "flow": _flow,
    "portrait": _portrait,
    "sgd": _sgd,
    "compare": _compare,
    "verify": _verify,
    "reproduce": _reproduce,
    "advantage": _advantage,
    "optima": _optima,
}
