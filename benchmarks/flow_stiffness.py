"""Which solver for which regime: explicit Tsit5, linearly implicit Rodas5 and Rosenbrock4, implicit Kvaerno5 over d.

The projected flow on the overlaps stiffens with the dimension d (the field's
scale grows with s = sqrt(d / 2)). For batches of sphere initial conditions at
lam = 0.1 and lam = 0.9 and each d, this integrates to t = 100 with
`slr.solve_flow(..., solver=...)` for each solver of --solvers (default tolerances rtol = 1e-10,
atol = 1e-12, or --rtol / --atol) and reports the wall time with compile excluded,
the mean / max number of steps (accepted + rejected; the batch is vmapped, so it steps
until its slowest trajectory ends), failures, how many trajectories would have failed
under the default max_steps = 100000 (the runs use a raised --max-steps), the max
deviation of each solver from the last one listed at t = 100, and each solver's mean steps at
every d over those at the smallest d (a solver whose cost does not grow with d keeps it near 1).

Compile is excluded by first calling each (d, solver) on a tiny horizon with the same
shapes and static options (the same compiled program); lam is passed as a JAX array so
that both lam values share that program whatever flowsim does with Python floats (older
flowsim kept them static under equinox.filter_jit, so each new lam recompiled; rtol and
atol still are static).

Second part: the exact discrete projected-gradient map `slr.iterate_map` as a fixed-step
explicit scheme (t = alpha * step). The largest alpha in ALPHAS that is stable at
d = 80 (finite, risk non-increasing, and within 1e-2 of the flow at t = 100)
is then run at the larger d. The map renormalises k and v, so its overlaps stay in
[-1, 1]: instability shows as oscillation and risk blow-up rather than overflow.

Usage: python benchmarks/flow_stiffness.py [--quick] [--dims 80,400,4000,40000] [--batches 64,64,64,8]
"""

import argparse
import os
import platform
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from flowsim import slr
from flowsim.integrate import ATOL, RTOL, Rodas5, Rosenbrock4
from flowsim.tasks.slr import _generated as generated

ALPHAS = (0.05, 0.02, 0.01, 0.005, 0.002, 0.001)
DEFAULT_MAX_STEPS = 100_000
SOLVERS = {"Tsit5": diffrax.Tsit5(), "Rodas5": Rodas5(), "Rosenbrock4": Rosenbrock4(), "Kvaerno5": diffrax.Kvaerno5()}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small d, batch and horizon: a smoke run")
    parser.add_argument("--dims", type=str, default="80,400,4000,40000")
    parser.add_argument("--batches", type=str, default="64,64,64,8", help="batch per d (one value: the same for all)")
    parser.add_argument("--lams", type=str, default="0.1,0.9")
    parser.add_argument("--L", type=int, default=10)
    parser.add_argument("--t1", type=float, default=100.0)
    parser.add_argument("--max-steps", type=int, default=2_000_000, help="step budget of both solvers")
    parser.add_argument(
        "--solvers", type=str, default=",".join(SOLVERS), help="comma-separated, of " + ",".join(SOLVERS)
    )
    parser.add_argument("--rtol", type=float, default=RTOL)
    parser.add_argument("--atol", type=float, default=ATOL)
    parser.add_argument("--no-map", action="store_true", help="skip the fixed-step map part")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.quick:
        args.dims, args.batches, args.t1 = "80,400", "8", 10.0
    args.dims = [int(d) for d in args.dims.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    args.batches = batches * len(args.dims) if len(batches) == 1 else batches
    if len(args.batches) != len(args.dims):
        parser.error("--batches needs one value or one per d")
    args.lams = [float(lam) for lam in args.lams.split(",")]
    args.solvers = args.solvers.split(",")
    if not set(args.solvers) <= set(SOLVERS):
        parser.error(f"--solvers: each one of {', '.join(SOLVERS)}")
    if not args.no_map and "Kvaerno5" not in args.solvers:
        parser.error("the map part compares with Kvaerno5: add it to --solvers or pass --no-map")
    return args


def solve(d, L, lam, m0, ts, solver, max_steps, rtol=RTOL, atol=ATOL):
    problem = slr.Problem(d=d, L=L, lam=jnp.asarray(lam))
    start = time.perf_counter()
    result = slr.solve_flow(problem, m0, ts, solver=solver, max_steps=max_steps, rtol=rtol, atol=atol)
    result.ys.block_until_ready()
    return time.perf_counter() - start, result


def run_solvers(args):
    """Per (d, lam, solver): wall time, steps, failures; per (d, lam): deviation; per (d, solver): compile."""
    ts = jnp.linspace(0.0, args.t1, 11)
    rows, compile_s, finals = {}, {}, {}
    for d, batch in zip(args.dims, args.batches, strict=True):
        m0 = slr.initial_overlaps(jax.random.PRNGKey(args.seed), d, batch, "sphere")
        for name in args.solvers:
            solver, tolerances = SOLVERS[name], (args.rtol, args.atol)
            first, _ = solve(d, args.L, args.lams[0], m0, ts * 1e-9, solver, args.max_steps, *tolerances)
            second, _ = solve(d, args.L, args.lams[0], m0, ts * 1e-9, solver, args.max_steps, *tolerances)
            compile_s[d, name] = first - second
            for lam in args.lams:
                wall, result = solve(d, args.L, lam, m0, ts, solver, args.max_steps, *tolerances)
                steps = np.asarray(result.num_steps)
                ok = np.asarray(result.ok)
                rows[d, lam, name] = dict(
                    batch=batch,
                    wall=wall,
                    mean_steps=steps.mean(),
                    max_steps=int(steps.max()),
                    failures=int((~ok).sum()),
                    over_default=int((steps >= DEFAULT_MAX_STEPS).sum()),
                )
                finals[d, lam, name] = (np.asarray(result.ys[:, -1]), ok)
                print(
                    f"  d={d} lam={lam} {name}: {wall:.2f} s, steps mean {steps.mean():.0f} max "
                    f"{steps.max()}, failures {int((~ok).sum())}",
                    flush=True,
                )
    deviations, reference = {}, args.solvers[-1]
    for d in args.dims:
        for lam in args.lams:
            y_r, ok_r = finals[d, lam, reference]
            for name in args.solvers[:-1]:
                y, ok = finals[d, lam, name]
                both = ok & ok_r
                deviations[d, lam, name] = float(np.abs(y[both] - y_r[both]).max()) if both.any() else float("nan")
    return rows, compile_s, deviations, finals


def print_solver_tables(args, rows, compile_s, deviations):
    reference = args.solvers[-1]
    print(
        f"\n## {', '.join(args.solvers)} to t = {args.t1:g} (rtol {args.rtol:g}, atol {args.atol:g}, max_steps "
        f"{args.max_steps:g} for all; compile excluded)"
    )
    header = (
        f"{'d':>6} {'lam':>4} {'B':>4} {'solver':<11} {'wall s':>8} {'ms/traj':>8} {'steps mean':>11} "
        f"{'steps max':>10} {'fail':>4} {'>=1e5 steps':>11} {'compile s':>9} {f'max|. - {reference}|':>18}"
    )
    print(header)
    print("-" * len(header))
    for d in args.dims:
        for lam in args.lams:
            for name in args.solvers:
                row = rows[d, lam, name]
                deviation = f"{deviations[d, lam, name]:.1e}" if name != reference else ""
                print(
                    f"{d:>6} {lam:>4} {row['batch']:>4} {name:<11} {row['wall']:>8.2f} "
                    f"{row['wall'] / row['batch'] * 1e3:>8.1f} {row['mean_steps']:>11.0f} {row['max_steps']:>10} "
                    f"{row['failures']:>4} {row['over_default']:>11} {compile_s[d, name]:>9.1f} {deviation:>18}"
                )

    smallest = args.dims[0]
    print(f"\n## Mean steps at each d over those at d = {smallest} (same lam)")
    print(f"{'d':>6} {'lam':>4} " + " ".join(f"{name:>11}" for name in args.solvers))
    for d in args.dims:
        for lam in args.lams:
            ratios = [
                rows[d, lam, name]["mean_steps"] / rows[smallest, lam, name]["mean_steps"] for name in args.solvers
            ]
            print(f"{d:>6} {lam:>4} " + " ".join(f"{ratio:>11.2f}" for ratio in ratios))

    print("\n## Fastest solver without failures, by wall time (compile excluded)")
    print(f"{'d':>6} " + " ".join(f"{f'lam={lam}':>34}" for lam in args.lams))
    for d in args.dims:
        cells = []
        for lam in args.lams:
            walls = {name: rows[d, lam, name]["wall"] for name in args.solvers if not rows[d, lam, name]["failures"]}
            if not walls:
                cells.append("every solver failed")
                continue
            ranked = sorted(walls, key=walls.get)
            runner_up = (
                f", {walls[ranked[1]] / walls[ranked[0]]:.1f}x faster than {ranked[1]}" if len(ranked) > 1 else ""
            )
            cells.append(f"{ranked[0]}{runner_up}")
        print(f"{d:>6} " + " ".join(f"{cell:>34}" for cell in cells))


def map_metrics(d, L, lam, m0, alpha, t1, reference):
    """Run iterate_map to t1 = alpha * steps and summarise its behaviour."""
    problem = slr.Problem(d=d, L=L, lam=lam)
    steps = round(t1 / alpha)
    log_every = next(k for k in range(max(steps // 100, 1), 0, -1) if steps % k == 0)
    start = time.perf_counter()
    result = slr.iterate_map(problem, m0, alpha, steps, log_every=log_every)
    ys, risk = np.asarray(result.ys), np.asarray(result.risk)
    wall = time.perf_counter() - start
    final = ys[:, -1]
    following = np.asarray(generated.pgd_map(*final.T, d, L, lam, problem.gamma, problem.eps, alpha))
    finite = bool(np.isfinite(ys).all())
    metrics = dict(
        alpha=alpha,
        steps=steps,
        wall=wall,
        finite=finite,
        risk_increase=float(np.nanmax(np.diff(risk, axis=1))),
        risk_ratio=float(np.nanmax(risk[:, -1] / risk[:, 0])),
        step_change=float(np.nanmax(np.abs(following - final))),
        deviation=float(np.nanmax(np.abs(final - reference))),
    )
    metrics["stable"] = finite and metrics["risk_increase"] <= 1e-9 and metrics["deviation"] <= 1e-2
    return metrics


def run_map(args, finals):
    print(f"\n## Fixed-step explicit scheme: slr.iterate_map (exact projected GD, t = alpha * step) to t = {args.t1:g}")
    print(
        "stable = finite, the risk never increases (by > 1e-9 between logged iterates, every steps/100) and "
        "the iterate at t1 is within 1e-2 of the flow (Kvaerno5); '|step| at end' = |map(m) - m| at t1"
    )
    header = (
        f"{'d':>6} {'lam':>4} {'alpha':>6} {'steps':>7} {'finite':>6} {'max risk incr':>13} "
        f"{'risk end/start':>14} {'|step| at end':>13} {'|map-flow| t1':>13} {'verdict':>9}"
    )
    ts = jnp.linspace(0.0, args.t1, 11)
    lines = []
    for lam in args.lams:
        # the alpha search runs at d = 80 (solved here if 80 is not among --dims)
        d0, batch0 = 80, (args.batches[args.dims.index(80)] if 80 in args.dims else args.batches[0])
        if (d0, lam, "Kvaerno5") in finals:
            reference = finals[d0, lam, "Kvaerno5"][0]
        else:
            m0_ref = slr.initial_overlaps(jax.random.PRNGKey(args.seed), d0, batch0, "sphere")
            reference = np.asarray(solve(d0, args.L, lam, m0_ref, ts, SOLVERS["Kvaerno5"], args.max_steps)[1].ys)
            reference = reference[:, -1]
        m0 = slr.initial_overlaps(jax.random.PRNGKey(args.seed), d0, len(reference), "sphere")
        searched = [map_metrics(d0, args.L, lam, m0, alpha, args.t1, reference) for alpha in ALPHAS]
        stable = [m["alpha"] for m in searched if m["stable"]]
        best = max(stable) if stable else None
        lines += [(d0, lam, m) for m in searched]
        if best is None:
            lines.append((d0, lam, None))
            continue
        for d, batch in zip(args.dims, args.batches, strict=True):
            if d == d0 or (d, lam, "Kvaerno5") not in finals:
                continue
            m0 = slr.initial_overlaps(jax.random.PRNGKey(args.seed), d, batch, "sphere")
            lines.append((d, lam, map_metrics(d, args.L, lam, m0, best, args.t1, finals[d, lam, "Kvaerno5"][0])))
        print(f"  lam={lam}: largest stable alpha at d = 80: {best}", flush=True)
    print(header)
    print("-" * len(header))
    for d, lam, m in lines:
        if m is None:
            print(f"{d:>6} {lam:>4}  no alpha in {ALPHAS} is stable")
            continue
        verdict = "stable" if m["stable"] else "DIVERGES"
        print(
            f"{d:>6} {lam:>4} {m['alpha']:>6} {m['steps']:>7} {m['finite']!s:>6} {m['risk_increase']:>13.1e} "
            f"{m['risk_ratio']:>14.2e} {m['step_change']:>13.1e} {m['deviation']:>13.1e} {verdict:>9}"
        )


def main():
    args = parse_args()
    print(
        f"# flow stiffness: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"jax {jax.__version__} ({jax.default_backend()}), diffrax {diffrax.__version__}; "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    print(
        f"# L={args.L}, sphere initial conditions (seed {args.seed}), d={args.dims}, B={args.batches}, "
        f"lam={args.lams}, t1={args.t1:g}"
    )
    start = time.perf_counter()
    rows, compile_s, deviations, finals = run_solvers(args)
    print_solver_tables(args, rows, compile_s, deviations)
    if not args.no_map:
        run_map(args, finals)
    print(f"\ntotal {time.perf_counter() - start:.0f} s; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
