"""Attention's error against L: flowsim's vectorised Monte Carlo against a numpy loop over replicates.

flowsim (`latent.attention_error`, what `flowsim latent error` runs) draws the sequences of every replicate of
an L at once (in chunks of 2^20 tokens, one compiled program per L) and evaluates every attention parameter on
them. The baseline is the loop a user writes with numpy: per replicate, draw the L keys, compute the softmax
weights and the attended value for each parameter. Both do the same work: the tilted-Gaussian model of
docs/science.md section 9 (Sigma = diag(1, .5, .5, .25)), three |a|, L = 2^4 ... 2^16, --replicates per L.
The numpy loop is timed on --loop-replicates replicates per L and scaled to --replicates (its cost is linear
in them). flowsim is timed twice: the first call (compiling) and a second one.

Usage: python benchmarks/latent_error.py [--replicates 2000] [--loop-replicates 200]
"""

import argparse
import os
import platform
import time

import numpy as np

from flowsim.tasks import latent
from flowsim.tasks.latent.cli import A_DIRECTION, SIGMA_DIAGONAL


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--loop-replicates", type=int, default=200)
    parser.add_argument("--max-power", type=int, default=16, help="L = 2^4 ... 2^max_power")
    return parser.parse_args()


def numpy_loop(Sigma, a, Ls, replicates, seed=0):
    """L E||attn_a - lim||^2 per (a, L) by a Python loop over replicates (the baseline)."""
    rng = np.random.default_rng(seed)
    root = np.linalg.cholesky(Sigma)
    limits = a @ Sigma  # location 0, B = I, c = 0: the limit is Sigma a
    out = np.empty((len(a), len(Ls)))
    for j, L in enumerate(Ls):
        errors = np.empty((len(a), replicates))
        for i in range(replicates):
            keys = rng.standard_normal((L, len(Sigma))) @ root.T
            scores = keys @ a.T  # (L, A)
            weights = np.exp(scores - scores.max(axis=0))
            attended = (weights.T @ keys) / weights.sum(axis=0)[:, None]
            errors[:, i] = np.sum((attended - limits) ** 2, axis=-1)
        out[:, j] = L * errors.mean(axis=-1)
    return out


def main():
    args = parse_args()
    Sigma = np.diag(SIGMA_DIAGONAL)
    model = latent.TiltedGaussian(Sigma)
    a = np.outer([0.5, 1.0, 1.5], np.array(A_DIRECTION) / np.linalg.norm(A_DIRECTION))
    Ls = [2**k for k in range(4, args.max_power + 1)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    timings = []
    for call in ("first (compiling)", "second"):
        began = time.perf_counter()
        result = latent.attention_error(0, model, np.zeros(4), a, Ls, args.replicates)
        timings.append(time.perf_counter() - began)
        print(f"flowsim, {call} call: {timings[-1]:.1f} s for {len(Ls)} L x {args.replicates} replicates x 3 |a|")
    began = time.perf_counter()
    loop = numpy_loop(Sigma, a, Ls, args.loop_replicates)
    loop_seconds = (time.perf_counter() - began) * args.replicates / args.loop_replicates
    print(f"numpy loop: {loop_seconds:.1f} s (timed on {args.loop_replicates} replicates per L, scaled)")
    print(f"ratio (numpy loop / flowsim): {loop_seconds / timings[1]:.1f}x (second call), "
          f"{loop_seconds / timings[0]:.1f}x (first call, compiling included)")  # fmt: skip
    # The two agree within Monte Carlo error at the largest L (a check that they compute the same thing).
    se = result.stderr[:, -1] * np.sqrt(args.replicates / args.loop_replicates)
    print("L MSE at the largest L: flowsim", np.round(result.scaled_mse[:, -1], 3), "numpy", np.round(loop[:, -1], 3),
          "(numpy's standard error about", np.round(se, 3), "), predicted", np.round(result.predicted, 3))  # fmt: skip


if __name__ == "__main__":
    main()
