"""Cost of online SGD (flowsim.tasks.slr.run_sgd, mode "online") per step against drawing that step's samples.

Issue 4's target: a step of online SGD costs at most twice the time it takes to draw the
step's Gaussian samples. Both are measured in the same run, on the same seeds and steps:

- SGD: `run_sgd(problem, key, mode="online", batch=B, steps=S, seeds=N, log_every=S)` (one
  log at the end, so the closed-form risk is evaluated twice per seed, not per step);
- baseline: a jitted `lax.scan` over the same S steps, vmapped over the same N seeds, that
  draws exactly the samples run_sgd draws (`flowsim.tasks.slr._data.sample` with the same hidden
  directions and the same `fold_in(data key, step)` keys) and only sums X and y (so XLA cannot
  drop any of the draws).

Each is called once to compile (excluded) and then `--repeats` times; the fastest call is
reported, per step (all seeds together). The compile time is the first call minus the fastest.

Also timed: the SGD run of the paper's table (d = 80, L = 10, batch 5, 30 seeds, lr 1e-3,
lam = 2 / (1 + 1e-4 step), eps = 0.1, gamma = sqrt(1/2), sphere init, 200000 steps, logged
every 1000 steps), on a fraction of its steps (`--paper-steps`, 20000 by default), extrapolated
linearly to 200000 (the cost per step does not depend on the step).

Usage: python benchmarks/sgd_cost.py [--quick] [--dtype float32]
"""

import argparse
import math
import os
import platform
import subprocess
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim import slr
from flowsim.integrate import traced
from flowsim.schedules import InverseTimeDecay
from flowsim.tasks.slr._data import ground_truth, sample

#: (d, L, batch, seeds, steps): seeds and steps chosen so that a timed SGD call lasts > 1 s on a
#: 2-core CPU. The largest shape draws 25.6M Gaussians per seed and step, so it runs 2 seeds
#: (30 seeds would need ~6 GB per buffer of X in float64).
CONFIGS = [(80, 10, 5, 30, 1000), (400, 10, 64, 30, 10), (4000, 100, 64, 2, 4)]
QUICK_CONFIGS = [(80, 10, 5, 4, 200), (400, 10, 64, 4, 4), (4000, 100, 64, 1, 2)]

PAPER = dict(d=80, L=10, batch=5, seeds=30, lr=1e-3, lam0=2.0, rate=1e-4, eps=0.1, steps=200_000, log_every=1000)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs, a smoke test")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls after the compiling one (fastest kept)")
    parser.add_argument("--paper-steps", type=int, default=20_000, help="steps of the paper's run actually timed")
    parser.add_argument("--lr", type=float, default=1e-3, help="step size of the cost runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64", help="of the vectors and data")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.paper_steps = 1, 2000
    return args


@eqx.filter_jit
def _draw_only(problem, seed_keys, steps, batch, dtype):
    """Per seed: the same hidden directions and data keys as run_sgd, the same samples per step, summed."""

    def one_seed(seed_key):
        key_truth, _, key_data, _ = jax.random.split(seed_key, 4)
        truth = ground_truth(key_truth, problem.d)

        def step(total, n):
            X, y, _ = sample(problem, truth, jax.random.fold_in(key_data, n), batch, dtype)
            return total + jnp.sum(X) + jnp.sum(y), None

        total, _ = jax.lax.scan(step, jnp.zeros(()), jnp.arange(steps))
        return total

    return jax.vmap(one_seed)(seed_keys)


def counts(text: str) -> list[int]:
    """An argparse type: comma-separated counts ("30,3000", "1e4,1e6"), each an integer >= 1."""
    try:
        values = [float(item) for item in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 1 or v != int(v) for v in values):
        raise argparse.ArgumentTypeError(f"comma-separated integers >= 1 expected, got {text!r}")
    return [int(v) for v in values]


def timed(function, repeats):
    """(first call's wall time, fastest of `repeats` further calls)."""
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times[0], min(times[1:])


def cost_row(d, L, batch, seeds, steps, args):
    problem = slr.Problem(d, L, 0.5, math.sqrt(0.5), 0.1)
    key = jax.random.key(args.seed)

    def sgd():
        run = slr.run_sgd(
            problem, key, lr=args.lr, steps=steps, batch=batch, seeds=seeds, log_every=steps, dtype=args.dtype
        )
        assert not run.failures(), run.failures()

    def draw():
        dtype = jnp.dtype(args.dtype)
        jax.block_until_ready(_draw_only(traced(problem), jax.random.split(key, seeds), steps, batch, dtype))

    sgd_first, sgd_best = timed(sgd, args.repeats)
    draw_first, draw_best = timed(draw, args.repeats)
    return dict(
        d=d,
        L=L,
        batch=batch,
        seeds=seeds,
        steps=steps,
        gaussians=seeds * batch * (L * d + 1),
        sgd_step=sgd_best / steps,
        draw_step=draw_best / steps,
        ratio=sgd_best / draw_best,
        sgd_compile=sgd_first - sgd_best,
        draw_compile=draw_first - draw_best,
        sgd_total=sgd_best,
    )


def paper_row(args):
    p = PAPER
    steps = args.paper_steps
    log_every = math.gcd(p["log_every"], steps)
    lam = InverseTimeDecay(p["lam0"], p["rate"], p["lr"])  # the schedule is part of the problem
    problem = slr.Problem(p["d"], p["L"], lam, math.sqrt(0.5), p["eps"])

    def sgd():
        slr.run_sgd(
            problem,
            jax.random.key(args.seed),
            lr=p["lr"],
            steps=steps,
            batch=p["batch"],
            seeds=p["seeds"],
            log_every=log_every,
            dtype=args.dtype,
        )

    first, best = timed(sgd, 1)
    return dict(steps=steps, log_every=log_every, wall=best, compile=first - best, per_step=best / steps)


def machine():
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model = platform.processor() or "unknown"
    return (
        f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}; Python {platform.python_version()},"
        f" jax {jax.__version__}, numpy {np.__version__}, device {jax.devices()[0]}"
    )


def main():
    args = parse_args()
    print(f"machine: {machine()}")
    print(f"{args.dtype}, lr = {args.lr}, fastest of {args.repeats} timed calls after a compiling call\n")
    header = (
        f"{'d':>5} {'L':>4} {'batch':>5} {'seeds':>5} {'steps':>5} {'Gaussians/step':>14} "
        f"{'SGD ms/step':>11} {'draw ms/step':>12} {'ratio':>6} {'SGD compile s':>13} {'draw compile s':>14}"
    )
    print(header)
    print("-" * len(header))
    for config in QUICK_CONFIGS if args.quick else CONFIGS:
        r = cost_row(*config, args)
        print(
            f"{r['d']:>5} {r['L']:>4} {r['batch']:>5} {r['seeds']:>5} {r['steps']:>5} {r['gaussians']:>14,} "
            f"{1e3 * r['sgd_step']:>11.3f} {1e3 * r['draw_step']:>12.3f} {r['ratio']:>6.2f} "
            f"{r['sgd_compile']:>13.1f} {r['draw_compile']:>14.1f}",
            flush=True,
        )
    print()
    r = paper_row(args)
    total = r["per_step"] * PAPER["steps"]
    print(
        f"paper's SGD run (d=80, L=10, batch 5, 30 seeds, lam = 2/(1 + 1e-4 step), lr 1e-3): "
        f"{r['steps']} steps logged every {r['log_every']} took {r['wall']:.2f} s "
        f"({1e3 * r['per_step']:.3f} ms/step, compile {r['compile']:.1f} s excluded); "
        f"200000 steps extrapolated: {total:.0f} s = {total / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
