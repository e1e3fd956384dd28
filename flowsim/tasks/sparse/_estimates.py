"""The memory and time of the sparse sweep, estimated before it starts (`flowsim._memory`), and the checks of its
options that need several of them (every input length > s; an option of a learner that is not swept).

The per-unit costs were measured on the 2-core CPU of BENCHMARKS.md (section "Estimates before work"), on a
machine shared with other work (load average 9 to 13): the estimates err long. Where JAX computes on a GPU, the
training's costs are those measured on an H200 (section "On a GPU"), and a round's device memory is estimated too.
"""

import math

from flowsim._checks import Allowed, InvalidInput
from flowsim._memory import Cost, Need, float_bytes

__all__ = ["LENGTH", "SPAN", "seconds", "sweep"]

#: An input length on the command line: its range against --s is checked with the other options (`sweep`).
LENGTH = Allowed("an integer > --s", lambda T: T >= 2, integer=True)
#: A search span m_high / m_low: above 1 (a range to search), and small enough that m_high samples are counted.
SPAN = Allowed("a number in (1, 1e4]", lambda x: 1 < x <= 1e4)
#: Seconds of the ERM identifiability per (trial x token): the default sweep's 200 trials at its 9 T (8176 tokens)
#: took about 25 s on the idle 2-core CPU (one compiled draw per target, identification by pair products).
ERM_SECONDS = 2e-5
#: Seconds of an attention head's training per (run x round x step x padded sample x token), over the runs of a
#: (learner, budget, T) unit: measured by the default sweep on the idle 2-core CPU (BENCHMARKS.md, "Estimates before
#: work": 1000 steps at T = 128 and 256, 48 s and 83 s for 3 rounds of 60 runs at m <= 152 and 176), after
#: `UNIT_SECONDS` of compiling its programs (about 25 s a unit at T <= 64, where the training itself is negligible).
#: The repetitions of a search (--repeats) compile nothing more: each adds its training (measured at T = 64 and 256,
#: 1000 steps: a first search 54 s and 120 s, a second with another key 12 s and 41 s).
#: The other learners' cost per element relative to the head's (the Transformer: ten heads' work, measured 10.5 x
#: at T = 4096 by benchmarks/sparse_training.py; the l1 control: a solver run to its tolerance, no compiling,
#: counted as 30 steps: 37 s at T = 4096 in the default sweep).
HEAD_ELEMENT_SECONDS = 6e-9
UNIT_SECONDS = 25.0
RELATIVE = {"head": 1.0, "mlp": 4.0, "transformer": 10.0, "l1": 1.0}
L1_STEPS = 30
#: On a GPU (measured on one H200, BENCHMARKS.md "On a GPU"), where a round of the search is one program on training
#: sets padded to its largest size: seconds of a unit's compiling, and of the Transformer's training per (run x round
#: x step x padded sample x token), from its units of 1000 steps, 20 seeds: 89 s at T = 4096 (3 rounds of 120 runs at
#: m = 272), 41 s at T = 2048, 21 s at T = 100. The head and the MLP, not measured there, are counted as the
#: Transformer (the estimate errs long); the l1 control runs on the CPU (scikit-learn) wherever JAX computes.
GPU_UNIT_SECONDS = 20.0
GPU_ELEMENT_SECONDS = 1.7e-10
#: On the CPU, the data of one run of a round: its training set, redrawn until it identifies the target, and its
#: validation samples; seconds per run, and per (training + validation sample) x token. Measured by the control's units
#: (its fits are cheap): 37 s for a search at T = 4096 alone; 2.5 to 8 s a search at T = 16 ... 256 in the default
#: sweep beside other work (load 4 to 6). The GPU's costs above were measured with their data.
RUN_SECONDS = 0.012
SAMPLE_SECONDS = 2e-8
#: A "converged" budget counted in steps: its runs stop once the training loss is <= 1e-6 or stops improving,
#: but a group of runs trained side by side waits for its slowest (measured: 2.4 x and 2.1 x the 1000-step budget's
#: time at T = 128 and 256).
CONVERGED_STEPS = 2500


def _steps(budget, max_steps: int) -> int:
    """The steps a budget is counted as: its number, or for "converged" `CONVERGED_STEPS` (at most the cap)."""
    return min(CONVERGED_STEPS, max_steps) if budget == "converged" else int(budget)


def _information(T: int, s: int) -> int:
    """ceil(log2 C(T, s)): the search's smallest sample size."""
    return max(1, math.ceil(math.log2(math.comb(T, s))))


def seconds(args, gpu: bool | None = None) -> float:
    """The estimated seconds of a `sparse sweep` run with the options `args`, on a GPU or on the CPU (`gpu`; default:
    where JAX computes): e.g. of the command that extends the default, said before the default starts."""
    return sum(cost.seconds for cost in sweep(args, gpu)[1])


def sweep(args, gpu: bool | None = None) -> tuple[list, list]:
    """The `sparse sweep` command's options checked together, and the memory and time of its run (on a GPU or on the
    CPU: `gpu`; default: where JAX computes)."""
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
    from flowsim.tasks.sparse._critical import N_VALIDATION
    from flowsim.tasks.sparse._train import on_accelerator

    gpu = on_accelerator() if gpu is None else gpu
    needs, costs = [], []
    every_T = sorted({T for learner in args.learners for T in lengths[learner][1]})
    costs.append(
        Cost(
            f"the ERM identifiability ({args.erm_trials} trials x {len(every_T)} T, {sum(every_T)} tokens in all)",
            ERM_SECONDS * args.erm_trials * sum(every_T),
            "lower --erm-trials",
        )
    )
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
        budget_steps = [L1_STEPS] if learner == "l1" else [_steps(b, args.max_steps) for b in args.budgets]
        elements = sum(runs * args.rounds * math.ceil(span * _information(T, args.s)) * T for T in Ts)
        # Every run's training set and validation samples, for each budget and search (on the CPU: see RUN_SECONDS).
        samples = sum(
            runs
            * args.rounds
            * (RUN_SECONDS + SAMPLE_SECONDS * (math.ceil(span * _information(T, args.s)) + N_VALIDATION) * T)
            for T in Ts
        )
        drawing = len(budget_steps) * samples
        if gpu and learner != "l1":
            # A round's runs side by side on the device, as floats: their training sets and validation samples.
            needs.append(
                Need(
                    f"the {learner}'s round on the GPU ({runs} runs x (m {m_high} + {N_VALIDATION} validation "
                    f"samples) x T {largest}, twice)",
                    float_bytes(2, runs, m_high + N_VALIDATION, largest),
                    f"lower {option}, --seeds or --candidates",
                )
            )
            compiling = GPU_UNIT_SECONDS * len(budget_steps) * len(Ts)
            training, drawing = GPU_ELEMENT_SECONDS * elements * sum(budget_steps), 0.0
        else:
            compiling = 0.0 if learner == "l1" else UNIT_SECONDS * len(budget_steps) * len(Ts)
            training = HEAD_ELEMENT_SECONDS * RELATIVE[learner] * elements * sum(budget_steps)
        searches = f" x {args.repeats} searches" if args.repeats > 1 else ""
        costs.append(
            Cost(
                f"the {learner}'s training ({' + '.join(map(str, budget_steps))} steps x {args.rounds} rounds x "
                f"{runs} runs{searches} at {len(Ts)} T)",
                compiling + args.repeats * (training + drawing),
                f"lower --seeds, --candidates, --rounds, --repeats, the budgets (--budgets, --max-steps) or {option}",
            )
        )
    return needs, costs
