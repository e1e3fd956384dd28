"""Where a step of the batched stiff flow goes: the field, its Jacobian, the 5 x 5 inverse, a Rodas5 step.

Single-location regression at d = 400, L = 10, lam = 0.1 (the throughput benchmark's flow), B sphere
starts. Each part is vmapped over the batch and jitted alone, as the solve computes it; timed as the
fastest of `--repeats` calls after a compiling one, in ns per trajectory:

- field: `task_vector_field` (one evaluation);
- jacobian: `jax.jacfwd` of the field (the generated Jacobian, through the field's JVP);
- inverse: `flowsim.rosenbrock._inverse` of I / (gamma h) - J;
- step (looped) / step (unrolled): one `Rodas5.step`, its eight stages in a compiled loop (as flowsim
  solves) or unrolled;
- solve, per step: `diffeqsolve` with Rodas5 and a constant step (`--steps` steps), the loop's own
  work (saving, selecting) included.

With `--adaptive`, instead: the whole solve to t = 100 as flowsim runs it (Rodas5, PID control at
rtol 1e-8, saved at 11 times), per trajectory and loop iteration (the slowest trajectory's steps),
with the task's parameters traced (as `flowsim.integrate` passes them: one program for every value)
and as compile-time constants.

Usage: python benchmarks/flow_step_profile.py [--batches 10000,1000000] [--repeats 3] [--adaptive]
"""

import argparse
import os
import time

import diffrax
import jax
import jax.numpy as jnp
from sgd_cost import counts, machine  # a sibling script: run this one as python benchmarks/flow_step_profile.py

from flowsim import slr
from flowsim._compile import filter_jit
from flowsim._task import task_vector_field
from flowsim.integrate import traced
from flowsim.rosenbrock import Rodas5, _inverse, _Tableau


class _UnrolledRodas5(Rodas5):
    """Rodas5 with its stages unrolled (a larger program, no inner loop)."""

    tableau = _Tableau(*Rodas5.tableau[:-1], loop=False)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=counts, default="10000,1000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50, help="constant steps of the timed solve")
    parser.add_argument("--adaptive", action="store_true", help="time the adaptive solve, parameters traced or not")
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1")
    return args


def fastest(function, *arguments, repeats):
    """(compile seconds, fastest call seconds, the last call's result) of a jitted function.

    Jitted as the engine's solves are (`flowsim._compile.filter_jit`: XLA's options for them), so that its parts
    cost what they cost in `solve_flow`."""
    jitted = filter_jit(function)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        result = jax.block_until_ready(jitted(*arguments))
        times.append(time.perf_counter() - start)
    return times[0] - min(times[1:]), min(times[1:]), result


def parts(problem, steps):
    term = diffrax.ODETerm(task_vector_field)
    h = 0.05

    def field(y):
        return jax.vmap(lambda y: task_vector_field(0.0, y, problem))(y)

    def jacobian(y):
        return jax.vmap(jax.jacfwd(lambda y: task_vector_field(0.0, y, problem)))(y)

    def inverse(y):
        return jax.vmap(lambda y: _inverse(jnp.eye(5) / (0.19 * h) - jnp.outer(y, y)))(y)

    def step(solver):
        def one(y):
            state = solver.init(term, 0.0, h, y, problem)
            return solver.step(term, 0.0, h, y, problem, state, made_jump=False)[0]

        return lambda y: jax.vmap(one)(y)

    def solve(y):
        def one(y):
            return diffrax.diffeqsolve(
                term, Rodas5(), 0.0, h * steps, h, y, args=problem, max_steps=steps + 1, throw=False
            ).ys

        return jax.vmap(one)(y)

    return {
        "field": (field, 1),
        "jacobian": (jacobian, 1),
        "inverse": (inverse, 1),
        "step (looped)": (step(Rodas5()), 1),
        "step (unrolled)": (step(_UnrolledRodas5()), 1),
        "solve, per step": (solve, steps),
    }


def adaptive_solve(y, task):
    """The adaptive solve to t = 100 as flowsim runs it: (saved states, steps of each trajectory)."""
    ts = jnp.linspace(0.0, 100.0, 11)

    def one(y):
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(task_vector_field),
            Rodas5(),
            0.0,
            100.0,
            None,
            y,
            args=task,
            saveat=diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts), diffrax.SubSaveAt(t1=True)]),
            stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
            max_steps=100_000,
            throw=False,
        )
        return solution.ys, solution.stats["num_steps"]

    return jax.vmap(one)(y)


def main():
    args = parse_args()
    problem = slr.Problem(d=400, L=10, lam=0.1)
    print(f"# flow step profile: {machine()}; load average {os.getloadavg()[0]:.2f}")
    header = f"{'B':>8} {'part':<20} {'ns/trajectory':>14} {'ms/call':>9} {'compile s':>9}"
    print(header)
    print("-" * len(header))
    for batch in args.batches:
        y0 = slr.initial_overlaps(jax.random.key(0), 400, batch)
        if args.adaptive:
            # Traced: the task a jitted argument, as flowsim's solves take it; constants: closed over.
            for name, function, arguments in (
                ("traced", adaptive_solve, (y0, traced(problem))),
                ("constants", lambda y: adaptive_solve(y, problem), (y0,)),
            ):
                compile_s, best, (_, steps) = fastest(function, *arguments, repeats=args.repeats)
                steps = int(steps.max())
                print(
                    f"{batch:>8} {'adaptive, ' + name:<20} {best / steps / batch * 1e9:>14.2f} {best * 1e3:>9.2f} "
                    f"{compile_s:>9.1f}   ({steps} iterations)",
                    flush=True,
                )
            continue
        for name, (function, per) in parts(problem, args.steps).items():
            compile_s, best, _ = fastest(function, y0, repeats=args.repeats)
            print(
                f"{batch:>8} {name:<20} {best / per / batch * 1e9:>14.2f} {best * 1e3:>9.2f} {compile_s:>9.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
