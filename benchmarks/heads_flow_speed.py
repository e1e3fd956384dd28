"""Speed of the two-head flow (issue 56): 1 000 starts over the authors' two-head experiment's horizon, on the CPU.

The experiment (docs/heads.md): H = S = 2, erf, d = 80, L = 10, gamma^2 = 1/2, eps = 0.1; SGD step 1e-3 for
100 000 steps with lam_t = 2 / (1 + 2e-4 t) up to step t = 25 000, then frozen at 1/3. On the flow's clock
t = 1e-3 x step: lam(t) = 2 / (1 + 0.2 t) for t <= 25, then 1/3, to the horizon t = 100
(`InverseTimeDecay(2.0, 2e-4, 1e-3, until=25_000)`). The starts: every head vector uniform on the sphere of R^80
(`HeadsProblem.initial_states`, exact, without vectors). The solver: `HeadsProblem.flow_solver()`, Rodas5 at rtol
1e-6, atol 1e-8, saving t = 0, 25, 100.

Printed before work: the estimate (`HeadsProblem.flow_cost`). Then, in one process:

- the 1 000 starts: one solve to t = 1e-3 (the compilation, timed: the same saved times' count, so the same program),
  then the timed solve to t = 100: seconds, steps;
- accuracy: --reference starts solved again at rtol 1e-9, atol 1e-11: the largest difference of the end states;
- baselines, each compiled first and scaled to a start: the explicit Tsit5 at the same tolerances on --tsit5-starts
  starts (the flow is stiff: the Jacobian's spectral radius 500-3 000), and the same Rodas5 solve with the Jacobian by
  forward-mode autodiff of the field (AbstractTask's default, before the chain rule through the moments) on
  --baseline-starts starts, beside the chain rule on the same starts.

The machine's load average is printed: on a CPU shared with other work the seconds are upper bounds.

Usage: python benchmarks/heads_flow_speed.py [--starts N] [--reference N] [--baseline-starts N] [--tsit5-starts N]
       [--quick]
"""

import argparse
import math
import os
import platform
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from flowsim import slr
from flowsim._compile import compiled_method
from flowsim.integrate import solve_flow
from flowsim.schedules import InverseTimeDecay

#: The authors' SGD: step, steps, and the schedule's rate and last decaying step.
LR, STEPS, RATE, UNTIL = 1e-3, 100_000, 2e-4, 25_000


class AutodiffJacobian(slr.HeadsProblem):
    """The task with the Jacobian by forward-mode autodiff of the field: the baseline."""

    @compiled_method
    def jacobian(self, t, y):
        return self._points(jax.jacfwd(lambda x: self._field_at(t, x)), y)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=1000)
    parser.add_argument("--reference", type=int, default=32, help="starts solved again at rtol 1e-9")
    parser.add_argument("--baseline-starts", type=int, default=100)
    parser.add_argument("--tsit5-starts", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 starts, 4 reference, 4 and 2 baseline")
    args = parser.parse_args()
    if args.quick:
        args.starts, args.reference, args.baseline_starts, args.tsit5_starts = 16, 4, 4, 2
    return args


def solve(task, starts, ts, **options):
    """(seconds, Trajectories), the states fetched."""
    begin = time.perf_counter()
    result = solve_flow(task, starts, jnp.asarray(ts), **options)
    result.y_final.block_until_ready()
    return time.perf_counter() - begin, result


def main():
    args = parse_args()
    horizon = LR * STEPS
    schedule = InverseTimeDecay(2.0, RATE, LR, until=UNTIL)
    data = slr.marion_slr(80, 10, math.sqrt(0.5), 0.1, locations=2)
    problem = slr.HeadsProblem(data, heads=2, lam=schedule)
    print(
        f"# two-head flow speed: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"jax {jax.__version__} ({jax.default_backend()}); load average at start {os.getloadavg()[0]:.2f}"
    )
    print(f"# {problem.describe()}; horizon t = {LR:g} x {STEPS} = {horizon:g}; {problem.flow_solver()}")
    cost = problem.flow_cost(args.starts, horizon)
    print(f"estimated before work: {cost.what}: {cost.seconds:.0f} s", flush=True)
    starts = problem.initial_states(jax.random.key(args.seed), args.starts)
    ts = [0.0, LR * UNTIL, horizon]
    warm_up = [0.0, 5e-4, 1e-3]  # as many saved times as `ts`: the same compiled solve

    compile_s = solve(problem, starts, warm_up)[0]
    run_s, result = solve(problem, starts, ts)
    steps = np.asarray(result.num_steps)
    print(
        f"{args.starts} starts: {run_s:.1f} s solve ({run_s / args.starts * 1e3:.1f} ms a start), {compile_s:.1f} s "
        f"compile, {run_s + compile_s:.1f} s together; steps {steps.mean():.0f} mean / {steps.max()} max; "
        f"{int((~np.asarray(result.ok)).sum())} failed; under a minute: {run_s + compile_s < 60} "
        f"(solve alone: {run_s < 60})",
        flush=True,
    )

    few = starts[: args.reference]
    _, tight = solve(problem, few, ts, rtol=1e-9, atol=1e-11)
    difference = np.abs(np.asarray(tight.y_final) - np.asarray(result.y_final)[: args.reference]).max()
    at_25 = np.abs(np.asarray(tight.ys[:, 1]) - np.asarray(result.ys)[: args.reference, 1]).max()
    print(
        f"accuracy ({args.reference} starts against rtol 1e-9): end states within {difference:.1e} "
        f"({at_25:.1e} at t = 25)"
    )

    explicit = starts[: args.tsit5_starts]
    solve(problem, explicit, warm_up, solver=diffrax.Tsit5())
    tsit5_s, tsit5 = solve(problem, explicit, ts, solver=diffrax.Tsit5())
    tsit5_start = tsit5_s / len(explicit)
    print(
        f"baseline Tsit5 (rtol 1e-6, atol 1e-8), {len(explicit)} starts: {tsit5_start * 1e3:.0f} ms a start, steps "
        f"{np.asarray(tsit5.num_steps).mean():.0f} mean: {tsit5_start / (run_s / args.starts):.0f}x Rodas5's time a "
        f"start at {args.starts} starts",
        flush=True,
    )

    baseline = AutodiffJacobian(data, heads=2, lam=schedule)
    some = starts[: args.baseline_starts]
    solve(baseline, some, warm_up)
    baseline_s, _ = solve(baseline, some, ts)
    solve(problem, some, warm_up)  # compiles the chain rule's solve for this batch size
    ours_s, _ = solve(problem, some, ts)
    per_start, ours_per_start = baseline_s / len(some), ours_s / len(some)
    print(
        f"baseline (Jacobian by forward-mode autodiff), {len(some)} starts: {per_start * 1e3:.1f} ms a start against "
        f"{ours_per_start * 1e3:.1f} ms by the chain rule on the same starts: {per_start / ours_per_start:.2f}x; "
        f"load average now {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
