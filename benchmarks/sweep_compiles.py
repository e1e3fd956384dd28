"""A step-size sweep in R^d at a fixed t_end, as notebook 4 runs it: its time and its compilations, tree against tree.

`slr.sweep_lr(problem, key, [5e-3, 2.5e-2, 5e-2], t_end=8, logs=32, train=slr.run_sgd)` (d = 40, L = 10,
batch 16, 8 seeds from a start on M) trains in R^d for 1 600, 320 and 160 steps, logging every 50, 10 and 5
steps, then solves the flow at each. Each tree (PYTHONPATH=TREE) runs it in a new process on one CPU device with
an empty compilation cache, the trees alternated over `--rounds`; a process prints the sweep's wall time, how
many programs XLA compiled and for how long (`jax.monitoring`'s backend compile events), and a checksum of the
sweep's deviations, which must be the same bits in both trees.

Usage: python benchmarks/sweep_compiles.py --trees BEFORE AFTER [--rounds 2]
"""

import argparse
import os

# Sibling scripts: run this one as python benchmarks/sweep_compiles.py.
from compile_options import checkout, in_new_process
from sgd_cost import machine

CHILD = """
import json, time
import jax, jax.monitoring
import numpy as np
compiles = []


def on_event(name, seconds, **_):
    if name == "/jax/core/compile/backend_compile_duration":
        compiles.append(seconds)


jax.monitoring.register_event_duration_secs_listener(on_event)
from flowsim import slr
problem = slr.Problem(d=40, L=10, lam=0.1, eps=0.1)
options = dict(init=np.array([0.3, 0.3, 0.0, 0.0, 0.0]), batch=16, seeds=8)
began = time.perf_counter()
sweep = slr.sweep_lr(problem, jax.random.key(0), [5e-3, 2.5e-2, 5e-2], t_end=8.0, logs=32, train=slr.run_sgd,
                     train_options=options)
seconds = time.perf_counter() - began
print(json.dumps({"seconds": seconds, "compiles": len(compiles), "compile_seconds": sum(compiles),
                  "longest": sorted(compiles)[-4:], "checksum": float(np.sum(sweep.deviation))}))
"""


def measure(tree: str) -> dict:
    """The sweep in a new process importing flowsim from `tree`, one CPU device, an empty compilation cache."""
    return in_new_process(CHILD, tree, tree=tree)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trees", nargs=2, type=checkout, metavar=("BEFORE", "AFTER"), required=True, help="two checkouts"
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternated pairs of processes (>= 1)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    print(f"# the step-size sweep: {machine()}; load average at start {os.getloadavg()[0]:.2f}")
    print("round | tree | sweep s | programs compiled | compiling s | the four longest compilations s | checksum")
    checksums = set()
    for round_ in range(1, args.rounds + 1):
        for tree in args.trees:
            r = measure(tree)
            checksums.add(r["checksum"])
            longest = ", ".join(f"{s:.2f}" for s in r["longest"])
            cells = [round_, tree, f"{r['seconds']:.2f}", r["compiles"], f"{r['compile_seconds']:.2f}", longest]
            print(" | ".join(map(str, cells)) + f" | {r['checksum']:.17g}", flush=True)
    if len(checksums) > 1:
        raise SystemExit(f"the trees gave different deviations: {sorted(checksums)}")
    print(f"# load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
