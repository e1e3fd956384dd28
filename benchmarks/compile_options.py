"""flowsim's XLA compiler options (`flowsim._compile.OPTIONS`) against XLA's defaults: compile and run seconds.

Each workload runs in a new process with an empty compilation cache, once with flowsim's options for its kind
of program and once with none (`flowsim._compile.OPTIONS[kind]` emptied before anything compiles),
alternating, `--rounds` times; a process times its workload's first call (tracing, compiling and running)
and the fastest of two later calls (running). The workloads are the programs that carry the options:

- flow (kind "solves"): `slr.solve_flow` at d = 400, L = 10, lam = 0.1 from 1 000 sphere starts to t = 100
  (Rodas5);
- fixed_points ("solves"): `flowsim.fixed_points` of that problem from 256 sphere starts (Newton by
  optimistix);
- chain ("training"): the paper's SGD chain on the overlaps (d = 80, L = 10, lam = 2, batch 5, lr 1e-3) for
  30 seeds, 20 000 steps;
- readout ("training"): the latent read-out's training (d = 4, L = 64, n = 500, 200 steps, 3 seeds);
- sgd_rd: online SGD in R^d (d = 80, L = 10, batch 5) for 8 seeds, 2 000 steps, its segments given the
  "training" options here: flowsim keeps XLA's defaults for them, and this workload shows why.

(The sparse task's training keeps XLA's defaults: measured with the solves' options, it ran no faster;
BENCHMARKS.md, "XLA's fusion emitters".)

Usage: python benchmarks/compile_options.py [--rounds 2] [--workloads flow,fixed_points]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from sgd_cost import machine  # sibling script: run this one as python benchmarks/compile_options.py

HERE = Path(__file__).resolve().parent

#: Each workload: the kind of program (`flowsim._compile.OPTIONS`) its options are for, and its setup code.
SETUP = {
    "flow": (
        "solves",
        """
        from flowsim import slr
        problem = slr.Problem(d=400, L=10, lam=0.1)
        m0 = slr.initial_overlaps(jax.random.key(0), problem.d, 1000, "sphere")
        ts = np.linspace(0.0, 100.0, 3)
        def work():
            solved = slr.solve_flow(problem, m0, ts, rtol=1e-8)
            assert bool(np.asarray(solved.ok).all())
            jax.block_until_ready(solved.ys)
    """,
    ),
    "fixed_points": (
        "solves",
        """
        import flowsim
        from flowsim import slr
        problem = slr.Problem(d=400, L=10, lam=0.1)
        starts = slr.initial_overlaps(jax.random.key(0), problem.d, 256, "sphere")
        def work():
            assert flowsim.fixed_points(problem, starts)
    """,
    ),
    "chain": (
        "training",
        """
        from flowsim import slr
        problem = slr.Problem(d=80, L=10, lam=2.0, eps=0.1)
        def work():
            run = slr.run_sgd(problem, 0, lr=1e-3, steps=20_000, batch=5, log_every=1000, seeds=30, engine="overlaps")
            jax.block_until_ready(run.ys)
    """,
    ),
    "readout": (
        "training",
        """
        from flowsim.tasks import latent
        task = latent.Readout(d=4, tau=1.0, sigma=1.0, eps=0.1)
        def work():
            run = latent.train_readout(task, 3, L=64, n=500, n_test=200, lr=0.05, steps=200, log_every=10, seeds=3)
            jax.block_until_ready(run.risk)
    """,
    ),
    "sgd_rd": (
        "training",
        """
        from flowsim import slr
        from flowsim.sgd import logged_programs
        from flowsim.tasks.slr import _sgd
        _sgd._RD = logged_programs(_sgd._rd_seed, "training")
        problem = slr.Problem(d=80, L=10, lam=2.0, eps=0.1)
        def work():
            run = slr.run_sgd(problem, 0, lr=1e-3, steps=2_000, batch=5, log_every=100, seeds=8, engine="rd")
            jax.block_until_ready(run.ys)
    """,
    ),
}

CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
import jax
import numpy as np
import flowsim._compile
if {defaults!r}:
    flowsim._compile.OPTIONS[{kind!r}] = {{}}
{setup}
began = time.perf_counter(); work(); first = time.perf_counter() - began
runs = []
for _ in range(2):
    began = time.perf_counter(); work(); runs.append(time.perf_counter() - began)
print(json.dumps({{"first": first, "run": min(runs), "options": flowsim._compile.compiler_options({kind!r})}}))
"""


def in_new_process(code: str, what: str, cache: str | None = None, tree: str | None = None) -> dict:
    """Run `code` in a new process on one CPU device; the JSON of its last line.

    Its compilation cache is the folder `cache` (as another process left it), or else an empty one; its flowsim
    the checkout `tree` (PYTHONPATH), if given, else the installed one."""
    with tempfile.TemporaryDirectory() as empty:
        env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache or empty, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
        env.pop("XLA_FLAGS", None)  # one CPU device, whatever the caller's split
        if tree is not None:
            env["PYTHONPATH"] = tree
        # From a folder outside any checkout: `python -c` puts the working folder first on sys.path, where a
        # checkout's flowsim would shadow the one asked for.
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=empty)
    if done.returncode:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(workload: str, defaults: bool) -> dict:
    """One new process: the workload's first call and its fastest later call, in seconds."""
    kind, setup = SETUP[workload]
    code = CHILD.format(here=str(HERE), defaults=defaults, kind=kind, setup=textwrap.dedent(setup))
    return in_new_process(code, workload)


def checkout(path: str) -> str:
    """argparse type of a --trees entry: a checkout of flowsim (a folder holding flowsim/__init__.py)."""
    if not os.path.isfile(os.path.join(path, "flowsim", "__init__.py")):
        raise argparse.ArgumentTypeError(f"{path!r} is not a checkout of flowsim (no flowsim/__init__.py there)")
    return path


def parse_workloads(description: str, workloads: dict) -> argparse.Namespace:
    """The command line of a script that alternates two settings over named workloads: --rounds, --workloads."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=2, help="alternated pairs of processes per workload")
    parser.add_argument("--workloads", default=",".join(workloads), help=f"comma-separated, of {', '.join(workloads)}")
    args = parser.parse_args()
    args.workloads = args.workloads.split(",")
    unknown = sorted(set(args.workloads) - set(workloads))
    if unknown or args.rounds < 1:
        parser.error(f"--workloads takes {', '.join(workloads)} (got {', '.join(unknown)}); --rounds >= 1")
    return args


def alternated(measure, workload: str, rounds: int) -> dict[bool, list[dict]]:
    """`measure(workload, setting)` for the settings True then False, `rounds` times: each setting's results."""
    results = {True: [], False: []}
    for _ in range(rounds):
        for setting in results:
            results[setting].append(measure(workload, setting))
    return results


def main():
    args = parse_workloads(__doc__.splitlines()[0], SETUP)
    print(f"# compile options: {machine()}; load average at start {os.getloadavg()[0]:.2f}")
    print("workload | options | first call s (each round) | compile s (first - run) | run s (each round)")
    for workload in args.workloads:
        rows = alternated(measure, workload, args.rounds)
        for defaults, results in rows.items():
            name = "XLA defaults" if defaults else json.dumps(results[0]["options"])
            firsts = " / ".join(f"{r['first']:.2f}" for r in results)
            compiles = " / ".join(f"{r['first'] - r['run']:.2f}" for r in results)
            runs = " / ".join(f"{r['run']:.3f}" for r in results)
            print(f"{workload} | {name} | {firsts} | {compiles} | {runs}", flush=True)
    print(f"# load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
