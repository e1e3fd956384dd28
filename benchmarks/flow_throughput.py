"""Throughput of the batched 5-D flow (flowsim.tasks.slr.solve_flow) against a scipy solve_ivp loop.

Integrates the projected gradient flow of single-location regression on the five
overlaps to t = 100 from B sphere initial conditions, and reports trajectories per
second, the compile time (first call minus second call with the same shapes) and the
ratio to the baseline measured in the same run: scipy.integrate.solve_ivp (RK45)
called in a Python loop over trajectories, on the same generated vector field.

The baseline field is the faster of two things a user would write (both are timed):

- the generated JAX function `flowsim.tasks.slr._generated.flow`, jitted, called with a
  NumPy array from solve_ivp;
- the same generated source executed with `math` / NumPy functions in place of
  `jax.numpy` (what `sympy.lambdify(..., modules="math")` gives), zeta through
  `scipy.special.owens_t`.

Calling the un-jitted JAX function with NumPy scalars is also timed (per call only):
it dispatches every operation separately and is far too slow to integrate with.

The solve_ivp loop cannot do thousands of trajectories in reasonable time: it is timed
on a subset (--ivp-trajectories) and its per-trajectory cost extrapolated to every B.

Timing protocol for flowsim at each (B, tolerances): call 1 and call 2 integrate to a
tiny horizon (same shapes and static options, so the same compiled program; the run
part is negligible) and compile = call 1 - call 2; call 3 integrates to t = 100 and
its wall time is the run time. Batches whose run is estimated (from the smaller
batches) to exceed --budget-s are skipped and reported with the estimate.

Usage: python benchmarks/flow_throughput.py [--quick]
"""

import argparse
import inspect
import math
import os
import platform
import time
import types

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import scipy
import scipy.integrate
import scipy.special

from flowsim import slr
from flowsim.integrate import ATOL as DEFAULT_ATOL
from flowsim.integrate import RTOL as DEFAULT_RTOL
from flowsim.tasks.slr import _generated as generated

IVP_RTOL, IVP_ATOL = 1e-8, 1e-10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batches, a smoke run")
    parser.add_argument("--d", type=int, default=400)
    parser.add_argument("--L", type=int, default=10)
    parser.add_argument("--lam", type=float, default=0.1)
    parser.add_argument("--t1", type=float, default=100.0)
    parser.add_argument("--batches", type=str, default="100,1000,10000,100000")
    parser.add_argument("--ivp-trajectories", type=int, default=20, help="solve_ivp subset size")
    parser.add_argument("--budget-s", type=float, default=450.0, help="skip a flowsim run estimated to take longer")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.batches, args.ivp_trajectories, args.t1 = "10,100", 2, 20.0
    args.batches = [int(float(b)) for b in args.batches.split(",")]
    return args


# --------------------------------------------------------------------------- baseline fields


def _zeta_numpy(a, b):
    """zeta(a, b) = 1 - 8 T(sqrt(2) a / sqrt(1 + 2b^2), 1 / sqrt(1 + 4b^2)) with scipy's Owen's T."""
    q = 1 + 2 * b * b
    return 1 - 8 * scipy.special.owens_t(math.sqrt(2) * a / math.sqrt(q), 1 / math.sqrt(1 + 4 * b * b))


def _assemble_numpy(shape, *entries):
    return np.array(entries, dtype=float).reshape(shape)


def lambdified_flow():
    """`generated.flow` from its own source, on Python floats (math) instead of jax.numpy."""
    source = inspect.getsource(generated)
    body = "\n".join(line for line in source.splitlines() if not line.startswith(("import ", "from ")))
    math_namespace = types.SimpleNamespace(sqrt=math.sqrt, exp=math.exp, pi=math.pi, arcsin=math.asin)
    namespace = {"jnp": math_namespace, "erf": math.erf, "zeta": _zeta_numpy, "assemble": _assemble_numpy}
    exec(compile(body, "<flowsim.tasks.slr._generated on math>", "exec"), namespace)
    return namespace["flow"]


def baseline_fields(problem):
    """The candidate right-hand sides f(t, y) for solve_ivp, by name."""
    parameters = (problem.d, problem.L, problem.lam, problem.gamma, problem.eps)
    jitted = jax.jit(lambda y: generated.flow(y[0], y[1], y[2], y[3], y[4], *parameters))
    flow_math = lambdified_flow()
    return {
        "jnp, un-jitted, NumPy scalars": lambda t, y: np.asarray(generated.flow(*y, *parameters)),
        "jax.jit(flow), NumPy array in": lambda t, y: np.asarray(jitted(y)),
        "generated source on math (lambdify)": lambda t, y: flow_math(*y, *parameters),
    }


def time_per_call(field, y, seconds=1.0):
    field(0.0, y)
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        field(0.0, y)
        calls += 1
    return elapsed / calls


def solve_ivp_loop(field, m0, t1, ts):
    """solve_ivp on each row of m0; returns (seconds, total nfev, final states, all succeeded)."""
    finals, nfev, ok = [], 0, True
    start = time.perf_counter()
    for y0 in m0:
        solution = scipy.integrate.solve_ivp(
            field, (0.0, t1), y0, method="RK45", t_eval=ts, rtol=IVP_RTOL, atol=IVP_ATOL
        )
        finals.append(solution.y[:, -1])
        nfev += solution.nfev
        ok &= solution.status == 0
    return time.perf_counter() - start, nfev, np.array(finals), ok


# --------------------------------------------------------------------------- flowsim


def time_flowsim(problem, m0, t1, rtol, atol):
    """(compile seconds, run seconds, Trajectories) for one batch at the given tolerances."""
    ts = jnp.linspace(0.0, t1, 11)
    tiny = ts * 1e-9  # same shape, same compiled program, negligible run
    times = []
    for horizon in (tiny, tiny, ts):
        start = time.perf_counter()
        result = slr.solve_flow(problem, m0, horizon, rtol=rtol, atol=atol)
        result.ys.block_until_ready()
        times.append(time.perf_counter() - start)
    return times[0] - times[1], times[2], result


def machine():
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, jax {jax.__version__} ({jax.default_backend()}), "
        f"diffrax {diffrax.__version__}, scipy {scipy.__version__}, numpy {np.__version__}"
    )


def main():
    args = parse_args()
    problem = slr.Problem(d=args.d, L=args.L, lam=args.lam)
    key = jax.random.PRNGKey(args.seed)
    ts_np = np.linspace(0.0, args.t1, 11)
    print(f"# flow throughput: {machine()}")
    print(
        f"# problem d={args.d} L={args.L} lam={args.lam}, sphere initial conditions, t in [0, {args.t1:g}],"
        f" 11 saved times; load average at start {os.getloadavg()[0]:.2f}"
    )

    # ---- baseline: choose the field, then time the solve_ivp loop on a subset
    # One draw; each batch is a prefix of it and the solve_ivp subset is its first rows.
    m_all = slr.initial_overlaps(key, args.d, max([*args.batches, args.ivp_trajectories]), "sphere")
    m_subset = np.asarray(m_all[: args.ivp_trajectories])
    fields = baseline_fields(problem)
    print("\n## Baseline field, cost per call (one trajectory, float64)")
    print(f"{'field':<40} {'us/call':>10} {'max |diff| vs jit':>18}")
    reference = fields["jax.jit(flow), NumPy array in"](0.0, m_subset[0])
    per_call = {}
    for name, field in fields.items():
        per_call[name] = time_per_call(field, m_subset[0], 0.3 if "un-jitted" in name else 1.0)
        difference = np.abs(field(0.0, m_subset[0]) - reference).max()
        print(f"{name:<40} {per_call[name] * 1e6:>10.1f} {difference:>18.2e}")

    probe = m_subset[: min(3, len(m_subset))]
    print(f"\n## solve_ivp RK45 (rtol={IVP_RTOL:g}, atol={IVP_ATOL:g}) probe on {len(probe)} trajectories")
    print(f"{'field':<40} {'s/trajectory':>13} {'nfev/traj':>10} {'us/nfev':>8}")
    probe_cost = {}
    for name in ("jax.jit(flow), NumPy array in", "generated source on math (lambdify)"):
        seconds, nfev, _, _ = solve_ivp_loop(fields[name], probe, args.t1, ts_np)
        probe_cost[name] = seconds / len(probe)
        print(f"{name:<40} {probe_cost[name]:>13.3f} {nfev / len(probe):>10.0f} {seconds / nfev * 1e6:>8.1f}")
    chosen = min(probe_cost, key=probe_cost.get)
    slow = "jnp, un-jitted, NumPy scalars"
    print(
        f"(un-jitted jnp with NumPy scalars: {per_call[slow] * 1e3:.2f} ms/call, "
        f"{per_call[slow] / per_call[chosen]:.0f}x the chosen field; not run through solve_ivp)"
    )

    seconds, nfev, ivp_finals, ivp_ok = solve_ivp_loop(fields[chosen], m_subset, args.t1, ts_np)
    ivp_per_trajectory = seconds / len(m_subset)
    ivp_rate = 1 / ivp_per_trajectory
    print(
        f"\nbaseline: solve_ivp RK45 loop, field '{chosen}', {len(m_subset)} trajectories in "
        f"{seconds:.2f} s: {ivp_per_trajectory:.3f} s/trajectory = {ivp_rate:.3f} traj/s "
        f"({nfev / len(m_subset):.0f} nfev/trajectory, all succeeded: {ivp_ok}); "
        "extrapolated linearly to every B"
    )

    # ---- flowsim
    configs = [
        (f"flowsim Tsit5 rtol={IVP_RTOL:g} atol={IVP_ATOL:g} (= baseline)", IVP_RTOL, IVP_ATOL),
        (f"flowsim Tsit5 defaults rtol={DEFAULT_RTOL:g} atol={DEFAULT_ATOL:g}", DEFAULT_RTOL, DEFAULT_ATOL),
    ]
    rows, cost_per_trajectory = [], {}
    for batch in args.batches:
        m0 = m_all[:batch]
        for label, rtol, atol in configs:
            known = cost_per_trajectory.get(label)
            if known is not None and known * batch > args.budget_s:
                rows.append((label, batch, None, known * batch, None, None, None))
                continue
            compile_s, run_s, result = time_flowsim(problem, m0, args.t1, rtol, atol)
            cost_per_trajectory[label] = run_s / batch
            steps = np.asarray(result.num_steps)
            failures = int((~np.asarray(result.ok)).sum())
            deviation = None
            if batch >= len(m_subset):  # its first rows are the solve_ivp subset
                deviation = float(np.abs(np.asarray(result.ys[: len(m_subset), -1]) - ivp_finals).max())
            rows.append((label, batch, compile_s, run_s, (steps.mean(), steps.max()), failures, deviation))
            print(
                f"  [{label}] B={batch}: compile {compile_s:.1f} s, run {run_s:.2f} s, "
                f"{batch / run_s:.1f} traj/s, steps mean {steps.mean():.0f} max {steps.max()}, "
                f"failures {failures}",
                flush=True,
            )

    print(f"\n## Throughput to t = {args.t1:g} (baseline {ivp_rate:.3f} traj/s, solve_ivp loop, '{chosen}')")
    header = (
        f"{'solver':<52} {'B':>7} {'compile s':>9} {'run s':>8} {'traj/s':>9} "
        f"{'x solve_ivp':>11} {'steps mean/max':>15} {'fail':>4} {'|dev| vs ivp':>12}"
    )
    print(header)
    print("-" * len(header))
    for label, batch, compile_s, run_s, steps, failures, deviation in rows:
        if compile_s is None:
            print(
                f"{label:<52} {batch:>7} {'skipped':>9} {f'~{run_s:.0f}':>8} {f'~{batch / run_s:.1f}':>9} "
                f"{f'~{batch / run_s / ivp_rate:.0f}':>11}   (estimated from the largest measured B; "
                f"over --budget-s {args.budget_s:g})"
            )
            continue
        rate = batch / run_s
        dev = "" if deviation is None else f"{deviation:.1e}"
        print(
            f"{label:<52} {batch:>7} {compile_s:>9.1f} {run_s:>8.2f} {rate:>9.1f} {rate / ivp_rate:>11.1f} "
            f"{f'{steps[0]:.0f}/{steps[1]}':>15} {failures:>4} {dev:>12}"
        )
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
