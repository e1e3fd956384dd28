"""The latent-posterior limits of tests/test_latent.py at their full sizes: the error constant, the risk ratio, and
gradient descent against the L = oo flow.

tests/test_latent.py checks these on one run of each command at reduced sizes (5000 sequences at L = 4096 for the
error constant and the risk ratio, gradient descent at L = 64 and 1024: each L of the read-out compiles two
programs); this runs the earlier, larger versions and prints their numbers against the tests' criteria:

- the error constant of the tilted-Gaussian example (e^{0.9}(2.25 + 0.7475) = 7.3727): L MSE at L = 64 and 4096 from
  --sequences sequences (default 20 000), its z-score against the constant at L = 4096 (criterion |z| < 4) and
  whether it is approached from below;
- the risk ratio on the conjugate location model (d = 4, sigma = tau = 1, |a| = 0.5: e^{0.25}(1 + 0.25 / 4) = 1.364)
  at L = 4096 from --risk-sequences sequences (default 10 000): the ratio and its z-score, uniform attention's
  against 1, the posterior mean's risk against the Bayes risk;
- full-batch gradient descent on n = 1000 sequences (d = 4, lr = 0.05, 100 steps, 3 seeds) against the flow at
  L = 64, 256 and 1024 (--Ls): the deviation per L and the fitted log-log slope (criterion: in (-1.2, -0.3)).

Usage: python benchmarks/latent_limits.py [--sequences 20000] [--risk-sequences 10000] [--Ls 64 256 1024]
"""

import argparse
import math
import os
import platform
import time

import numpy as np

import flowsim
from flowsim.tasks import latent

SIGMA = np.diag([1.0, 0.5, 0.5, 0.25])
A = np.array([0.8, -0.5, 0.3, 0.6])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=20_000)
    parser.add_argument("--risk-sequences", type=int, default=10_000)
    parser.add_argument("--Ls", type=int, nargs="+", default=[64, 256, 1024])
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")

    began = time.perf_counter()
    model = latent.TiltedGaussian(SIGMA)
    result = latent.attention_error(0, model, np.zeros(4), A, [64, 4096], replicates=args.sequences)
    (small, large), (_, se), constant = result.scaled_mse[0], result.stderr[0], result.predicted[0]
    print(f"error constant {constant:.4f}: L MSE {small:.3f} at L = 64, {large:.3f} +- {se:.3f} at L = 4096 "
          f"(z = {(large - constant) / se:.2f}, from below: {small < large}; {args.sequences} sequences, "
          f"{time.perf_counter() - began:.0f} s)")  # fmt: skip

    began = time.perf_counter()
    conjugate = latent.ConjugateLocation(4, 1.0, 1.0)
    limit = float(conjugate.attention_ratio_limit(0.5))
    risk = latent.location_risk(2, conjugate, [0.0, 0.5], [4096], replicates=args.risk_sequences)
    ratio, ratio_se = risk.attention[:, 0] / risk.bayes[0], risk.attention_stderr[:, 0] / risk.bayes[0]
    z = (ratio[1] - limit) / ratio_se[1], (ratio[0] - 1) / ratio_se[0]
    print(f"risk ratio at |a| = 0.5: {ratio[1]:.4f} +- {ratio_se[1]:.4f} against {limit:.4f} (z = {z[0]:.2f}); "
          f"at a = 0: {ratio[0]:.4f} (z = {z[1]:.2f}); "
          f"posterior mean: z = {(risk.posterior[0] - risk.bayes[0]) / risk.posterior_stderr[0]:.2f} "
          f"({args.risk_sequences} sequences, {time.perf_counter() - began:.0f} s)")  # fmt: skip

    began = time.perf_counter()
    task = latent.Readout(4, 1.0, 1.0, 0.1)
    deviation = []
    for L in args.Ls:
        run = latent.train_readout(task, 0, L=L, n=1000, lr=0.05, steps=100, log_every=10, seeds=3)
        deviation.append(float(np.median(flowsim.compare(run).deviation.max(axis=1))))
        print(f"gradient descent at L = {L}: deviation from the flow {deviation[-1]:.4g}", flush=True)
    slope = np.polyfit(np.log(args.Ls), np.log(deviation), 1)[0]
    print(f"log-log slope in L: {slope:.3f} (in (-1.2, -0.3): {-1.2 < slope < -0.3}; "
          f"{time.perf_counter() - began:.0f} s)")  # fmt: skip
    assert math.isfinite(slope)


if __name__ == "__main__":
    main()
