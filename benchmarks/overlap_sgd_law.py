"""The law of online SGD on the overlaps (engine "overlaps") against SGD in R^d (engine "rd"), at several d.

tests/test_overlap_sgd.py compares the two engines at d = 8 only (each d compiles both engines again); this
runs the comparison at every d of `--dimensions` (default 8, 80 and 400; L = 3, lam = 0.5, eps = 0.1,
lr = 0.01; batch 2 at d = 8, else 1), `--seeds` seeds per engine (default 2 000) from the same start off M,
after 1, 10 and 1 000 steps (100 at d >= 400, where the R^d engine's sampling sets the cost). For each d and
step it prints the largest |z| of the two-sample differences of the means and of the standard deviations of
the five overlaps (delta method for the standard deviations), the smallest Kolmogorov-Smirnov p-value on
kappa and on nu, and whether the test's criteria hold (|z| < 4, p > 1e-3), with the seconds per d (both
engines, compilation included).

Usage: python benchmarks/overlap_sgd_law.py [--dimensions 8 80 400] [--seeds 2000]
"""

import argparse
import time

import jax
import numpy as np
import scipy.stats

from flowsim import slr

#: The start of tests/test_overlap_sgd.py: off M, every overlap non-zero.
START = np.array([0.3, -0.2, 0.25, 0.1, 0.15])


def z_scores(a, b):
    """Two-sample z-scores of the means and of the standard deviations, per overlap."""
    z_mean = (a.mean(0) - b.mean(0)) / np.sqrt(a.var(0) / len(a) + b.var(0) / len(b))

    def sd_variance(x):  # delta method: Var(s) ~ (mu4 - sigma^4) / (4 sigma^2 n)
        centred = x - x.mean(0)
        return ((centred**4).mean(0) - x.var(0) ** 2) / (4 * x.var(0) * len(x))

    return z_mean, (a.std(0) - b.std(0)) / np.sqrt(sd_variance(a) + sd_variance(b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dimensions", type=int, nargs="+", default=[8, 80, 400])
    parser.add_argument("--seeds", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'d':>4} {'batch':>5} {'step':>5} {'max |z| mean':>12} {'max |z| sd':>10} {'min KS p':>9}  holds")
    for d in args.dimensions:
        began = time.perf_counter()
        batch, compared = (2 if d < 10 else 1), (1, 10, 100 if d >= 400 else 1000)
        problem = slr.Problem(d, 3, 0.5, eps=0.1)
        runs = [
            slr.run_sgd(
                problem,
                jax.random.key(i),
                init=START,
                lr=0.01,
                steps=compared[-1],
                batch=batch,
                seeds=args.seeds,
                engine=engine,
            )
            for i, engine in enumerate(slr.ENGINES)
        ]
        for step in compared:
            a, b = (np.asarray(run.ys[:, step]) for run in runs)
            z_mean, z_sd = (np.abs(z).max() for z in z_scores(a, b))
            p = min(scipy.stats.ks_2samp(a[:, j], b[:, j]).pvalue for j in (0, 1))
            holds = bool(np.isfinite(a).all() and np.isfinite(b).all() and z_mean < 4 and z_sd < 4 and p > 1e-3)
            print(f"{d:>4} {batch:>5} {step:>5} {z_mean:12.2f} {z_sd:10.2f} {p:9.3g}  {holds}", flush=True)
        print(f"     d = {d}: {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
