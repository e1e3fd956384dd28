"""The head's reduced critical-sample-size search of tests/test_sparse.py at more input lengths, its trained head
at the earlier, longer settings, and the ERM identifiability at every published T.

tests/test_sparse.py runs the reduced search (4 seeds, 2 rounds of 4 sizes, 1000 Adam steps) at T = 16 and 32 only
(each T compiles the head's training again) and trains the head at T = 32 for 1000 steps on m = 104 or 10 samples;
this runs the search at every T of --Ts (default 16, 32 and 64: the test's earlier pair was 16 and 64) and prints
m*, its bootstrap interval, the median ERM identifiability (100 trials) and the success rate at every size tried,
with the tests' criteria (m* >= ERM, m* non-decreasing in T); then the trained head at T = 32 with m = 160 and 10
samples and 2000 steps (the test's earlier settings): validation accuracy and attention mass on the support; then
the median ERM identifiability of the 3-AND from 200 trials at T = 10, 30, 100, 300 and 1000 against the published
14, 20, 24, 28 and 34 (docs/science.md section 8; the test's band is +-2, and it checks T <= 100).

Usage: python benchmarks/sparse_critical.py [--Ts 16 32 64]
"""

import argparse
import os
import platform
import time

import jax
import numpy as np

from flowsim.tasks import sparse
from flowsim.tasks.sparse import SparseTarget


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--Ts", type=int, nargs="+", default=[16, 32, 64])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    found = []
    for T in args.Ts:
        began = time.perf_counter()
        target = SparseTarget(T, 3)
        result = sparse.critical_sample_size(target, 0, seeds=4, candidates=4, rounds=2, budget=1000, log_every=20)
        erm = float(np.median(sparse.erm_identifiability(target, 1, trials=100)))
        found.append(result.critical)
        print(f"T = {T}: m* = {result.critical:g} {result.interval}, ERM median {erm:g} (m* >= ERM: "
              f"{result.critical >= erm}); sizes {result.m.tolist()}, success rates "
              f"{sparse.success_rates(result.success).round(2).tolist()}; {time.perf_counter() - began:.0f} s",
              flush=True)  # fmt: skip
    print(f"m* non-decreasing in T: {bool(np.all(np.diff(found) >= 0))}")

    began = time.perf_counter()
    target = SparseTarget(32, 3)
    support, table = target.draw_support(11)
    rows = []
    for key, m in ((1, 160), (2, 10)):
        key_train, key_validation = jax.random.split(jax.random.key(key))
        x, x_val = sparse.sample_bits(target, key_train, m), sparse.sample_bits(target, key_validation, 2000)
        rows.append([np.asarray(a, float) for a in (x, sparse.evaluate_target(x, support, table), x_val,
                                                    sparse.evaluate_target(x_val, support, table))])  # fmt: skip
    x, y, mask = np.zeros((2, 160, 32)), np.zeros((2, 160)), np.zeros((2, 160))
    for i, (x_i, y_i, _, _) in enumerate(rows):
        x[i, : len(y_i)], y[i, : len(y_i)], mask[i, : len(y_i)] = x_i, y_i, 1.0
    x_val, y_val = np.stack([r[2] for r in rows]), np.stack([r[3] for r in rows])
    supports = np.stack([np.asarray(support)] * 2)
    run = sparse.train("head", 0, x, y, mask, supports, x_val, y_val, steps=2000, lr=0.01, log_every=500)
    for i, m in enumerate((160, 10)):
        print(f"head at T = 32, m = {m}, 2000 steps: validation accuracy {run.validation_accuracy[i]:.4f}, "
              f"mass on the support {run.mass[i, 0]:.3f} -> {run.mass[i, -1]:.3f}, "
              f"training accuracy {run.train_accuracy[i]:.3f}")  # fmt: skip
    print(f"trained heads: {time.perf_counter() - began:.0f} s")

    for T, published in {10: 14, 30: 20, 100: 24, 300: 28, 1000: 34}.items():
        began = time.perf_counter()
        median = float(np.median(sparse.erm_identifiability(SparseTarget(T, 3), T, trials=200)))
        print(f"ERM identifiability at T = {T}: median {median:g} (published {published}, within 2: "
              f"{abs(median - published) <= 2}); {time.perf_counter() - began:.1f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
