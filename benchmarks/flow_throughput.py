"""Throughput of the batched 5-D flow (flowsim.tasks.slr.solve_flow) against scipy solve_ivp loops.

Integrates the projected gradient flow of single-location regression on the five overlaps to
t = 100 from B sphere initial conditions and reports trajectories per second, the compile time
and the ratio to two baselines measured in the same run, each a Python loop over trajectories
calling scipy.integrate.solve_ivp at the same tolerances (rtol 1e-8, atol 1e-10):

- RK45 on the generated field, jitted (`jax.jit(flowsim.tasks.slr._generated.flow)`, NumPy array
  in): the baseline of the first measurements (BENCHMARKS.md; the fastest of the fields a user
  would write);
- LSODA given the generated Jacobian as well (jitted the same way): what a user who knows the
  flow is stiff would write.

The loops are timed on a subset of the starts (--ivp-trajectories) and their cost per
trajectory is extrapolated linearly to every B (each trajectory is solved on its own).

flowsim is timed with Tsit5, with the linearly implicit `Rodas5` (order 5) and `Rosenbrock4`
(order 4), both given the generated Jacobian through the field's JVP, and with its own choice
(`choose_solver`), at the baselines' tolerances; `rodas5-one-call` is Rodas5 without the compacted
solve (the batch stepped in one call until its slowest trajectory ends). For each (B, solver): calls 1
and 2 integrate to a tiny horizon (the same compiled program; compile = call 1 - call 2), call 3 to t = 100 (the run).
`--devices N` splits the host CPU into N JAX devices (XLA_FLAGS, set before JAX starts) over which
the batch is sharded (flowsim.devices).

Usage: python benchmarks/flow_throughput.py [--quick] [--devices N]
"""

import argparse
import os
import sys

if __name__ == "__main__" and "--devices" in sys.argv:  # before JAX starts
    count = sys.argv[sys.argv.index("--devices") + 1]
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"

import platform
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import scipy
import scipy.integrate
from sgd_cost import counts  # a sibling script: run this one as python benchmarks/flow_throughput.py

from flowsim import slr
from flowsim.integrate import Rodas5, Rosenbrock4, choose_solver
from flowsim.tasks.slr import _generated as generated

RTOL, ATOL = 1e-8, 1e-10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batches and horizon, a smoke run")
    parser.add_argument("--d", type=int, default=400)
    parser.add_argument("--L", type=int, default=10)
    parser.add_argument("--lam", type=float, default=0.1)
    parser.add_argument("--t1", type=float, default=100.0)
    parser.add_argument("--batches", type=counts, default="1000,10000")
    parser.add_argument(
        "--solvers",
        type=str,
        default="auto,tsit5,rodas5,rosenbrock4",
        help="of auto, tsit5, rodas5, rodas5-one-call, rosenbrock4",
    )
    parser.add_argument("--ivp-trajectories", type=int, default=20, help="RK45 loop subset (LSODA: 5x as many)")
    parser.add_argument("--devices", type=int, default=1, help="JAX CPU devices to shard the batch over")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.batches, args.ivp_trajectories, args.t1 = [10, 100], 2, 20.0
    args.solvers = args.solvers.split(",")
    return args


def ivp_loop(problem, starts, t1, method):
    """solve_ivp on each start, on the jitted generated field (and Jacobian for LSODA), on the host's CPU.

    On a machine with a GPU the field still runs on the CPU: a baseline that sent each of its thousands of
    evaluations per trajectory to the GPU would time the transfers (measured on an H200: 1.0 LSODA
    trajectory per second against 22 on a 2-core CPU).

    **Returns:** seconds, mean field evaluations per trajectory, the final states, whether all succeeded.
    """
    with jax.default_device(jax.devices("cpu")[0]):
        return _ivp_loop(problem, starts, t1, method)


def _ivp_loop(problem, starts, t1, method):
    parameters = (problem.d, problem.L, problem.lam, problem.gamma, problem.eps)
    field = jax.jit(lambda y: generated.flow(*y, *parameters))
    jacobian = jax.jit(lambda y: generated.jacobian(*y, *parameters))
    field(starts[0]).block_until_ready(), jacobian(starts[0]).block_until_ready()  # compile outside the timing
    extra = {"jac": lambda t, y: np.asarray(jacobian(y))} if method == "LSODA" else {}
    ts = np.linspace(0.0, t1, 11)
    finals, evaluations, ok = [], 0, True
    start = time.perf_counter()
    for y0 in starts:
        solution = scipy.integrate.solve_ivp(
            lambda t, y: np.asarray(field(y)), (0.0, t1), y0, method=method, t_eval=ts, rtol=RTOL, atol=ATOL, **extra
        )
        finals.append(solution.y[:, -1])
        evaluations += solution.nfev
        ok &= solution.status == 0
    return time.perf_counter() - start, evaluations / len(starts), np.array(finals), ok


def time_flowsim(problem, m0, t1, options):
    """(compile seconds, run seconds, Trajectories) for one batch; options for solve_flow ({}: flowsim's choice)."""
    ts = jnp.linspace(0.0, t1, 11)
    times = []
    for horizon in (ts * 1e-9, ts * 1e-9, ts):  # the first two: same program, negligible run
        start = time.perf_counter()
        result = slr.solve_flow(problem, m0, horizon, rtol=RTOL, atol=ATOL, **options)
        result.ys.block_until_ready()
        times.append(time.perf_counter() - start)
    return times[0] - times[1], times[2], result


def machine():
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {jax.device_count()} JAX device(s), "
        f"python {platform.python_version()}, jax {jax.__version__} ({jax.default_backend()}), "
        f"diffrax {diffrax.__version__}, scipy {scipy.__version__}, numpy {np.__version__}"
    )


def main():
    args = parse_args()
    problem = slr.Problem(d=args.d, L=args.L, lam=args.lam)
    print(f"# flow throughput: {machine()}")
    print(
        f"# problem d={args.d} L={args.L} lam={args.lam}, sphere starts, t in [0, {args.t1:g}], 11 saved times, "
        f"rtol {RTOL:g} atol {ATOL:g}; load average at start {os.getloadavg()[0]:.2f}"
    )
    m_all = slr.initial_overlaps(jax.random.key(args.seed), args.d, max([*args.batches, 5 * args.ivp_trajectories]))
    baselines = {}
    for method, count in (("RK45", args.ivp_trajectories), ("LSODA", 5 * args.ivp_trajectories)):
        seconds, evaluations, finals, ok = ivp_loop(problem, np.asarray(m_all[:count]), args.t1, method)
        baselines[method] = (seconds / count, finals)
        print(
            f"baseline solve_ivp {method}{' + generated Jacobian' if method == 'LSODA' else ''}: {count} trajectories "
            f"in {seconds:.2f} s = {count / seconds:.3f} traj/s ({evaluations:.0f} field evaluations each; "
            f"all succeeded: {ok})",
            flush=True,
        )
    chosen, why = choose_solver(problem, m_all[: args.batches[-1]], args.t1, rtol=RTOL)
    print(f"flowsim's choice at these starts: {type(chosen).__name__} ({why})")
    solvers = {
        "auto": {},
        "tsit5": {"solver": diffrax.Tsit5()},
        "rodas5": {"solver": Rodas5()},
        # The batch stepped until its slowest trajectory ends, in one call (flowsim before the compacted solve).
        "rodas5-one-call": {"solver": Rodas5(), "compacted": False},
        "rosenbrock4": {"solver": Rosenbrock4()},
    }
    rows = []
    for batch in args.batches:
        for name in args.solvers:
            compile_s, run_s, result = time_flowsim(problem, m_all[:batch], args.t1, solvers[name])
            steps = np.asarray(result.num_steps)
            finals = np.asarray(result.ys[:, -1])
            deviation = max(
                float(np.abs(finals[: len(reference)] - reference).max()) for _, reference in baselines.values()
            )
            label = f"auto ({type(chosen).__name__})" if name == "auto" else name
            rows.append((label, batch, compile_s, run_s, steps, int((~np.asarray(result.ok)).sum()), deviation))
            print(f"  [{label}] B={batch}: compile {compile_s:.1f} s, run {run_s:.2f} s", flush=True)
    rk45, lsoda = (1 / baselines[method][0] for method in ("RK45", "LSODA"))
    print(f"\n## Throughput to t = {args.t1:g} (baselines: RK45 loop {rk45:.3f} traj/s, LSODA loop {lsoda:.2f} traj/s)")
    # "ns/traj step": the run's seconds over the steps its trajectories took (a step of one trajectory's solve).
    header = (
        f"{'flowsim solver':<22} {'B':>7} {'compile s':>9} {'run s':>8} {'traj/s':>9} {'x RK45':>7} {'x LSODA':>8} "
        f"{'steps mean/max':>15} {'ns/traj step':>12} {'fail':>4} {'|dev| vs ivp':>12}"
    )
    print(header)
    print("-" * len(header))
    for label, batch, compile_s, run_s, steps, failures, deviation in rows:
        rate = batch / run_s
        print(
            f"{label:<22} {batch:>7} {compile_s:>9.1f} {run_s:>8.2f} {rate:>9.1f} {rate / rk45:>7.1f} "
            f"{rate / lsoda:>8.2f} {f'{steps.mean():.0f}/{steps.max()}':>15} {run_s / steps.sum() * 1e9:>12.0f} "
            f"{failures:>4} {deviation:>12.1e}"
        )
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
