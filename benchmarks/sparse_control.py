"""Why the l1 control's m* rises about fourfold from T = 16 to 256 and then stops (docs/science.md section 8).

On a fixed grid of sample sizes (the same at every T, so that neither end of the search's range, which starts at
log2 C(T, 3), can bind), each run draws a support and one stream of samples, and fits the control (`sparse.fit_l1`)
to its first m samples; every m of a run sees the same data grown, and every penalty rule the same data. Per T and
rule, the smallest m at which half of the runs pass, for several success criteria:

- "0.99": validation accuracy >= 0.99 on 2000 fresh samples (the protocol's rule);
- "0.95": validation accuracy >= 0.95;
- "support": the s largest weights are the support (the support is identified);
- "support 0.99": validation accuracy >= 0.99 with the weights off the support replaced by their mean effect (each
  weight times p, added to the intercept): what the fit's support weights and threshold reach without the
  fluctuation of the bits off the support;

and, at the protocol's m* of each T, what is off the support: the share of runs that fail the 0.99 rule although
their support is identified, the l1 norm of the weights off the support against the smallest support weight, and
the validation errors split into false positives and false negatives; then, at fixed sizes (--at), how many weights
off the support are nonzero, their l1 norm and the false positives, against T: an l1 fit of m samples keeps at most
about m nonzero weights, so once T exceeds m the weights off the support stop growing with T. The penalty rules:
the protocol's lambda = 0.01 sqrt(ln T / m); its constant 0.003 and 0.03; and lambda frozen in T at its T = 256 value,
0.01 sqrt(ln 256 / m).

Usage: python benchmarks/sparse_control.py [--Ts 16 32 64 128 256 512 1024] [--runs 20] [--sizes 24] [--at 62 144]
"""

import argparse
import math
import os
import platform
import time

import jax
import numpy as np

from flowsim.tasks import sparse
from flowsim.tasks.sparse import SparseTarget

#: rule name -> the l1_scale that gives its lambda at (T, m) with `fit_l1`'s lambda = l1_scale sqrt(ln T / m).
RULES = {
    "0.01 sqrt(ln T / m)": lambda T: 0.01,
    "0.003 sqrt(ln T / m)": lambda T: 0.003,
    "0.03 sqrt(ln T / m)": lambda T: 0.03,
    "0.01 sqrt(ln 256 / m)": lambda T: 0.01 * math.sqrt(math.log(256) / math.log(T)),
}
CRITERIA = ("0.99", "0.95", "support", "support 0.99")


def _m50(sizes, passed):
    """The smallest size at which at least half of the runs pass ((sizes, runs) booleans); inf if none."""
    rates = passed.mean(axis=1)
    at = np.flatnonzero(rates >= 0.5)
    return float(sizes[at[0]]) if len(at) else math.inf


def measure(T, sizes, runs, n_validation=2000):
    """Per rule: (sizes, runs) arrays of each criterion, and the diagnostics of every fit."""
    target = SparseTarget(T, 3)
    out = {rule: {name: np.zeros((len(sizes), runs), bool) for name in CRITERIA} for rule in RULES}
    for rule in RULES:
        for name in ("fp", "fn", "off", "weakest", "nonzero"):
            out[rule][name] = np.zeros((len(sizes), runs))
    for run in range(runs):
        key = jax.random.fold_in(jax.random.key(T), run)
        support, table = target.draw_support(jax.random.fold_in(key, 0))
        x_all = np.asarray(sparse.sample_bits(target, jax.random.fold_in(key, 1), int(sizes[-1])), float)
        y_all = np.asarray(sparse.evaluate_target(x_all, support, table), float)
        x_val = np.asarray(sparse.sample_bits(target, jax.random.fold_in(key, 2), n_validation), float)
        y_val = np.asarray(sparse.evaluate_target(x_val, support, table), bool)
        on = np.zeros(T, bool)
        on[np.asarray(support)] = True
        for i, m in enumerate(sizes):
            for rule, scale in RULES.items():
                fit = sparse.fit_l1(x_all[:m], y_all[:m], l1_scale=scale(T))
                predicted = fit.logits(x_val) > 0
                mean_off = target.p * fit.weights[~on].sum()
                kept = x_val @ np.where(on, fit.weights, 0.0) + fit.intercept + mean_off > 0
                accuracy = np.mean(predicted == y_val)
                top = np.sort(np.argsort(-np.abs(fit.weights))[:3])
                row = out[rule]
                row["0.99"][i, run], row["0.95"][i, run] = accuracy >= 0.99, accuracy >= 0.95
                row["support"][i, run] = np.array_equal(top, np.sort(np.asarray(support)))
                row["support 0.99"][i, run] = np.mean(kept == y_val) >= 0.99
                row["fp"][i, run] = np.mean(predicted & ~y_val)
                row["fn"][i, run] = np.mean(~predicted & y_val)
                row["off"][i, run] = np.abs(fit.weights[~on]).sum()
                row["weakest"][i, run] = np.abs(fit.weights[on]).min()
                row["nonzero"][i, run] = np.count_nonzero(fit.weights[~on])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--Ts", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512, 1024])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", type=int, default=24, help="sample sizes, geometric over [8, 400]")
    parser.add_argument("--at", type=int, nargs="+", default=[62, 144], help="sizes of the table against T")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    sizes = np.unique(np.geomspace(8, 400, args.sizes).round().astype(int))
    print(f"sizes: {sizes.tolist()}; {args.runs} runs per size (each its support and one stream of samples)")
    found = {}
    for T in args.Ts:
        began = time.perf_counter()
        found[T] = measure(T, sizes, args.runs)
        limit = sparse.information_limit(T, 3)
        print(f"T = {T} (log2 C(T, 3) = {limit:.1f}), {time.perf_counter() - began:.0f} s:")
        for rule in RULES:
            row = found[T][rule]
            m50 = {name: _m50(sizes, row[name]) for name in CRITERIA}
            lam = RULES[rule](T) * math.sqrt(math.log(T) / m50["0.99"]) if math.isfinite(m50["0.99"]) else math.nan
            print(f"  {rule}: m50 " + ", ".join(f"{name} {value:g}" for name, value in m50.items())
                  + f"; lambda at m50(0.99) {lam:.2g}")  # fmt: skip
        row = found[T]["0.01 sqrt(ln T / m)"]
        at = list(sizes).index(_m50(sizes, row["0.99"])) if math.isfinite(_m50(sizes, row["0.99"])) else -1
        failing = ~row["0.99"][at]
        identified = row["support"][at] & failing
        print(f"  at m = {sizes[at]} (the protocol's rule): {failing.sum()} of {args.runs} runs fail 0.99, "
              f"{identified.sum()} of them with the support identified and {(row['support 0.99'][at] & failing).sum()} "
              f"passing on the support alone; off-support l1 norm {np.median(row['off'][at]):.3g} (median) against "
              f"the weakest support weight {np.median(row['weakest'][at]):.3g}; validation errors: false positives "
              f"{np.mean(row['fp'][at]):.4f}, false negatives {np.mean(row['fn'][at]):.4f}")  # fmt: skip
    print("at fixed sizes (the protocol's rule): nonzero weights off the support, their l1 norm, false positives, and")
    print("the share of runs passing 0.99 (medians and means over the runs)")
    for m in args.at:
        i = int(np.argmin(np.abs(sizes - m)))
        for T in args.Ts:
            row = found[T]["0.01 sqrt(ln T / m)"]
            print(f"  m = {sizes[i]}, T = {T}: {np.median(row['nonzero'][i]):g} of {T - 3} nonzero, norm "
                  f"{np.median(row['off'][i]):.3g}, false positives {np.mean(row['fp'][i]):.4f}, "
                  f"passing {np.mean(row['0.99'][i]):.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
