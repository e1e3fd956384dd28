"""Cost per trained model: flowsim's vmapped training against a plain per-model Python loop.

flowsim trains K attention heads at once (`sparse.train`: one compiled program per group of models, the steps
in `lax.scan` segments of a `lax.while_loop`, the models in `vmap`). The baseline is what third-party
reimplementations do: one model at a time, a jitted Adam step (the same loss, the same optax optimiser)
called from a Python loop over the steps. Both train the same models on the same data for the same number
of steps; the baseline is timed over --loop-steps steps of --loop-models models (after a compile call) and
extrapolated to the full training. Each is timed after a first, compiling call. The ratio is the baseline's
seconds per model over flowsim's.

Usage: python benchmarks/sparse_training.py [--Ts 64 256] [--models 48] [--m 128] [--steps 1000]
"""

import argparse
import os
import platform
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from flowsim.tasks import sparse
from flowsim.tasks.sparse._model import AttentionHead


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--Ts", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--models", type=int, default=48, help="models per call (seeds x sample sizes)")
    parser.add_argument("--m", type=int, default=128, help="training samples per model")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--loop-models", type=int, default=2, help="models the Python loop is timed on")
    parser.add_argument("--loop-steps", type=int, default=200, help="steps the Python loop is timed on")
    return parser.parse_args()


def data(T, models, m, n_validation=500):
    target = sparse.SparseTarget(T, 3)
    supports, xs, ys, x_val, y_val = [], [], [], [], []
    for i in range(models):
        support, table = target.draw_support(i)
        x = sparse.sample_bits(target, 1000 + i, m + n_validation)
        y = sparse.evaluate_target(x, support, table)
        supports.append(np.asarray(support))
        xs.append(np.asarray(x[:m], float))
        ys.append(np.asarray(y[:m], float))
        x_val.append(np.asarray(x[m:], float))
        y_val.append(np.asarray(y[m:], float))
    return np.stack(xs), np.stack(ys), np.ones((models, m)), np.stack(supports), np.stack(x_val), np.stack(y_val)


def python_loop(T, x, y, steps, key):
    """One model: a jitted Adam step called `steps` times from Python (the baseline)."""
    model = AttentionHead(T, key=key)
    params, static = eqx.partition(model, eqx.is_array)
    optimiser = optax.adam(1e-2)
    state = optimiser.init(params)

    @jax.jit
    def step(params, state):
        def loss(params):
            logits = jax.vmap(eqx.combine(params, static))(x)
            return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, y))

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = optimiser.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    params, state, value = step(params, state)  # compile
    value.block_until_ready()
    began = time.perf_counter()
    for _ in range(steps):
        params, state, value = step(params, state)
    value.block_until_ready()
    return time.perf_counter() - began


def main():
    args = parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    print(f"jax {jax.__version__}; {args.models} models x m = {args.m} samples x {args.steps} full-batch Adam steps\n")
    print("T | flowsim: first call (s) | run (s) | s per model | loop: s per step | s per model | ratio")
    for T in args.Ts:
        x, y, mask, support, x_val, y_val = data(T, args.models, args.m)

        def flowsim_run(x=x, y=y, mask=mask, support=support, x_val=x_val, y_val=y_val):
            return sparse.train("head", 0, x, y, mask, support, x_val, y_val, steps=args.steps, log_every=100)

        began = time.perf_counter()
        flowsim_run()
        first = time.perf_counter() - began
        began = time.perf_counter()
        flowsim_run()
        run = time.perf_counter() - began
        per_step = np.mean(
            [
                python_loop(T, jnp.asarray(x[i]), jnp.asarray(y[i]), args.loop_steps, jax.random.key(i))
                / args.loop_steps
                for i in range(args.loop_models)
            ]
        )
        loop_per_model = per_step * args.steps
        ours = run / args.models
        print(
            f"{T} | {first:.1f} | {run:.1f} | {ours:.3f} | {per_step * 1e3:.2f} ms | {loop_per_model:.2f} | "
            f"{loop_per_model / ours:.1f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
