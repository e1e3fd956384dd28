"""The same workloads on several trees of the repository, alternated: before/after figures of a change.

Usage: python benchmarks/trees.py TREE [TREE ...] [--rounds 2]

Each TREE is a checkout (e.g. `git worktree add /tmp/before d00a09d`). For every round, each tree runs
the workloads below in a fresh process with `PYTHONPATH=TREE` (the same interpreter), and prints one
line of best-of-3 times (compilation excluded). Single timings on a shared or virtual machine vary by
tens of percent: compare the means over rounds, measured back to back, never a lone run.

Workloads: the gradient flow (Tsit5, B = 100 sphere starts, d = 400, L = 10, lam = 0.1, to t = 20,
11 saves; and Kvaerno5, B = 8), SGD in R^80 (2000 steps x 30 seeds, batch 5) and SGD on the overlaps
(20 000 steps x 30 seeds).
"""

import argparse
import os
import subprocess
import sys
import time


def _best(function, repeats: int = 3) -> float:
    function()  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def worker(tree: str) -> None:
    """Time the workloads with the flowsim of `tree` (this process imported it from there)."""
    import diffrax
    import jax
    import numpy as np

    import flowsim
    from flowsim import slr

    if not flowsim.__file__.startswith(os.path.abspath(tree)):
        raise SystemExit(f"flowsim came from {flowsim.__file__}, not from {tree}")
    # Before issue 10 the R^d engine was spelled "Rd".
    rd = "rd" if "rd" in getattr(slr, "ENGINES", ("rd",)) else "Rd"
    problem = slr.Problem(400, 10, 0.1)
    m0 = np.asarray(slr.initial_overlaps(jax.random.key(0), 400, 100))
    ts = np.linspace(0.0, 20.0, 11)
    sgd_problem = slr.Problem(80, 10, 0.5)
    sgd = dict(lr=1e-3, batch=5, log_every=1000, seeds=30)
    figures = {
        "flow Tsit5 B=100": _best(lambda: slr.solve_flow(problem, m0, ts)),
        "flow Kvaerno5 B=8": _best(lambda: slr.solve_flow(problem, m0[:8], ts, solver=diffrax.Kvaerno5())),
        "SGD R^80 2000x30": _best(lambda: slr.run_sgd(sgd_problem, jax.random.key(0), steps=2000, engine=rd, **sgd)),
        "SGD overlaps 20000x30": _best(
            lambda: slr.run_sgd(sgd_problem, jax.random.key(0), steps=20000, engine="overlaps", **sgd)
        ),
    }
    shown = " | ".join(f"{name} {seconds:.3f} s" for name, seconds in figures.items())
    print(f"{tree}: {shown} | load {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", help="checkouts to compare")
    parser.add_argument("--rounds", type=int, default=2, help="times each tree runs, alternated")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.trees[0])
        return
    for _ in range(args.rounds):
        for tree in args.trees:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            command = [sys.executable, os.path.abspath(__file__), "--worker", tree]
            result = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/")
            print(result.stdout.strip() or result.stderr.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
