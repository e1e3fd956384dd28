"""Speed of the SLR family's seven-parameter flow (issue 55): small starts to convergence, tabulated moments against
the rule through every token, in one process.

spiked-SLR(nu), L tokens (default nu = 3, L = 3), softmax, free norms (ridge 0), starts k, v ~ N(0, 0.1^2 I / 100)
(`FamilyProblem.initial_states(key, n, "small")`), each solved by FamilyProblem's Rodas5 (rtol 1e-6, atol 1e-8) to
t = 1000, where every start has converged (the field below 1e-6). Both tasks are a FamilyProblem with its default rule
(Gauss-Hermite(3, 16) at L = 3, 4096 points); they differ in how the risk and its derivatives are taken:

- baseline, "through tokens": `family_risk` (each token's moments at every rule point), its gradient by reverse mode,
  the Jacobian by forward over reverse (FamilyProblem's path when this was written), on --baseline-starts starts;
- "tabulated": `flowsim.tasks.slr._family_fast.tabulate` once (timed: the rule's moments on a Chebyshev grid, to
  1e-10), then `fast_risk`, `fast_field`, `fast_jacobian` from the table, on --starts starts in chunks of --chunk
  (one compiled solve, reused). Chunks, because a vmapped batch larger than the CPU's caches runs slower a state
  (measured: 26 us a field at 10^4 states against 2.6 us at 10^3).

Both compile before they are timed (a solve to t = 1e-3). Reported: the seconds a start of each, their ratio, the
one-off costs (tabulate, compile), the largest difference of the final states on the baseline's starts, and whether
--starts starts took under a minute (run alone, and with the one-off costs). The machine's load average is printed:
on a CPU shared with other work the seconds are upper bounds.

Usage: python benchmarks/family_flow_speed.py [--starts N] [--chunk N] [--baseline-starts N] [--devices N] [--quick]
"""

import argparse
import os
import sys

if __name__ == "__main__" and "--devices" in sys.argv:  # before JAX starts
    count = sys.argv[sys.argv.index("--devices") + 1]
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"

import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from flowsim import slr
from flowsim._compile import compiled_method
from flowsim.integrate import solve_flow
from flowsim.tasks.slr import _family_fast as fast
from flowsim.tasks.slr import _generated_family as generated
from flowsim.tasks.slr._estimates import family_table_cost
from flowsim.tasks.slr._family_risk import family_risk


class ThroughTokens(slr.FamilyProblem):
    """FamilyProblem's path when this benchmark was written, spelled out so that it stays the baseline."""

    def _risk_at(self, y):
        return family_risk(self.data, self.attention, y, self.rules)

    def _field_at(self, y):
        return generated.free_flow(*y, *jax.grad(self._risk_at)(y), self.geometry.ridge)

    @compiled_method
    def jacobian(self, t, y):
        return self._points(jax.jacfwd(self._field_at), y)


class Tabulated(slr.FamilyProblem):
    """FamilyProblem with the risk, field and Jacobian from a `MomentTable` (the switch proposed for it)."""

    moments: fast.MomentTable | None = None

    def _risk_at(self, y):
        return fast.fast_risk(self.moments, y)

    def _field_at(self, y):
        return fast.fast_field(self.moments, y, self.geometry.ridge)

    @compiled_method
    def jacobian(self, t, y):
        return self._points(lambda state: fast.fast_jacobian(self.moments, state, self.geometry.ridge), y)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few starts and a coarse table: a smoke run")
    parser.add_argument("--nu", type=float, default=3.0)
    parser.add_argument("--L", type=int, default=3)
    parser.add_argument("--t1", type=float, default=1000.0)
    parser.add_argument("--starts", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=1000, help="starts a compiled solve takes at once")
    parser.add_argument("--baseline-starts", type=int, default=8)
    parser.add_argument("--tolerance", type=float, default=1e-10, help="the table's, on the moments")
    parser.add_argument("--devices", type=int, default=1, help="JAX CPU devices to shard each chunk over")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.starts, args.chunk, args.baseline_starts, args.tolerance, args.t1 = 64, 32, 2, 1e-6, 100.0
    args.chunk = min(args.chunk, args.starts)
    if args.starts % args.chunk:
        parser.error("--starts must be a multiple of --chunk (one compiled solve serves every chunk)")
    return args


def solve(task, starts, t1):
    """(seconds, Trajectories) of one solve to t1, the states fetched."""
    begin = time.perf_counter()
    result = solve_flow(task, starts, jnp.array([0.0, t1]))
    result.y_final.block_until_ready()
    return time.perf_counter() - begin, result


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {jax.device_count()} JAX device(s), "
        f"python {platform.python_version()}, jax {jax.__version__} ({jax.default_backend()})"
    )


def main():
    args = parse_args()
    data = slr.spiked_slr(args.nu, args.L)
    print(f"# SLR family flow speed: {machine()}")
    print(
        f"# spiked-SLR(nu={args.nu:g}), L={args.L}, softmax, ridge 0, small starts, t in [0, {args.t1:g}], Rodas5 rtol "
        f"1e-6 atol 1e-8; load average at start {os.getloadavg()[0]:.2f} (2 cores shared with other work)"
    )
    estimate = family_table_cost(args.starts, "lower --starts")
    print(f"estimated before work: {estimate.what}: {estimate.seconds:.0f} s", flush=True)
    baseline = ThroughTokens(data, "softmax")
    starts = baseline.initial_states(jax.random.key(args.seed), args.starts, "small")

    begin = time.perf_counter()
    table = fast.tabulate(data, "softmax", baseline.rules, tolerance=args.tolerance)
    tabulate_s = time.perf_counter() - begin
    errors = np.asarray(table.errors).max(axis=1)
    print(
        f"tabulate: {tabulate_s:.1f} s, degrees {table.degrees} on the box {tuple(round(v, 3) for v in table.box)}, "
        f"errors on the check grid (value, d/dx, d/dy, d2): {errors[0]:.1e}, {errors[1]:.1e}, {errors[2]:.1e}, "
        f"{errors[3:].max():.1e}",
        flush=True,
    )
    tabulated = Tabulated(data, "softmax", rules=baseline.rules, moments=table)
    chunks = starts.reshape(-1, args.chunk, 7)
    compile_s = solve(tabulated, chunks[0], 1e-3)[0]
    begin = time.perf_counter()
    results = [solve(tabulated, chunk, args.t1)[1] for chunk in chunks]
    run_s = time.perf_counter() - begin
    finals = np.concatenate([np.asarray(result.y_final) for result in results])
    steps = np.concatenate([np.asarray(result.num_steps) for result in results])
    failed = sum(int((~np.asarray(result.ok)).sum()) for result in results)
    field = np.abs(np.asarray(tabulated.vector_field(0.0, jnp.asarray(finals)))).max()
    print(
        f"tabulated: {args.starts} starts in {run_s:.1f} s run ({run_s / args.starts * 1e3:.2f} ms a start; "
        f"compile {compile_s:.1f} s), steps {steps.mean():.0f} mean / {steps.max()} max, {failed} failed, "
        f"largest |field| at the ends {field:.1e}",
        flush=True,
    )

    few = starts[: args.baseline_starts]
    baseline_compile_s = solve(baseline, few, 1e-3)[0]
    baseline_s, reference = solve(baseline, few, args.t1)
    deviation = np.abs(np.asarray(reference.y_final) - finals[: args.baseline_starts]).max()
    print(
        f"through tokens: {args.baseline_starts} starts in {baseline_s:.1f} s ({baseline_s / args.baseline_starts:.2f} "
        f"s a start; compile {baseline_compile_s:.1f} s)",
        flush=True,
    )
    ratio = (baseline_s / args.baseline_starts) / (run_s / args.starts)
    total = tabulate_s + compile_s + run_s
    print(f"\nspeedup a start: {ratio:.0f}x; final states differ by at most {deviation:.1e} on the baseline's starts")
    print(
        f"{args.starts} starts: {run_s:.1f} s run, {total:.1f} s with tabulate and compile (< 60 s: "
        f"{'yes' if run_s < 60 else 'no'} run alone, {'yes' if total < 60 else 'no'} with them); the baseline would "
        f"take {baseline_s / args.baseline_starts * args.starts / 60:.0f} min"
    )
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
