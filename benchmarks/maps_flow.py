"""The flow of each attention map on the overlaps against population PGD in R^d with the same rule.

For each map (erf: closed form; softmax, linear, softplus: the default rule over the L scores, 2^14
Sobol' points at L = 10) the projected gradient flow from B sphere starts to t = 100 at d = 400,
L = 10 (issue 12's setting), by `slr.solve_flow` with the implicit solver the flow's stiffness needs
(Rosenbrock4 at rtol 1e-5 for the rule maps; erf's closed form at the engine's default tolerances, with
Kvaerno5). Timed: a first call (compile + run) and a second call (run only).

The baseline is what a user would otherwise write: population PGD in R^d, k <- (k - a (I - k k^T)
grad_k R) / |.| and likewise v, with R(k, v) the same risk function (the same rule) of the overlaps of
(k, v), batched over the B starts (`slr.run_sgd(mode="population", engine="rd")`, a compiled scan).
Its step is the paper's a = 4e-3 (section 6 of docs/science.md: the largest it uses), or less where that
would be unstable: a must stay below 2 / max|eig J| with J the flow's Jacobian along the flow (measured
here at the flow's saved states). Reaching t = 100 takes 100 / a steps; the baseline is timed over
--pgd-steps steps (after a compile call of the same shape) and extrapolated. PGD at that step is a
first-order approximation of the flow (its end points err by O(a)), the flow's solve by ~1e-5.

With `--trees BEFORE AFTER` (checkouts, e.g. `git worktree add /tmp/before 4c0663a`): instead, the flow of
each map solved as each tree's task solves it (`Problem.flow_solver`), each tree in a fresh process with
PYTHONPATH=TREE, alternated over `--rounds`; printed: each tree's first call and run, steps, and the largest
difference of its end points from a tight solve (Rosenbrock4, rtol 1e-8, atol 1e-10, by this process's flowsim).

Usage: python benchmarks/maps_flow.py [--maps softmax ...] [--quick] [--trees BEFORE AFTER [--rounds 2]]
"""

import argparse
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from flowsim import slr
from flowsim.integrate import Rosenbrock4

#: The largest PGD step of the paper's experiments.
PAPER_STEP = 4e-3


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maps", nargs="+", default=list(slr.ATTENTION_MAPS), choices=slr.ATTENTION_MAPS)
    parser.add_argument("--d", type=int, default=400)
    parser.add_argument("--L", type=int, default=10)
    parser.add_argument("--lam", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--t-max", type=float, default=100.0)
    parser.add_argument("--pgd-steps", type=int, default=200, help="PGD steps timed (then extrapolated)")
    parser.add_argument("--quick", action="store_true", help="d = 80, L = 3, B = 8, t = 10: a smoke run")
    parser.add_argument("--trees", nargs="+", help="checkouts whose task solvers are compared (see the docstring)")
    parser.add_argument("--rounds", type=int, default=1, help="with --trees: times each tree runs, alternated")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a tree's process: the file its end points go to
    return parser.parse_args()


def timed(function):
    began = time.perf_counter()
    result = function()
    jax.block_until_ready(jax.tree.leaves(result))
    return result, time.perf_counter() - began


def solve_options(problem):
    """erf's closed form: Kvaerno5 at the engine's tolerances; the rule maps: the task's own (`Problem.flow_solver`)."""
    return {"solver": diffrax.Kvaerno5()} if problem.closed_form else {}


def measure(args, attention: str, m0, ts) -> str:
    """One row of the table: the flow's first call and run, its stiffness, and the PGD baseline."""
    problem = slr.Problem(args.d, args.L, args.lam, eps=0.0, attention=attention)
    options = solve_options(problem)
    _, first = timed(lambda: slr.solve_flow(problem, m0, ts, **options).ys)
    solved, run = timed(lambda: slr.solve_flow(problem, m0, ts, **options))
    states = np.asarray(solved.ys[:, ::5]).reshape(-1, 5)  # every 5th saved time: t = 0, 5, ..., 100
    states = jnp.asarray(states[np.isfinite(states).all(axis=1)])
    # In chunks: a rule-based Jacobian holds arrays of the rule's size per state.
    jacobians = np.asarray(
        jax.jit(lambda ys: jax.lax.map(lambda y: problem.jacobian(0.0, y), ys, batch_size=64))(states)
    )
    largest = float(np.abs(np.linalg.eigvals(jacobians)).max())
    step = min(PAPER_STEP, 2.0 / largest)
    pgd_steps = math.ceil(args.t_max / step)

    def pgd(steps):
        return slr.run_sgd(
            problem, 1, init="sphere", lr=step, steps=steps, log_every=steps, seeds=args.batch, mode="population"
        ).ys

    timed(lambda: pgd(args.pgd_steps))  # compile
    _, pgd_time = timed(lambda: pgd(args.pgd_steps))
    per_step = pgd_time / args.pgd_steps
    baseline = per_step * pgd_steps
    rule = "closed form" if problem.closed_form else problem.rule.name
    cells = [attention, rule, f"{first:.1f}", f"{run:.1f}", int(np.max(solved.num_steps)), f"{largest:.3g}"]
    cells += [f"{step:.3g}", pgd_steps, f"{per_step:.3g}", f"{baseline:.1f}", f"{baseline / run:.1f}x"]
    return " | ".join(map(str, cells))


def tree_worker(args, m0, ts) -> None:
    """In a tree's process: each map's flow as the task solves it, timed; end points to `args.worker`."""
    ends, lines = {}, []
    for attention in args.maps:
        problem = slr.Problem(args.d, args.L, args.lam, eps=0.0, attention=attention)
        options = solve_options(problem)
        solve = functools.partial(slr.solve_flow, problem, m0, ts, **options)
        _, first = timed(solve)
        solved, run = timed(solve)
        ends[attention] = np.asarray(solved.ys[:, -1])
        solver = type({**problem.flow_solver(), **options}["solver"]).__name__  # the solver the solve used
        lines.append(dict(map=attention, solver=solver, first=first, run=run, steps=int(np.max(solved.num_steps))))
    np.savez(args.worker, **ends)
    print(json.dumps(lines))


def compare_trees(args, m0, ts) -> None:
    """Each tree's task solve of each map (fresh processes, alternated), against a tight solve here."""
    reference = {}
    for attention in args.maps:
        problem = slr.Problem(args.d, args.L, args.lam, eps=0.0, attention=attention)
        tight = slr.solve_flow(problem, m0, ts, solver=Rosenbrock4(), rtol=1e-8, atol=1e-10)
        reference[attention] = np.asarray(tight.ys[:, -1])
    print("tree | map | solver | first call (s) | run (s) | steps (max) | max abs end difference from the tight solve")
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for tree in args.trees:
                out = os.path.join(folder, "ends.npz")
                command = [sys.executable, os.path.abspath(__file__), "--worker", out, "--maps", *args.maps]
                command += ["--d", str(args.d), "--L", str(args.L), "--lam", str(args.lam)]
                command += ["--batch", str(args.batch), "--t-max", str(args.t_max)]
                env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
                done = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/", check=True)
                ends = np.load(out)
                for line in json.loads(done.stdout.strip().splitlines()[-1]):
                    error = np.abs(ends[line["map"]] - reference[line["map"]]).max()
                    cells = [tree, line["map"], line["solver"], f"{line['first']:.1f}", f"{line['run']:.1f}"]
                    print(" | ".join([*cells, str(line["steps"]), f"{error:.2g}"]), flush=True)


def main():
    args = parse_args()
    if args.quick:
        args.d, args.L, args.batch, args.t_max, args.pgd_steps = 80, 3, 8, 10.0, 50
    m0 = slr.initial_overlaps(jax.random.key(0), args.d, args.batch, "sphere")
    ts = np.linspace(0.0, args.t_max, 101)
    if args.worker:
        tree_worker(args, m0, ts)
        return
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; d = {args.d}, L = {args.L}, lam = {args.lam}, ")
    print(f"B = {args.batch} sphere starts, t = {args.t_max:g}\n")
    if args.trees:
        compare_trees(args, m0, ts)
        return
    header = "map | rule | flow: first call (s) | run (s) | steps (max) | max abs eig J | PGD step a | PGD steps "
    print(header + "| PGD s/step | PGD to t (s, extrapolated) | ratio")
    for attention in args.maps:
        print(measure(args, attention, m0, ts), flush=True)


if __name__ == "__main__":
    main()
