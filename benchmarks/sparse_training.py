"""Cost per trained model: flowsim's vmapped training against a plain per-model Python loop, and the cost of a
training step computed from the bits' matrix products (`logits`) against the same step token by token.

flowsim trains K attention heads at once (`sparse.train`: one compiled program per group of models, the steps
in `lax.scan` segments of a `lax.while_loop`, the models in `vmap`). The first baseline is what third-party
reimplementations do: one model at a time, a jitted Adam step (the same loss, the same optax optimiser)
called from a Python loop over the steps, each sample's [CLS] row computed token by token (softmax over its T
scores). Both train the same models on the same data for the same number of steps; the baseline is timed over
--loop-steps steps of --loop-models models (after a compile call) and extrapolated to the full training. Each
is timed after a first, compiling call. The ratio is the baseline's seconds per model over flowsim's.

`--step-Ts` times one model's Adam step (in a compiled scan of --loop-steps steps, after a compiling call) with
the learner's batched `logits` (sums over the tokens as products of the (m, T) bits with shared (T, features)
matrices) against the token-by-token form of the same model (a (m, T) softmax per head): the head and the paper's
Transformer, at m = 8 log2 C(T, 3) (the search's largest size).

Usage: python benchmarks/sparse_training.py [--Ts 64 256] [--models 48] [--m 128] [--steps 1000]
       [--step-Ts 1024 4096]
"""

import argparse
import math
import os
import platform
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from flowsim.tasks import sparse
from flowsim.tasks.sparse._model import AttentionHead, OneLayerTransformer


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--Ts", type=int, nargs="*", default=[64, 256, 1024])
    parser.add_argument("--models", type=int, default=48, help="models per call (seeds x sample sizes)")
    parser.add_argument("--m", type=int, default=128, help="training samples per model")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--loop-models", type=int, default=2, help="models the Python loop is timed on")
    parser.add_argument("--loop-steps", type=int, default=200, help="steps the Python loop is timed on")
    parser.add_argument("--step-Ts", type=int, nargs="*", default=[1024, 4096], help="T of the step comparison")
    return parser.parse_args()


def head_token_by_token(model, x):
    """The head's logit of one input from its T scores (c_l + x_l delta) and their softmax (the form flowsim
    computed before its bit-linear sums)."""
    a = model.attention(x)
    attended = model.bits[0] + (a @ x) * (model.bits[1] - model.bits[0]) + a @ model.positions
    return model.readout(model.values @ attended)


def transformer_token_by_token(model, x):
    """The Transformer's [CLS] logit of one input from its 2T shared keys and values, each head's [CLS] row a
    softmax over the input's T + 1 scores (the form flowsim computed before its bit-linear sums)."""
    (keys, values), (cls_key, cls_value, query) = model.token_keys_values()
    on_cls, on_tokens = model._scores(x, keys, cls_key, query)
    weights = jax.nn.softmax(jnp.concatenate([on_cls[:, None], on_tokens], axis=1), axis=1)
    a = weights[:, 1:]
    attended = weights[:, :1] * cls_value + jnp.einsum("ht,thd->hd", a, values[0])
    attended = attended + jnp.einsum("ht,thd->hd", a * x, values[1] - values[0])
    return model._output(attended.reshape(-1))


def step_seconds(model, x, y, steps, logits):
    """Seconds per full-batch Adam step of one model, the steps in one compiled scan (timed after compiling)."""
    params, static = eqx.partition(model, eqx.is_array)
    optimiser = optax.adam(1e-3)

    @jax.jit
    def run(params):
        def loss(params):
            return jnp.mean(optax.sigmoid_binary_cross_entropy(logits(eqx.combine(params, static), x), y))

        def step(carry, _):
            params, state = carry
            updates, state = optimiser.update(jax.grad(loss)(params), state, params)
            return (optax.apply_updates(params, updates), state), None

        return loss(jax.lax.scan(step, (params, optimiser.init(params)), None, length=steps)[0][0])

    run(params).block_until_ready()
    began = time.perf_counter()
    run(params).block_until_ready()
    return (time.perf_counter() - began) / steps


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
            logits = jax.vmap(head_token_by_token, (None, 0))(eqx.combine(params, static), x)
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
    if args.step_Ts:
        print("\nlearner | T | m | batched logits: ms per step | token by token: ms per step | ratio")
    forms = {
        "head": (AttentionHead, head_token_by_token),
        "transformer": (OneLayerTransformer, transformer_token_by_token),
    }
    for learner, (model_class, token_by_token) in forms.items():
        for T in args.step_Ts:
            m = 8 * math.ceil(math.log2(math.comb(T, 3)))
            x, y, *_ = data(T, 1, m, n_validation=0)
            x, y = jnp.asarray(x[0]), jnp.asarray(y[0])
            model = model_class(T, key=jax.random.key(0))
            batched = step_seconds(model, x, y, args.loop_steps, lambda model, x: model.logits(x))
            direct = step_seconds(model, x, y, args.loop_steps, jax.vmap(token_by_token, (None, 0)))
            print(f"{learner} | {T} | {m} | {batched * 1e3:.2f} | {direct * 1e3:.2f} | {direct / batched:.1f}x",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
