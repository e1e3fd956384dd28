"""The memory and time of the sparse sweep, estimated before it starts (`flowsim._memory`), and the checks of its
options that need several of them (every input length > s; an option of a learner that is not swept).

The per-unit costs were measured on the 2-core CPU of BENCHMARKS.md (section "Estimates before work"), on a
machine shared with other work (load average 9 to 13): the estimates err long.
"""

import math

from flowsim._checks import Allowed, InvalidInput
from flowsim._memory import Cost, Need, float_bytes

__all__ = ["LENGTH", "SPAN", "sweep"]

#: An input length on the command line: its range against --s is checked with the other options (`sweep`).
LENGTH = Allowed("an integer > --s", lambda T: T >= 2, integer=True)
#: A search span m_high / m_low: above 1 (a range to search), and small enough that m_high samples are counted.
SPAN = Allowed("a number in (1, 1e4]", lambda x: 1 < x <= 1e4)
#: Seconds of the ERM identifiability per (trial x token) (0.15 s a trial at T = 256).
ERM_SECONDS = 6e-4
#: Seconds of one step of an attention head's training, for all the runs of a round at once (12 runs at T = 64, m
#: up to 128: 11.8 s for 1000 steps), growing with the padded training sets beyond that size; the other
#: learners' cost relative to it (the Transformer: about ten heads per sample, docs/science.md; the l1 control:
#: a solver run to its tolerance, counted as 100 steps). A "converged" budget is counted as `CONVERGED_STEPS`:
#: its runs stop once the training loss stops improving, mostly long before the cap (--max-steps).
HEAD_STEP_SECONDS = 1.2e-2
HEAD_STEP_ELEMENTS = 12 * 128 * 64
RELATIVE = {"head": 1.0, "mlp": 4.0, "transformer": 10.0, "l1": 1.0}
L1_STEPS = 100
CONVERGED_STEPS = 1000


def _information(T: int, s: int) -> int:
    """ceil(log2 C(T, s)): the search's smallest sample size."""
    return max(1, math.ceil(math.log2(math.comb(T, s))))


def sweep(args) -> tuple[list, list]:
    """The `sparse sweep` command's options checked together, and the memory and time of its run."""
    lengths = {"head": ("--Ts", args.Ts), "l1": ("--Ts", args.Ts), "mlp": ("--mlp-Ts", args.mlp_Ts)}
    lengths["transformer"] = ("--transformer-Ts", args.transformer_Ts)
    spans = {"mlp": ("--mlp-span", args.mlp_span)}
    for option, value in (("--span", args.span), ("--mlp-span", args.mlp_span)):
        SPAN.check(option, value)
    from flowsim.tasks.sparse._sweep import MLP_TS, TRANSFORMER_TS

    for learner, default in (("mlp", MLP_TS), ("transformer", TRANSFORMER_TS)):
        option, value = lengths[learner]
        # Not a learner's own lengths given on their own: its defaults, or --quick's.
        unchanged = {tuple(sorted(set(default))), tuple(int(T) for T in args.quick_values[f"{learner}_Ts"].split(","))}
        if learner not in args.learners and tuple(value) not in unchanged:
            raise InvalidInput(f"{option} gives the {learner}'s input lengths: add {learner} to --learners, or leave "
                               f"{option} out")  # fmt: skip
    for learner in args.learners:
        option, Ts = lengths[learner]
        if min(Ts) <= args.s:
            raise InvalidInput(f"{option} must each be an integer > --s = {args.s}, got {min(Ts)}")
    needs, costs = [], []
    every_T = sorted({T for learner in args.learners for T in lengths[learner][1]})
    costs.append(
        Cost(
            f"the ERM identifiability ({args.erm_trials} trials x {len(every_T)} T, {sum(every_T)} tokens in all)",
            ERM_SECONDS * args.erm_trials * sum(every_T),
            "lower --erm-trials",
        )
    )
    steps = max([CONVERGED_STEPS if b == "converged" else b for b in args.budgets])
    runs = args.seeds * args.candidates
    for learner in args.learners:
        option, Ts = lengths[learner]
        span = spans.get(learner, ("--span", args.span))[1]
        largest = max(Ts)
        m_high = math.ceil(span * _information(largest, args.s))
        needs.append(
            Need(
                f"the {learner}'s training sets ({runs} runs x m {m_high} x T {largest}, three copies)",
                float_bytes(3, runs, m_high, largest),
                f"lower {option}, --seeds or --candidates",
            )
        )
        budgets = 1 if learner == "l1" else len(args.budgets)
        step = sum(max(1.0, runs * math.ceil(span * _information(T, args.s)) * T / HEAD_STEP_ELEMENTS) for T in Ts)
        learner_steps = L1_STEPS if learner == "l1" else steps
        costs.append(
            Cost(
                f"the {learner}'s training ({budgets} budgets x {args.rounds} rounds x {runs} runs x {learner_steps} "
                f"steps at {len(Ts)} T)",
                HEAD_STEP_SECONDS * RELATIVE[learner] * budgets * args.rounds * learner_steps * step,
                f"lower --seeds, --candidates, --rounds, the budgets (--budgets, --max-steps) or {option}",
            )
        )
    return needs, costs
