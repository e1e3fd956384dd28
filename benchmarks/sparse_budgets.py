"""The paper's Transformer on a GPU, read back from its stored runs: the budget axis, a second search seed, and the law
fitted with the spread of repeated searches (docs/science.md section 8; no training: it reads docs/data).

Reads docs/data/sparse-transformer-h200 (1000 AdamW steps, search seed 0, T = 16 ... 4096) and
docs/data/sparse-transformer-h200-budgets (T = 1024, 2048, 4096 at 2000, 4000 steps and to convergence, seed 0; and
1000 steps with search seed 1), and prints:

1. m* per budget and seed at T = 1024, 2048, 4096, with the share of runs that converged;
2. the success counts at the sizes of each search's first round, which use the same supports and training sets at
   every budget of one seed: the budget's effect on the same data, free of the search's path;
3. the two seeds' m* at 1000 steps against their bootstrap intervals, and the single search's standard deviation
   they estimate;
4. the laws fitted to the 1000-step curve: one search per T (weights from its bootstrap), the two seeds read as
   repeated searches where both exist (`sparse.read_sweep`), and every T weighted by at least the single-search
   spread of item 3.

Usage: python benchmarks/sparse_budgets.py
"""

import math
from pathlib import Path

import numpy as np

from flowsim.tasks import sparse

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"


def _runs(name):
    return sorted(path for path in (DATA / name).iterdir() if path.is_dir())


def _laws(title, T, m, sigma):
    fits = sparse.fit_scaling(T, m, sigma)
    best = min(fit.aic for fit in fits.values())
    said = ", ".join(
        f"{name} b = {fit.b:.3g} [{fit.b_interval[0]:.3g}, {fit.b_interval[1]:.3g}] dAIC {fit.aic - best:.1f}"
        for name, fit in fits.items()
        if name != "constant"
    )
    log = fits["log"]
    dof = len(m) - 2
    print(f"{title}: {sparse.verdict(fits)}; {said}; log chi2 = {log.chi2:.1f} on {dof} dof (p = {log.p_value:.2g})")


def main():
    seed0 = sparse.read_sweep(*_runs("sparse-transformer-h200"))
    budgets = [path for path in _runs("sparse-transformer-h200-budgets") if not path.name.endswith("-s1")]
    seed1 = [path for path in _runs("sparse-transformer-h200-budgets") if path.name.endswith("-s1")]
    searches = {}  # (T, budget, seed) -> CriticalSize
    for folders, seed in (([*_runs("sparse-transformer-h200"), *budgets], 0), (seed1, 1)):
        for (_, budget), found in sparse.read_sweep(*folders).results.items():
            for r in found:
                searches[r.T, budget, seed] = r

    print("1. m* [95 % bootstrap], share of runs converged, most steps:")
    for T in (1024, 2048, 4096):
        for budget, seed in (("1000", 0), ("2000", 0), ("4000", 0), ("converged", 0), ("1000", 1)):
            r = searches.get((T, budget, seed))
            if r is not None:
                print(f"  T = {T}, {budget}, seed {seed}: {r.critical:g} [{r.interval[0]:g}, {r.interval[1]:g}], "
                      f"{np.mean(r.converged):.1%} converged, most steps {int(np.max(r.steps_run))}")  # fmt: skip

    print("2. successes of 20 runs at the first round's sizes (same training sets at every budget of seed 0):")
    for T in (1024, 2048, 4096):
        first = np.unique(np.geomspace(math.ceil(sparse.information_limit(T, 3)), 8 * math.ceil(
            sparse.information_limit(T, 3)), 6).round().astype(int))  # fmt: skip
        for budget in ("1000", "2000", "4000", "converged"):
            r = searches.get((T, budget, 0))
            if r is not None:
                counts = [int(r.success[list(r.m).index(m)].sum()) for m in first]
                print(f"  T = {T}, {budget:>9}: m = {first.tolist()}: {counts}")
        r = searches[T, "1000", 1]
        counts = [int(r.success[list(r.m).index(m)].sum()) for m in first]
        print(f"  T = {T}, 1000 seed 1: m = {first.tolist()}: {counts}")

    print("3. the two search seeds at 1000 steps:")
    differences = []
    for T in (1024, 2048, 4096):
        a, b = searches[T, "1000", 0], searches[T, "1000", 1]
        apart = a.interval[1] < b.interval[0] or b.interval[1] < a.interval[0]
        differences.append(b.critical - a.critical)
        print(f"  T = {T}: {a.critical:g} {a.interval} and {b.critical:g} {b.interval}: bootstrap intervals "
              f"{'disjoint' if apart else 'overlap'}; their sigmas {sparse.critical_sigma(a):.1f}, "
              f"{sparse.critical_sigma(b):.1f}")  # fmt: skip
    spread = math.sqrt(np.mean(np.square(differences)) / 2)
    print(f"  one search's standard deviation from the {len(differences)} pairs: sqrt(mean(d^2) / 2) = {spread:.1f}")
    same_seed = [searches[2048, budget, 0].critical for budget in ("1000", "2000", "4000")]
    print(f"  T = 2048, seed 0 at 1000, 2000, 4000 steps: {same_seed}")

    one = seed0.results["transformer", "1000"]
    T, m = np.array([r.T for r in one]), np.array([r.critical for r in one])
    sigma = np.array([sparse.critical_sigma(r) for r in one])
    both = sparse.read_sweep(*_runs("sparse-transformer-h200"), *seed1).results["transformer", "1000"]
    m_both, sigma_both = np.array([r.critical for r in both]), np.array([sparse.critical_sigma(r) for r in both])
    relative = spread / np.mean([searches[T_, "1000", 0].critical for T_ in (1024, 2048, 4096)])
    for low in (16, 256):
        print(f"4. the law of the 1000-step curve (T = {low} ... 4096):")
        at = T >= low
        _laws("  one search per T (bootstrap sigmas)", T[at], m[at], sigma[at])
        _laws("  seeds 0 and 1 as repeated searches at T >= 1024", T[at], m_both[at], sigma_both[at])
        _laws(f"  every T's sigma at least one search's spread ({spread:.1f})", T[at], m[at],
              np.maximum(sigma, spread)[at])  # fmt: skip
        _laws(f"  every T's sigma at least {relative:.1%} of its m*", T[at], m[at],
              np.maximum(sigma, relative * m)[at])  # fmt: skip


if __name__ == "__main__":
    main()
