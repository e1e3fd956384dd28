"""The rule's error of each attention map's risk at the paper's sizes (docs/science.md section 7).

For each map, (d, L) and lam: the population risk by the task's default rule (`flowsim.quadrature.default_rule`:
Gauss-Hermite of order 16 at L = 3, 2^14 Sobol' points at L = 10) and by 2^16 Sobol' points, each against a
reference of 2^20 Sobol' points, at (k*, v*) and three random overlap points (gamma = 1, eps = 0.1; the
points are those of docs/science.md's table for softmax). Prints the largest relative error over the four
points, per rule.

Usage: python benchmarks/maps_rule_error.py [--maps sigmoid relu] [--reference-points 20]
"""

import argparse
import math
import time

import numpy as np

from flowsim import quadrature, slr


def random_overlaps(rng, n):
    """n overlap points of random unit k, v in R^4 with k* = e1, v* = e2, from near the oracle to near-orthogonal."""
    points = []
    for _ in range(n):
        k, v = (x / np.linalg.norm(x) for x in (rng.normal(size=4) * rng.uniform(0.05, 1.0, size=4) for _ in "kv"))
        points.append([k[0], v[1], v[0], k[1], k @ v])
    return np.array(points)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maps", nargs="+", default=["sigmoid", "relu"], choices=slr.ATTENTION_MAPS)
    parser.add_argument("--reference-points", type=int, default=20, help="log2 of the reference's Sobol' points")
    args = parser.parse_args()
    points = np.concatenate([slr.ORACLE[None], random_overlaps(np.random.default_rng(0), 3)])
    print(f"{'map':>8} {'d':>4} {'L':>3} {'lam':>6} {'default rule':>28} {'error':>8} {'2^16 Sobol':>10}  seconds")
    for attention in args.maps:
        for d, L in ((20, 3), (80, 10), (400, 10)):
            for lam in (0.5, 1.0, math.sqrt(d / 2)):
                began = time.perf_counter()
                problem = slr.Problem(d, L, lam, 1.0, 0.1, attention)
                reference = np.asarray(
                    slr.risk_by_rule(problem, points, rule=quadrature.sobol(L, 2**args.reference_points))
                )
                errors = []
                for rule in (quadrature.default_rule(L), quadrature.sobol(L, 2**16)):
                    risk = np.asarray(slr.risk_by_rule(problem, points, rule=rule))
                    errors.append(np.abs(risk / reference - 1).max())
                name = quadrature.default_rule(L).name
                seconds = time.perf_counter() - began
                print(
                    f"{attention:>8} {d:>4} {L:>3} {lam:>6.3g} {name:>28} {errors[0]:8.1e} {errors[1]:10.1e}"
                    f"  {seconds:.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
