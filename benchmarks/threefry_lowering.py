"""JAX's Threefry hash on the CPU: flowsim's lowering (its rounds written out) against JAX's (a loop).

`flowsim._config` lowers the hash behind every `jax.random` draw, split and fold_in without JAX's CPU loop, on the
jaxlib releases of `flowsim._config.UNROLLED_RELEASES` (on others both ways below are JAX's); the bits are the
same. Each workload runs in a new process with an empty compilation cache, once as flowsim runs it and once with
JAX's own CPU lowering put back before anything compiles, alternating, `--rounds` times; a process times its
workload's first call (tracing, compiling and running) and the fastest of its later calls (running), and prints a
checksum of the results. The random bits are the same under both lowerings; the programs around them differ, and
XLA may then order a sum differently: the checksums must agree to 1e-12.

- chain: the paper's SGD chain on the overlaps (d = 80, L = 10, batch 5) for 30 seeds, 20 000 steps;
- sgd_rd: online SGD in R^d as notebook 4 runs it (d = 40, L = 10, batch 16, 8 seeds, 1 600 steps);
- dataset: full-batch GD on a fixed dataset, as notebook 4 (n = 200, 4 seeds, 1 600 steps);
- demo: `flowsim demo` itself (its first call only: the command a new user runs), on one device.

Usage: python benchmarks/threefry_lowering.py [--rounds 2] [--workloads chain,sgd_rd,dataset,demo]
"""

import os
import textwrap

# Sibling scripts: run this one as python benchmarks/threefry_lowering.py.
from compile_options import alternated, in_new_process, parse_workloads
from sgd_cost import machine

#: Each workload: its setup code (defining `work()`, which returns an array to checksum) and its later calls.
SETUP = {
    "chain": (
        """
        from flowsim import slr
        problem = slr.Problem(d=80, L=10, lam=2.0, eps=0.1)
        def work():
            return slr.run_sgd(problem, 0, lr=1e-3, steps=20_000, batch=5, log_every=1000, seeds=30,
                               engine="overlaps").ys
    """,
        2,
    ),
    "sgd_rd": (
        """
        from flowsim import slr
        problem = slr.Problem(d=40, L=10, lam=0.1, eps=0.1)
        def work():
            return slr.run_sgd(problem, 0, lr=5e-3, steps=1600, log_every=50, init=[0.3, 0.3, 0.0, 0.0, 0.0],
                               batch=16, seeds=8).ys
    """,
        2,
    ),
    "dataset": (
        """
        from flowsim import slr
        problem = slr.Problem(d=40, L=10, lam=0.1, eps=0.1)
        def work():
            return slr.run_sgd(problem, 1, lr=5e-3, steps=1600, log_every=50, init=[0.3, 0.3, 0.0, 0.0, 0.0],
                               seeds=4, mode="dataset", n=200, batch=200, n_test=1000).test_risk
    """,
        2,
    ),
    "demo": (
        """
        import contextlib, io, tempfile
        from flowsim.cli import main
        def work():
            with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
                assert main(["demo", "--out", out]) == 0
            return np.zeros(1)
    """,
        0,
    ),
}

CHILD = """
import json, sys, time
import jax
import numpy as np
import flowsim
if {jax_loop!r}:
    from jax._src.random import threefry2x32
    from jax.interpreters import mlir
    mlir.register_lowering(threefry2x32.threefry2x32_p, threefry2x32._threefry2x32_cpu_lowering_rule, platform="cpu")
{setup}
began = time.perf_counter(); result = np.asarray(work()); first = time.perf_counter() - began
runs = []
for _ in range({later}):
    began = time.perf_counter(); result = np.asarray(work()); runs.append(time.perf_counter() - began)
print(json.dumps({{"first": first, "run": min(runs, default=float("nan")), "checksum": float(np.nansum(result))}}))
"""


def measure(workload: str, jax_loop: bool) -> dict:
    """One new process, an empty compilation cache: the first call, the fastest later call and a checksum."""
    setup, later = SETUP[workload]
    return in_new_process(CHILD.format(jax_loop=jax_loop, setup=textwrap.dedent(setup), later=later), workload)


def main():
    args = parse_workloads(__doc__.splitlines()[0], SETUP)
    print(f"# Threefry's lowering: {machine()}; load average at start {os.getloadavg()[0]:.2f}")
    print("workload | lowering | first call s (each round) | run s (each round) | checksums")
    for workload in args.workloads:
        rows = alternated(measure, workload, args.rounds)
        checksums = [r["checksum"] for results in rows.values() for r in results]
        for jax_loop, results in rows.items():
            name = "JAX's loop" if jax_loop else "flowsim's, unrolled"
            firsts = " / ".join(f"{r['first']:.2f}" for r in results)
            runs = " / ".join(f"{r['run']:.3f}" for r in results)
            sums = " / ".join(f"{r['checksum']:.17g}" for r in results)
            print(f"{workload} | {name} | {firsts} | {runs} | {sums}", flush=True)
        if max(checksums) - min(checksums) > 1e-12 * max(1.0, max(abs(c) for c in checksums)):
            raise SystemExit(f"{workload}: the two lowerings gave different results: {checksums}")
    print(f"# load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
