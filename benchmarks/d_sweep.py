"""A sweep over the dimension d, as a researcher runs one: the cost of each new d after the first.

At each d of --ds (single-location regression, L = 10, lam = 0.1, eps = 0.1, erf): the flow of 16 sphere starts to
t = 100 (`slr.solve_flow`, the engine's solver choice), the fixed points on M (`slr.fixed_points_on_manifold`),
the population risk along the flow, and 4 seeds of the SGD chain on the overlaps (2000 steps, batch 5). Each
tree runs in a fresh process without a persistent compilation cache (as a library user's session), so the time
of a d is its compilations plus its work; printed per d, and the total.

With `--trees BEFORE AFTER` (checkouts, e.g. `git worktree add /tmp/before HEAD~1`), each tree runs in its own
process with PYTHONPATH=TREE, alternated over `--rounds`.

Usage: python benchmarks/d_sweep.py [--ds 50,100,200,400,800] [--trees BEFORE AFTER [--rounds 2]]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time


def sweep(ds: list[int]) -> dict:
    """{d: seconds} of the sweep's work at each d, in this process, in order."""
    import jax
    import numpy as np

    from flowsim import slr

    seconds = {}
    for d in ds:
        start = time.perf_counter()
        problem = slr.Problem(d=d, L=10, lam=0.1, eps=0.1)
        y0 = slr.initial_overlaps(jax.random.key(0), d, 16, "sphere")
        flow = slr.solve_flow(problem, y0, np.linspace(0.0, 100.0, 101))
        assert not flow.failures(), flow.failures()
        points = slr.fixed_points_on_manifold(problem)
        risk = np.asarray(slr.population_risk(problem, flow.y_final))
        run = slr.run_sgd(problem, jax.random.key(1), lr=1e-3, steps=2000, batch=5, log_every=100, seeds=4)
        jax.block_until_ready(run.ys)
        assert points and np.isfinite(risk).all() and not run.failures()
        seconds[d] = time.perf_counter() - start
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ds", default="50,100,200,400,800", help="the dimensions, in order")
    parser.add_argument("--trees", nargs=2, metavar=("BEFORE", "AFTER"), help="two checkouts to compare")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the two trees")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ds = [int(d) for d in args.ds.split(",")]
    if args.child:
        print(json.dumps(sweep(ds)))
        return
    print(f"{platform.node()}: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; d = {ds}")
    trees = args.trees or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    environment = {name: value for name, value in os.environ.items() if name != "JAX_COMPILATION_CACHE_DIR"}
    for round_ in range(args.rounds):
        for tree in trees:
            command = [sys.executable, os.path.abspath(__file__), "--child", "--ds", args.ds]
            result = subprocess.run(
                command, capture_output=True, text=True, check=True, env={**environment, "PYTHONPATH": tree}
            )
            seconds = {int(d): s for d, s in json.loads(result.stdout.strip().splitlines()[-1]).items()}
            per_d = ", ".join(f"{d}: {s:.1f}" for d, s in seconds.items())
            print(f"round {round_ + 1}, {tree}: total {sum(seconds.values()):.1f} s (per d, s: {per_d})")


if __name__ == "__main__":
    main()
