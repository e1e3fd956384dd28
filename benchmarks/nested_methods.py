"""A task's methods inside a trace: one nested call, traced once (flowsim's), against inlined at every call.

`flowsim._compile.compiled_method` makes each of a task's generated-equation methods (field, Jacobian, risk,
map) one program per shapes. Inside a trace, a solver's step, which evaluates the field several times, calls
it as a nested program traced once; the baseline traces the method's Python again at every call, as flowsim
did before, its calls then inlined in the caller's trace (restored here by wrapping `compiled_call`). XLA
inlines the nested calls, so the results are the same bits: the checksums must be equal.

Each workload runs in a new process with an empty compilation cache (its first call traces, lowers and
compiles everything), then in another process with the cache the first left (the first call traces and
lowers, and loads the compiled programs: what a user's next run pays), the two settings alternated, `--rounds`
times. The process's wall time, imports included, is what a command costs.

- demo: `flowsim demo` at the sizes of the test suite's (d = 10, L = 4, 2 starts, 60 SGD steps): every
  program of the main command, at sizes where tracing and compiling are most of the time;
- stiff: a flow at d = 400 solved by Rodas5 (64 sphere starts to t = 100, 101 saved times);
- softmax: softmax attention's rule-based flow (d = 400, L = 10, 2^10 points, 8 starts to t = 10).

Usage: python benchmarks/nested_methods.py [--rounds 2] [--workloads demo,stiff,softmax]
"""

import os
import tempfile
import textwrap
import time

# Sibling scripts: run this one as python benchmarks/nested_methods.py.
from compile_options import alternated, in_new_process, parse_workloads
from sgd_cost import machine

#: Each workload's setup code, defining `work()`, which returns an array to checksum.
SETUP = {
    "demo": """
        import contextlib, io, tempfile
        from flowsim.cli import main
        SIZES = "--d 10 --L 4 --bayes-samples 200 --sgd-d 10 --sgd-steps 60 --sgd-seeds 2 --verify-d 10 --verify-n 2"
        def work():
            with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
                assert main(["demo", *SIZES.split(), "--out", out]) == 0
                return np.loadtxt(f"{out}/compare/trajectories.csv", delimiter=",", skiprows=1, usecols=range(2, 7))
    """,
    "stiff": """
        from flowsim import slr
        problem = slr.Problem(d=400, L=10, lam=0.1)
        starts = slr.initial_overlaps(jax.random.key(0), problem.d, 64, "sphere")
        def work():
            return slr.solve_flow(problem, starts, np.linspace(0.0, 100.0, 101)).ys
    """,
    "softmax": """
        from flowsim import slr
        from flowsim.quadrature import sobol
        problem = slr.Problem(d=400, L=10, lam=1.0, attention="softmax", rule=sobol(10, 2**10))
        starts = slr.initial_overlaps(jax.random.key(0), problem.d, 8, "sphere")
        def work():
            return slr.solve_flow(problem, starts, np.linspace(0.0, 10.0, 11)).ys
    """,
}

CHILD = """
import json, time
began = time.perf_counter()
import jax
import numpy as np
import flowsim._compile
if {inlined!r}:
    compiled = flowsim._compile.compiled_call

    def inlined_in_traces(function, arguments, keywords):
        if flowsim._compile._at_top_level():
            return compiled(function, arguments, keywords)
        return function(*arguments, **keywords)

    flowsim._compile.compiled_call = inlined_in_traces
{setup}
start = time.perf_counter(); result = np.asarray(work()); first = time.perf_counter() - start
print(json.dumps({{"first": first, "process": time.perf_counter() - began, "checksum": float(np.nansum(result))}}))
"""


def measure(workload: str, inlined: bool) -> dict:
    """Two new processes on one cache folder, empty for the first: each one's first call and whole time."""
    code = CHILD.format(inlined=inlined, setup=textwrap.dedent(SETUP[workload]))
    with tempfile.TemporaryDirectory() as cache:
        cold = in_new_process(code, workload, cache)
        warm = in_new_process(code, workload, cache)
    if cold["checksum"] != warm["checksum"]:
        raise SystemExit(f"{workload}: a cached program gave other numbers: {cold['checksum']} != {warm['checksum']}")
    return {"cold": cold, "warm": warm, "checksum": cold["checksum"]}


def main():
    args = parse_workloads(__doc__.splitlines()[0], SETUP)
    print(f"# nested methods: {machine()}; load average at start {os.getloadavg()[0]:.2f}; {time.ctime()}")
    print("workload | methods in a trace | cache empty: first call / process s | cache warm: first call / process s")
    for workload in args.workloads:
        rows = alternated(measure, workload, args.rounds)
        for inlined, results in rows.items():
            cells = [
                " ; ".join(f"{r[cache]['first']:.2f} / {r[cache]['process']:.2f}" for r in results)
                for cache in ("cold", "warm")
            ]
            name = "inlined at every call" if inlined else "one nested call (flowsim's)"
            print(f"{workload} | {name} | {cells[0]} | {cells[1]}", flush=True)
        checksums = {r["checksum"] for results in rows.values() for r in results}
        if len(checksums) > 1:
            raise SystemExit(f"{workload}: the two settings gave different results: {sorted(checksums)}")
    print(f"# load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
