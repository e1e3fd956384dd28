"""The authors' two-head experiment reproduced (issue 56): its time on the CPU and the outcome shares.

Marion et al.'s appendix E.3 (docs/heads.md): H = 2 heads, S = 2 informative locations, d = 80, L = 10,
eps = 0.1, gamma = sqrt(1/2), projected SGD with step 1e-3 and batch 5, lam0 = 2 with lam_t = lam0 / (1 + 2e-4 t) to
t = 25 000 then fixed, 100 000 steps, k_h, v_h uniform on the sphere; --seeds seeds (default 200) in blocks of
--block, then the population flow from the same starts to t = 100 (`reproduce_heads`). The seeds run split over one
JAX device per core (as the `flowsim` executable runs them).

Printed: the estimate before work; the baseline, drawing the batches' normal numbers alone (batch x L x d per seed
and step, float32, the cost the issue names as dominant), timed on 1 000 steps and scaled to the run; the SGD's
seconds and their ratio to it; the seconds per drawn number (`_heads_sgd.HEADS_SGD_SECONDS`); the flow's seconds per
trajectory (`HeadsProblem.flow_cost`); the outcome shares of SGD and of the flow with exact binomial
intervals beside the authors' 5/20 specialised and 10/20 collapsed; and whether the reproduction took under ten
minutes. --shared-noise draws the batches with the authors' code's quirk (one noise vector shared by the
informative tokens; no flow). The machine's load average is printed: on a CPU shared with other work the seconds
are upper bounds.

Usage: python benchmarks/heads_reproduction.py [--seeds N] [--block N] [--steps N] [--shared-noise] [--no-flow]
[--save FILE.npz]
"""

import argparse
import math
import os
import platform
import time

from flowsim.devices import use_host_cores

use_host_cores()  # before JAX starts: one device per core

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from flowsim import slr  # noqa: E402
from flowsim._memory import format_seconds  # noqa: E402
from flowsim.schedules import InverseTimeDecay  # noqa: E402
from flowsim.tasks.slr._heads_outcome import OUTCOMES, reproduce_heads  # noqa: E402
from flowsim.tasks.slr._heads_problem import HeadsProblem  # noqa: E402
from flowsim.tasks.slr._heads_sgd import heads_sgd_work  # noqa: E402

BATCH, LR = 5, 1e-3


def _draws_alone(seeds: int, steps: int, shape: tuple[int, ...]) -> float:
    """Seconds to draw `steps` batches of float32 normal numbers of `shape` for `seeds` seeds (vmap + scan, compiled
    before it is timed)."""

    @jax.jit
    def run(keys):
        def one(key):
            def step(total, index):
                return total + jnp.sum(jax.random.normal(jax.random.fold_in(key, index), shape, jnp.float32)), None

            return jax.lax.scan(step, jnp.zeros((), jnp.float32), jnp.arange(steps))[0]

        return jax.vmap(one)(keys)

    keys = jax.random.split(jax.random.key(0), seeds)
    run(keys).block_until_ready()
    start = time.perf_counter()
    run(keys).block_until_ready()
    return time.perf_counter() - start


def _shares(title: str, shares) -> None:
    print(f"\n{title}")
    print(
        f"{'outcome':12} {'count':>9} {'share':>6} {'95% interval':>16} {'authors':>8} {'theirs inside':>14}"
        f" {'Fisher p':>9}"
    )
    for row in shares:
        interval = f"[{row.low:.3f}, {row.high:.3f}]"
        print(
            f"{row.outcome:12} {row.count:>4}/{row.n:<4} {row.share:>6.3f} {interval:>16}"
            f" {row.authors:>5}/{row.authors_n} {'yes' if row.inside else 'no':>14} {row.p_value:>9.3g}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--shared-noise", action="store_true")
    parser.add_argument("--no-flow", action="store_true")
    parser.add_argument("--save", default=None, help="an .npz file for the initial and final states")
    args = parser.parse_args()
    data = slr.marion_slr(80, 10, math.sqrt(0.5), 0.1, locations=2)
    problem = HeadsProblem(data, heads=2, lam=InverseTimeDecay(2.0, 2e-4, LR, until=25_000))
    flow = not (args.no_flow or args.shared_noise)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {jax.device_count()} JAX devices")
    print(f"load average before: {os.getloadavg()}")
    print(f"{problem.describe()}; {args.seeds} seeds x {args.steps} steps, batch {BATCH}, lr {LR:g}")
    _, costs = heads_sgd_work(problem, args.seeds, args.steps, BATCH, args.steps // 1000)
    if flow:
        costs.append(problem.flow_cost(args.seeds, LR * args.steps))
    for cost in costs:
        print(f"estimate before work: {cost.what}: {format_seconds(cost.seconds)}")
    print(f"estimate before work, in all: {format_seconds(sum(cost.seconds for cost in costs))}")

    baseline_steps = 1000
    draws = _draws_alone(args.seeds, baseline_steps, (BATCH, problem.L, problem.d)) * args.steps / baseline_steps
    print(f"\nbaseline, the normal numbers alone (float32, scaled from {baseline_steps} steps): {draws:.1f} s")

    seconds = {"sgd": 0.0, "flow": 0.0}

    def timed(name, compute):
        start = time.perf_counter()
        value = compute()
        seconds["flow" if name == "flow" else "sgd"] += time.perf_counter() - start
        return value

    start = time.perf_counter()
    result = reproduce_heads(
        problem, 0, seeds=args.seeds, block=args.block, lr=LR, steps=args.steps, batch=BATCH, flow=flow,
        shared_noise=args.shared_noise, unit=timed, log=lambda line: print(f"  {line}", flush=True),
    )  # fmt: skip
    total = time.perf_counter() - start
    drawn = args.seeds * args.steps * BATCH * problem.L * problem.d
    print(f"\nSGD: {seconds['sgd']:.1f} s ({seconds['sgd'] / draws:.2f} x the normal numbers alone), "
          f"{seconds['sgd'] / drawn:.3g} s per drawn number")  # fmt: skip
    if flow:
        print(f"flow: {seconds['flow']:.1f} s for {args.seeds} trajectories, {seconds['flow'] / args.seeds:.3g} s each")
    print(f"in all: {total:.1f} s ({format_seconds(total)}); within 10 minutes: {total <= 600}")
    print(f"load average after: {os.getloadavg()}")
    ended = result.ended
    print(f"SGD ended with finite heads: {int(ended.sum())} of {args.seeds}")
    quirk = " (the authors' shared noise)" if args.shared_noise else ""
    _shares(f"SGD's outcomes{quirk}, thresholds {result.k_threshold:g}, {result.v_threshold:g}", result.shares)
    if flow:
        _shares("the flow's outcomes from the same starts", result.flow_shares)
        both = ended & (result.flow_outcomes >= 0)
        table = np.zeros((len(OUTCOMES), len(OUTCOMES)), int)
        np.add.at(table, (result.outcomes[both], result.flow_outcomes[both]), 1)
        print("\nseeds by SGD's outcome (rows) and the flow's (columns):", ", ".join(OUTCOMES))
        print(table)
    excess = result.risk[ended, -1] - float(data.noise) ** 2
    print(f"\nfinal excess population risk (the model's): median {np.median(excess):.3f}, "
          f"quartiles {np.quantile(excess, 0.25):.3f} to {np.quantile(excess, 0.75):.3f}")  # fmt: skip
    if args.save:
        np.savez(args.save, initial=result.initial, final=result.final, outcomes=result.outcomes,
                 flow_final=result.flow_final if flow else np.nan)  # fmt: skip


if __name__ == "__main__":
    main()
