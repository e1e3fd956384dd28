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

With `--kernels`, instead: the compiled programs of `slr.solve_flow` itself (the one call, `solve`, and the compacted
solve's round, `advance_rows`), read from XLA's dump of them after its optimisations, in a fresh process without the
compilation cache: the kernels one iteration of the solver's loop launches (every instruction of the loop's body
but parameters, constants, tuples and control flow: fusions, copies, library calls; an inner loop counted as often as
XLA knows it runs) and the bytes they read and write (their operands and results; a fusion's parameter read only
through slices counts the slices, a buffer it updates in place the update: still an upper bound). On a GPU these are
its kernels; on the CPU the thunks of XLA's runtime (a small call, which XLA:CPU emits inside one, counts once).

Usage: python benchmarks/flow_step_profile.py [--batches 10000,1000000] [--repeats 3] [--adaptive | --kernels]
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
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
    parser.add_argument("--kernels", action="store_true", help="kernels and bytes per iteration of solve_flow's loops")
    parser.add_argument("--dump", type=int, help=argparse.SUPPRESS)  # --kernels' child: solve B starts
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


#: HLO instructions that launch no kernel: values, tuples, and control flow (whose bodies are counted instead).
NOT_KERNELS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional", "call"}
#: Bytes of each element type of an HLO shape.
BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4}
BYTES |= {"s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape, e.g. "f64[1000,5]{1,0}" or a tuple "(f64[5], s32[])"."""
    total = 0
    for element, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape):
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += BYTES.get(element, 0) * count
    return total


def computations(hlo: str) -> dict[str, list[tuple[str, str, str, str]]]:
    """Each computation of an HLO module's text: its instructions as (name, shape, opcode, the rest of the line)."""
    found, current = {}, None
    for line in hlo.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header:
            current = found.setdefault(header.group(1), [])
            continue
        instruction = re.match(r"^\s+(?:ROOT )?%?([\w.\-]+) = (\(.*?\)|\S+) ([\w\-]+)\((.*)$", line)
        if instruction and current is not None:
            current.append(instruction.groups())
    return found


def called(rest: str) -> list[str]:
    """The computations a conditional or call instruction runs (its branches, or the one it applies)."""
    found = re.findall(
        r"branch_computations=\{([^}]*)\}|(?:to_apply|true_computation|false_computation)=%?([\w.\-]+)", rest
    )
    return [name.strip().lstrip("%") for group in found for names in group for name in names.split(",") if name.strip()]


def per_iteration(name: str, module: dict) -> tuple[float, float, bool]:
    """(kernels, bytes read and written, whether every inner loop's trip count was known) of one run of a
    computation, inner loops counted as often as XLA knows they run (once where it does not)."""
    kernels = moved = 0.0
    known = True
    shapes = {instruction: shape for instruction, shape, _, _ in module[name]}
    for _, shape, opcode, rest in module[name]:
        if opcode == "while":
            trips = re.search(r'"known_trip_count":\{"n":"(\d+)"', rest)
            count, inner_moved, inner_known = per_iteration(re.search(r"body=%?([\w.\-]+)", rest).group(1), module)
            times = int(trips.group(1)) if trips else 1
            kernels, moved = kernels + times * count, moved + times * inner_moved
            known = known and inner_known and trips is not None
        elif opcode in ("conditional", "call") and "small_call" not in rest:
            branches = [per_iteration(branch, module) for branch in called(rest) if branch in module]
            if branches:  # one branch runs: the costliest is counted
                count, inner_moved, inner_known = max(branches)
                kernels, moved, known = kernels + count, moved + inner_moved, known and inner_known
        # XLA:CPU emits a small call's computation (a scatter's loop, say) inside one kernel: the call is a kernel.
        elif opcode not in NOT_KERNELS or opcode == "call":
            operands = [shapes.get(operand, "") for operand in re.findall(r"%([\w.\-]+)", rest.split("), ")[0])]
            kernels += 1
            fused = re.search(r"calls=%?([\w.\-]+)", rest) if opcode == "fusion" else None
            if fused and fused.group(1) in module:
                moved += fusion_bytes(module[fused.group(1)], shape, operands)
            else:
                moved += shape_bytes(shape) + sum(map(shape_bytes, operands))
    return kernels, moved, known


#: Operations that read part of their operand: a fusion's parameter used only by these is read that much.
SLICES = {"slice", "dynamic-slice", "gather"}


def fusion_bytes(fused: list, shape: str, operands: list[str]) -> int:
    """Bytes a fusion reads and writes: a parameter used only by slices counts the slices, and a fusion whose result
    is a dynamic-update-slice of a parameter (a buffer updated in place) counts the update, not the buffer."""
    parameters = {name: int(rest.split(")")[0]) for name, _, opcode, rest in fused if opcode == "parameter"}
    uses = {index: [] for index in parameters.values()}
    for _, result, opcode, rest in fused:
        for operand in re.findall(r"%([\w.\-]+)", rest.split("), ")[0]):
            if operand in parameters:
                uses[parameters[operand]].append((opcode, result))
    *_, root_opcode, root_rest = fused[-1]  # XLA prints a computation's root last
    written = shape_bytes(shape)
    in_place = None
    if root_opcode == "dynamic-update-slice":
        buffer, update = re.findall(r"%([\w.\-]+)", root_rest.split("), ")[0])[:2]
        in_place = parameters.get(buffer)
        written = shape_bytes(dict((n, s) for n, s, _, _ in fused).get(update, ""))
    read = 0
    for index, operand in enumerate(operands):
        used = uses.get(index, [])
        if index == in_place:
            continue
        if used and all(opcode in SLICES for opcode, _ in used):
            read += sum(shape_bytes(result) for _, result in used)
        else:
            read += shape_bytes(operand)
    return read + written


def kernels_child(batch: int) -> None:
    """--kernels' child: solve_flow from `batch` sphere starts to t = 1, compacted as the engine chooses, then in one
    call; XLA dumps the programs (XLA_FLAGS, set by the parent)."""
    problem = slr.Problem(d=400, L=10, lam=0.1)
    y0 = slr.initial_overlaps(jax.random.key(0), 400, batch)
    for compacted in (None, False):
        slr.solve_flow(problem, y0, jnp.linspace(0.0, 1.0, 11), compacted=compacted)


def kernels(batches) -> None:
    """Kernels and bytes per iteration of the loops of `solve_flow`'s programs, per batch."""
    print(f"{'B':>8} {'program':<13} {'loop (where JAX made it)':<44} {'kernels':>9} {'MB/iteration':>13}")
    print("(+: an inner loop whose trip count XLA does not know, counted once)")
    for batch in batches:
        with tempfile.TemporaryDirectory() as dump:
            env = dict(
                os.environ,
                XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump} "
                "--xla_dump_hlo_as_text --xla_dump_hlo_module_re=solve|advance_rows",
            )
            env.pop("JAX_COMPILATION_CACHE_DIR", None)  # a program loaded from the cache is not compiled, nor dumped
            subprocess.run([sys.executable, __file__, "--dump", str(batch)], check=True, env=env)
            for path in sorted(glob.glob(os.path.join(dump, "*after_optimizations.txt"))):
                program = re.search(r"jit_(\w+?)\.", os.path.basename(path)).group(1)
                with open(path) as file:
                    module = computations(file.read())
                # Each loop by its body, named by where JAX made it (the while's op_name, its last parts).
                loops = {
                    re.search(r"body=%?([\w.\-]+)", rest).group(1): re.search(r'op_name="([^"]*)"', rest)
                    for instructions in module.values()
                    for _, _, opcode, rest in instructions
                    if opcode == "while"
                }
                # Every loop of ten kernels or more: an outer loop's iteration holds one of each loop inside it.
                for body in sorted(loops, key=lambda b: -per_iteration(b, module)[0]):
                    count, moved, known = per_iteration(body, module)
                    where = "/".join(loops[body].group(1).split("/")[-3:]) if loops[body] else body
                    if count >= 10:
                        mark = "" if known else "+"
                        print(f"{batch:>8} {program:<13} {where[-44:]:<44} {count:>8.0f}{mark:1} {moved / 1e6:>13.1f}")


def main():
    args = parse_args()
    if args.dump:
        kernels_child(args.dump)
        return
    if args.kernels:
        print(f"# flow kernels: {machine()}")
        kernels(args.batches)
        return
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
