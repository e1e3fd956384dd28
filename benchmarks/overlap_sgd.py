"""Online SGD on the five overlaps (run_sgd(engine="overlaps")) against SGD in R^d (engine="rd").

Issue 5's targets, all measured in one process:

1. The paper's SGD experiment (d = 80, L = 10, batch 5, 200 000 steps, 30 seeds, lr 1e-3,
   lam = 2 / (1 + 1e-4 step), eps = 0.1, sphere init, logged every 1 000 steps): the overlap
   engine runs it in full; the R^d engine runs its first `--rd-steps` steps, extrapolated
   linearly to 200 000 (a step's cost does not depend on the step). Target: <= 5 s for the
   overlap engine.
2. Cost per seed and step against d in {80, 1e3, 1e4, 1e5, 1e6} (L = 10, batch 5): flat for the
   overlap engine; the ratio to the R^d engine at each d (fewer seeds and steps in R^d at large d,
   where one step draws 50 d Gaussians per seed).
3. `slr.reproduce` (all five experiments, 30 seeds, full lengths, figures written): target <= 20 s.

Every timing is the fastest of `--repeats` calls after a compiling call (compile reported apart),
except `reproduce`, timed once in a fresh state as a user runs it (compilation included).

Usage: python benchmarks/overlap_sgd.py [--quick]
"""

import argparse
import math
import tempfile
import time
from functools import partial

import jax
from sgd_cost import machine, timed  # a sibling script: run this one as python benchmarks/overlap_sgd.py

from flowsim import slr
from flowsim.schedules import InverseTimeDecay

PAPER = dict(d=80, L=10, batch=5, seeds=30, lr=1e-3, lam0=2.0, rate=1e-4, eps=0.1, steps=200_000, log_every=1000)
#: d -> (seeds, steps) of the R^d engine's timed call (the overlap engine always runs 30 seeds x 20 000 steps).
RD_SIZES = {80: (30, 2000), 1_000: (30, 200), 10_000: (4, 20), 100_000: (1, 5), 1_000_000: (1, 2)}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs, a smoke test")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls after the compiling one (fastest kept)")
    parser.add_argument("--rd-steps", type=int, default=10_000, help="steps of the paper's run timed in R^d")
    parser.add_argument("--skip-reproduce", action="store_true", help="skip the timing of slr.reproduce")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.rd_steps = 1, 1000
    return args


def paper_problem():
    """The paper's SGD problem: d = 80, L = 10, eps = 0.1, gamma = sqrt(1/2), lam = 2 / (1 + 1e-4 step)."""
    p = PAPER
    lam = InverseTimeDecay(p["lam0"], p["rate"], p["lr"])  # the schedule is part of the problem
    return slr.Problem(p["d"], p["L"], lam, math.sqrt(0.5), p["eps"])


def _paper_run(engine, steps, seed):
    p = PAPER
    run = slr.run_sgd(
        paper_problem(),
        jax.random.key(seed),
        lr=p["lr"],
        steps=steps,
        batch=p["batch"],
        seeds=p["seeds"],
        log_every=math.gcd(p["log_every"], steps),
        engine=engine,
    )
    assert not run.failures(), run.failures()


def paper(args):
    steps = 20_000 if args.quick else PAPER["steps"]
    first, best = timed(lambda: _paper_run("overlaps", steps, args.seed), args.repeats)
    rd_first, rd_best = timed(lambda: _paper_run("rd", args.rd_steps, args.seed), args.repeats)
    overlaps_total = best * PAPER["steps"] / steps
    rd_total = rd_best * PAPER["steps"] / args.rd_steps
    print(
        f"paper's SGD run, 200 000 steps x 30 seeds: overlap engine {overlaps_total:.2f} s "
        f"({steps} steps timed, compile {first - best:.1f} s excluded); R^d engine {rd_total:.0f} s "
        f"(extrapolated from {args.rd_steps} steps in {rd_best:.1f} s, compile {rd_first - rd_best:.1f} s); "
        f"ratio {rd_total / overlaps_total:.0f}x",
        flush=True,
    )


def cost_per_d(args):
    print(f"\n{'d':>9} {'overlaps us/seed-step':>22} {'R^d us/seed-step':>17} {'R^d seeds x steps':>18} {'ratio':>9}")
    steps = 2000 if args.quick else 20_000
    for d, (rd_seeds, rd_steps) in RD_SIZES.items():
        if args.quick and d > 10_000:
            continue
        problem = slr.Problem(d, 10, 0.5, math.sqrt(0.5), 0.1)

        def run(engine, seeds, steps, problem=problem):
            slr.run_sgd(
                problem,
                jax.random.key(args.seed),
                lr=1e-3,
                steps=steps,
                batch=5,
                seeds=seeds,
                log_every=steps,
                engine=engine,
            )

        _, overlaps = timed(partial(run, "overlaps", 30, steps), args.repeats)
        _, rd = timed(partial(run, "rd", rd_seeds, rd_steps), args.repeats)
        per_overlaps, per_rd = overlaps / (30 * steps), rd / (rd_seeds * rd_steps)
        print(
            f"{d:>9} {1e6 * per_overlaps:>22.2f} {1e6 * per_rd:>17.1f} {f'{rd_seeds} x {rd_steps}':>18} "
            f"{per_rd / per_overlaps:>9.0f}",
            flush=True,
        )


def reproduce(args):
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        results = slr.reproduce(jax.random.key(args.seed), quick=args.quick, seeds=30, out=out)
    wall = time.perf_counter() - start
    parts = ", ".join(f"{r.experiment.name} {r.seconds:.1f} s" for r in results)
    print(f"\nslr.reproduce ({'quick' if args.quick else 'full'}, 30 seeds, figures): {wall:.1f} s ({parts})")


def main():
    args = parse_args()
    print(f"machine: {machine()}; float64\n")
    if not args.skip_reproduce:
        reproduce(args)  # first, as a user's fresh process would meet it
    paper(args)
    cost_per_d(args)


if __name__ == "__main__":
    main()
