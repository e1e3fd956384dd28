"""The reproduction's SGD chain against its random numbers' floor, float64 and float32 draws.

The paper's SGD experiment (d = 80, L = 10, batch 5, lr 1e-3, lam = 2 / (1 + 1e-4 step),
eps = 0.1, sphere init) runs as the exact online-SGD chain on the five overlaps
(`slr.run_sgd(..., engine="overlaps")`, as `flowsim reproduce` runs it). A step draws
`draws_per_step(5, 10)` = 124 standard normals and two chi-squares per seed. Timed per step (all
seeds together), each the fastest of `--repeats` calls after a compiling one, in one process:

- chain: `run_sgd` itself, logged every 1 000 steps (the reproduction's layout);
- draws: a jitted program that draws exactly the chain's random numbers (`Problem.sgd_noise` on
  the same `fold_in(data key, step)` keys, in the chain's chunks of 250 steps, vmapped over the
  same seeds) and sums them (so XLA drops none): the chain's floor;
- normals float64 / float32: the same count of standard normals alone (no chi-squares), in each
  dtype: what the floor would be if the chain drew its normals in float32 (it does not: the chain
  is float64 throughout).

`--seeds` takes several counts: 30 is the paper's; larger counts show what a device with many
cores does with more chains side by side (the steps are sequential, the seeds are not).

Usage: python benchmarks/chain_floor.py [--quick] [--seeds 30,3000] [--steps 20000]
"""

import argparse
import os

import jax
import jax.numpy as jnp
from overlap_sgd import PAPER, paper_problem  # sibling scripts: run this one as python benchmarks/chain_floor.py
from sgd_cost import counts, machine, timed

from flowsim import slr
from flowsim.sgd import _chunk_size
from flowsim.tasks.slr._overlap_sgd import draws_per_step


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small runs, a smoke test")
    parser.add_argument("--seeds", type=counts, default="30,3000", help="comma-separated seed counts")
    parser.add_argument("--steps", type=int, default=20_000, help="steps timed (a multiple of 1000)")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls after the compiling one (fastest kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.repeats = [4], 2000, 1
    if args.steps < PAPER["log_every"] or args.steps % PAPER["log_every"]:
        parser.error(f"--steps must be a positive multiple of {PAPER['log_every']}, got {args.steps}")
    return args


def _summed_draws(draw, steps):
    """A jitted function of the seeds' data keys: `draw(key)` for every step, summed per seed.

    Drawn as the chain draws them (`flowsim.sgd.logged_programs`): a chunk of steps at once
    (vmapped over the steps' `fold_in` keys), chunks in a scan; summed so that XLA drops nothing.
    """
    chunk = _chunk_size(PAPER["log_every"])

    @jax.jit
    def run(data_keys):
        def one_seed(key):
            def one_chunk(total, first):
                draws = jax.vmap(lambda index: draw(jax.random.fold_in(key, index)))(first + jnp.arange(chunk))
                return total + sum(jnp.sum(x) for x in jax.tree.leaves(draws)), None

            return jax.lax.scan(one_chunk, jnp.zeros(()), chunk * jnp.arange(steps // chunk))[0]

        return jax.vmap(one_seed)(data_keys)

    return run


def row(problem, seeds, args):
    key = jax.random.key(args.seed)
    data_keys = jax.vmap(lambda k: jax.random.split(k)[1])(jax.random.split(key, seeds))

    def chain():
        run = slr.run_sgd(
            problem,
            key,
            lr=PAPER["lr"],
            steps=args.steps,
            batch=PAPER["batch"],
            seeds=seeds,
            log_every=PAPER["log_every"],
            engine="overlaps",
        )
        assert not run.failures(), run.failures()

    count = draws_per_step(PAPER["batch"], PAPER["L"])
    floors = {
        "draws": lambda key: problem.sgd_noise(key, PAPER["batch"]),
        "normals float64": lambda key: jax.random.normal(key, (count,), jnp.float64),
        "normals float32": lambda key: jax.random.normal(key, (count,), jnp.float32),
    }
    results = {"chain": timed(chain, args.repeats)}
    for what, draw in floors.items():
        run = _summed_draws(draw, args.steps)
        results[what] = timed(lambda run=run: jax.block_until_ready(run(data_keys)), args.repeats)
    return results


def main():
    args = parse_args()
    problem = paper_problem()
    print(f"# chain floor: {machine()}")
    print(
        f"# the paper's SGD chain on the overlaps (d = 80, L = 10, batch 5), {args.steps} steps timed, "
        f"{draws_per_step(PAPER['batch'], PAPER['L'])} normals + 2 chi-squares per seed and step; "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    header = f"{'seeds':>6} {'what':<16} {'us/step':>9} {'ns/seed-step':>13} {'x draws':>8} {'compile s':>9}"
    print(header)
    print("-" * len(header))
    for seeds in args.seeds:
        results = row(problem, seeds, args)
        draws = results["draws"][1]
        for what, (first, best) in results.items():
            per_step = best / args.steps
            print(
                f"{seeds:>6} {what:<16} {per_step * 1e6:>9.2f} {per_step / seeds * 1e9:>13.1f} "
                f"{best / draws:>8.2f} {first - best:>9.1f}",
                flush=True,
            )
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
