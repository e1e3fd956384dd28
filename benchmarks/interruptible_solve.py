"""What an interruptible solve costs: `flowsim flow`'s default solve, at once and as the command line runs it.

Protocol: the problem, starts, saved times and solver `flowsim flow` takes with its defaults (16 starts, d = 400, to
t = 80, 201 saves), solved by `slr.solve_flow` with `interruptible=False` (one call) and `interruptible=True` (the
command line's: windows of the saved times, `SEGMENTS` of them at most, the host looking for Ctrl-C between two).
One solve of each first (compiling), then `--repeats` of each, alternated; the best time of each is printed with the
steps per trajectory, the calls (windows) of the interruptible solve and the largest difference of the saved states.
Run from a checkout: `python benchmarks/interruptible_solve.py`.
"""

import argparse
import sys
import time

import jax
import numpy as np

from flowsim import slr
from flowsim.cli import _parser
from flowsim.tasks.slr.cli import _choose_solver, _problem

integrate_module = sys.modules["flowsim.integrate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    args = _parser().parse_args(["flow"])
    problem = _problem(args)
    m0 = np.asarray(slr.initial_overlaps(jax.random.key(args.seed), problem.d, args.n, args.init))
    ts = np.linspace(0.0, args.t_max, args.saves)
    solver, name = _choose_solver(args, problem, m0)
    calls = [0]
    run = integrate_module.run_interruptibly

    def counted(*arguments, **options):
        calls[0] += 1
        return run(*arguments, **options)

    integrate_module.run_interruptibly = counted

    def solve(interruptible: bool):
        began = time.perf_counter()
        solved = slr.solve_flow(problem, m0, ts, solver=solver, max_steps=args.max_steps, interruptible=interruptible)
        np.asarray(solved.ys)
        return time.perf_counter() - began, solved

    solve(False), solve(True)
    best, results = {False: np.inf, True: np.inf}, {}
    for _ in range(repeats):
        for interruptible in (False, True):
            calls[0] = 0
            seconds, solved = solve(interruptible)
            best[interruptible] = min(best[interruptible], seconds)
            results[interruptible] = (solved, calls[0])
    print(f"flowsim flow's default solve: {args.n} starts, d = {problem.d}, t = {args.t_max:g}, {name}")
    for interruptible, label in ((False, "at once"), (True, "interruptible")):
        solved, count = results[interruptible]
        steps = np.asarray(solved.num_steps)
        print(
            f"  {label:>13}: best {best[interruptible]:.3f} s of {repeats}, steps per trajectory {steps.min()}-"
            f"{steps.max()}, calls {count if interruptible else 1}"
        )
    difference = np.nanmax(np.abs(np.asarray(results[True][0].ys) - np.asarray(results[False][0].ys)))
    print(f"  interruptible / at once: {best[True] / best[False]:.3f}; saved states differ by {difference:.2e} at most")


if __name__ == "__main__":
    main()
