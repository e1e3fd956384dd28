"""`flowsim reproduce` in full (five experiments x 30 seeds, full lengths, figures) against the authors' per-step cost.

1. flowsim: the command `flowsim reproduce` in a fresh process, as a user runs it, timed from start
   to exit: with an empty compilation cache (a first run: everything compiled) and again with the
   cache that run left (every later run), with the CPU split into one JAX device per core (the
   command's default) and, for comparison, as one device (FLOWSIM_HOST_DEVICES=1).
2. The authors' way, timed here for a few hundred steps: one seed at a time, a Python loop over
   steps, vectors in R^d in float32 (docs/science.md section 6). A population step of projected
   gradient descent in R^400 and an online SGD step in R^80 (batch 5), both in NumPy; the
   population gradient comes from the closed-form risk (the jitted generated gradient at the
   step's overlaps, chained to the vectors), which is cheaper than the authors' numerical
   integration of zeta, so their cost is, if anything, underestimated here. The per-step costs,
   times the experiments' steps and seeds, give the authors' total; the ratio to flowsim's wall
   time is printed (issue 15's target: >= 150x, i.e. <= 20 s for flowsim).

With `--trees BEFORE AFTER` (checkouts, e.g. `git worktree add /tmp/before HEAD~1`), the command's first and later
runs of each tree (PYTHONPATH=TREE, its own compilation cache) are alternated over `--rounds`, so that a change is
measured against the machine's drift (its speed varies by a third between runs); the authors' way is not timed.

With `--breakdown`, instead: where a later run's time goes. `flowsim reproduce` runs in a fresh process with the
compilation cache a first run left (the command's own entry point, its default device split), and that process
records each experiment's seconds (run.json's phases), the seconds spent drawing and saving its figure, and JAX's
own accounts of tracing, lowering and compiling or loading programs (`jax.monitoring`'s duration events).

Usage: python benchmarks/reproduce_speed.py [--quick] [--trees BEFORE AFTER [--rounds 2]] [--breakdown]
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
from compile_options import checkout  # sibling script: run this one as python benchmarks/reproduce_speed.py

from flowsim import slr
from flowsim.tasks.slr import _generated as generated

SEEDS = 30


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="flowsim reproduce --quick, fewer timed steps")
    parser.add_argument("--steps", type=int, default=300, help="steps of the authors' loops timed")
    parser.add_argument("--single-device", action="store_true", help="also time one JAX device")
    parser.add_argument("--trees", nargs=2, type=checkout, metavar=("BEFORE", "AFTER"), help="two checkouts to compare")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two trees")
    parser.add_argument("--breakdown", action="store_true", help="where a later run's time goes")
    parser.add_argument("--record", metavar="OUT", help=argparse.SUPPRESS)  # the breakdown's child process
    args = parser.parse_args()
    if args.quick:
        args.steps = 50
    return args


def run_reproduce(cache: str, devices: str | None, quick: bool, tree: str | None = None) -> float:
    """Wall seconds of `flowsim reproduce` in a fresh process with this compilation cache folder (and flowsim from
    the checkout `tree`, if given)."""
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache)
    env.pop("XLA_FLAGS", None)
    if tree is not None:
        env["PYTHONPATH"] = tree
    if devices is not None:
        env["FLOWSIM_HOST_DEVICES"] = devices
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "flowsim.cli", "reproduce", "--out", f"{out}/run", "--no-progress"]
        start = time.perf_counter()
        # Run from a folder outside any checkout: `python -m` puts the working folder first on sys.path, where a
        # checkout's flowsim would shadow PYTHONPATH's (and --trees would time one tree twice).
        subprocess.run([*command, *(["--quick"] if quick else [])], check=True, env=env, capture_output=True, cwd=out)
        return time.perf_counter() - start


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def authors_population_step_seconds(steps: int, d: int = 400, L: int = 10, lam: float = 0.1) -> float:
    """Seconds per step of projected gradient descent in R^d, float32, one seed, a Python loop."""
    rng = np.random.default_rng(0)
    k_star, v_star = _unit(rng.normal(size=(2, d))).astype(np.float32)
    k, v = _unit(rng.normal(size=(2, d))).astype(np.float32)
    parameters = (d, L, lam, math.sqrt(0.5), 0.0)
    gradient = jax.jit(jax.grad(lambda m: generated.risk(*m, *parameters)))
    overlaps = lambda k, v: np.array([k @ k_star, v @ v_star, v @ k_star, k @ v_star, k @ v], np.float64)  # noqa: E731
    gradient(overlaps(k, v)).block_until_ready()
    start = time.perf_counter()
    for _ in range(steps):
        g = np.asarray(gradient(overlaps(k, v)), np.float32)  # dR / d(kappa, nu, theta, eta, rho)
        grad_k = g[0] * k_star + g[3] * v_star + g[4] * v
        grad_v = g[1] * v_star + g[2] * k_star + g[4] * k
        grad_k -= (grad_k @ k) * k  # onto the tangent space of the sphere, then the step and renormalisation
        grad_v -= (grad_v @ v) * v
        k, v = _unit(k - 4e-3 * grad_k), _unit(v - 4e-3 * grad_v)
    return (time.perf_counter() - start) / steps


def authors_sgd_step_seconds(steps: int, d: int = 80, L: int = 10, batch: int = 5, eps: float = 0.1) -> float:
    """Seconds per online SGD step in R^d, float32, one seed, a Python loop (erf attention, squared loss)."""
    from scipy.special import erf

    rng = np.random.default_rng(0)
    k_star, v_star = _unit(rng.normal(size=(2, d))).astype(np.float32)
    k, v = _unit(rng.normal(size=(2, d))).astype(np.float32)
    s, gamma = math.sqrt(d / 2), math.sqrt(0.5)
    start = time.perf_counter()
    for step in range(steps):
        lam = 2.0 / (1 + 1e-4 * step)
        X = rng.normal(size=(batch, L, d)).astype(np.float32)
        where = rng.integers(L, size=batch)
        X[np.arange(batch), where] = s * k_star + gamma * rng.normal(size=(batch, d)).astype(np.float32)
        y = X[np.arange(batch), where] @ v_star + eps * rng.normal(size=batch).astype(np.float32)
        scores, values = X @ k, X @ v
        weights = erf(lam * scores)
        residual = (weights * values).sum(axis=1) - y
        dweights = 2 * lam / math.sqrt(math.pi) * np.exp(-((lam * scores) ** 2))
        grad_k = np.einsum("b,bl,bld->d", residual, dweights * values, X) * 2 / batch
        grad_v = np.einsum("b,bl,bld->d", residual, weights, X) * 2 / batch
        grad_k -= (grad_k @ k) * k
        grad_v -= (grad_v @ v) * v
        k, v = _unit(k - 1e-3 * grad_k), _unit(v - 1e-3 * grad_v)
    return (time.perf_counter() - start) / steps


def compare_trees(trees: list[str], rounds: int, quick: bool) -> None:
    """First and later runs of each tree, alternated; the medians at the end."""
    seconds = {tree: [] for tree in trees}
    for round_ in range(rounds):
        for tree in trees:
            with tempfile.TemporaryDirectory() as cache:
                first, later = (run_reproduce(cache, None, quick, tree) for _ in range(2))
            seconds[tree].append((first, later))
            print(f"round {round_ + 1}, {tree}: first run {first:.1f} s, later run {later:.1f} s", flush=True)
    for tree, runs in seconds.items():
        first, later = np.median(runs, axis=0)
        print(f"{tree}: median first run {first:.1f} s, later run {later:.1f} s")


def main():
    args = parse_args()
    if args.record:
        record(args.record, args.quick)
        return
    print(
        f"# reproduce speed: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, python "
        f"{platform.python_version()}, jax {jax.__version__}; load average at start {os.getloadavg()[0]:.2f}"
    )
    if args.trees:
        compare_trees(args.trees, args.rounds, args.quick)
        return
    if args.breakdown:
        breakdown(args.quick)
        return
    configurations = [("a JAX device per core (default)", None)]
    if args.single_device:
        configurations.append(("one JAX device", "1"))
    flowsim_seconds = {}
    for label, devices in configurations:
        with tempfile.TemporaryDirectory() as cache:
            cold = run_reproduce(cache, devices, args.quick)
            warm = run_reproduce(cache, devices, args.quick)
        flowsim_seconds[label] = (cold, warm)
        print(
            f"flowsim reproduce{' --quick' if args.quick else ''}, {label}: "
            f"first run {cold:.1f} s, later runs {warm:.1f} s"
        )

    population = authors_population_step_seconds(args.steps)
    sgd = authors_sgd_step_seconds(args.steps)
    steps = {experiment.name: experiment.steps for experiment in slr.EXPERIMENTS}
    population_steps = sum(n for name, n in steps.items() if name != "sgd_sphere_schedule")
    total = SEEDS * (population * population_steps + sgd * steps["sgd_sphere_schedule"])
    quoted = SEEDS * (78e-6 * population_steps + 440e-6 * steps["sgd_sphere_schedule"])
    print(
        f"\nauthors' way, timed over {args.steps} steps: {population * 1e6:.0f} us per population step (R^400), "
        f"{sgd * 1e6:.0f} us per SGD step (R^80, batch 5); x {SEEDS} seeds x the full lengths = {total:.0f} s "
        f"({total / 60:.1f} min; with the per-step costs docs/science.md quotes, 78 and 440 us: {quoted / 60:.1f} min)"
    )
    print(f"\n{'flowsim':<36} {'run':>10} {'seconds':>8} {'x authors (timed)':>18} {'x authors (quoted)':>19}")
    for label, (cold, warm) in flowsim_seconds.items():
        for run, seconds in (("first", cold), ("later", warm)):
            print(f"{label:<36} {run:>10} {seconds:>8.1f} {total / seconds:>18.0f} {quoted / seconds:>19.0f}")
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


#: JAX's duration events (`jax.monitoring`) that the breakdown adds up, and what each one measures.
JAX_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "tracing (Python to jaxpr)",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering (jaxpr to StableHLO)",
    "/jax/core/compile/backend_compile_duration": "compiling, or loading from the cache",
}


def record(out: str, quick: bool) -> None:
    """The breakdown's child: `flowsim reproduce` in this process as the executable runs it (`flowsim.cli.command`),
    with JAX's durations and the figures' seconds recorded; prints them as one JSON line."""
    import jax.monitoring

    start = time.perf_counter()
    durations = dict.fromkeys(JAX_EVENTS, 0.0)

    def listen(event, seconds, **_):
        if event in durations:
            durations[event] += seconds

    jax.monitoring.register_event_duration_secs_listener(listen)
    import flowsim.results
    from flowsim.cli import command
    from flowsim.tasks import slr as task

    figures = {}

    def timed_figure(draw):
        def wrapped(result, *args, **kwargs):
            begun = time.perf_counter()
            figure = draw(result, *args, **kwargs)
            figures[result.experiment.name] = time.perf_counter() - begun
            return figure

        return wrapped

    def timed_save(save):
        def wrapped(figure, stem, *args, **kwargs):
            begun = time.perf_counter()
            paths = save(figure, stem, *args, **kwargs)
            name = os.path.basename(str(stem))
            figures[name] = figures.get(name, 0.0) + time.perf_counter() - begun
            return paths

        return wrapped

    # The command draws with the task package's experiment_figure, and its record saves with flowsim.results'
    # save_figure, looked up when it saves: the wrapped ones are those it calls.
    task.experiment_figure = timed_figure(task.experiment_figure)
    flowsim.results.save_figure = timed_save(flowsim.results.save_figure)
    imported = time.perf_counter() - start
    # As the executable runs: `command` splits the CPU into a device per core first (use_host_cores).
    sys.argv = ["flowsim", "reproduce", "--out", out, "--no-progress", *(["--quick"] if quick else [])]
    if command():
        raise SystemExit("flowsim reproduce failed")
    total = time.perf_counter() - start
    with open(os.path.join(out, "run.json")) as file:
        phases = json.load(file)["durations_s"]["phases"]
    measured = dict(total=total, imports=imported, phases=phases, figures=figures, jax=durations)
    print(json.dumps(dict(measured, devices=len(jax.devices()))))


def breakdown(quick: bool) -> None:
    """A later run of `flowsim reproduce` (a first run's cache warm): its seconds by phase, figure and JAX's work."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache)
        env.pop("XLA_FLAGS", None)
        first = run_reproduce(cache, None, quick)
        command = [sys.executable, os.path.abspath(__file__), "--record", f"{out}/run", *(["--quick"] if quick else [])]
        begun = time.perf_counter()
        child = subprocess.run(command, check=True, env=env, capture_output=True, text=True, cwd=out)
        wall = time.perf_counter() - begun
    measured = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"first run {first:.1f} s (compiles); the later run {wall:.1f} s, on {measured['devices']} JAX devices:")
    # Everything before the command's work: the interpreter, the imports of jax and flowsim, this script's own.
    start = wall - (measured["total"] - measured["imports"])
    # The command draws an experiment's figure in a background thread while the next experiment computes.
    print(f"\n{'phase':<34} {'seconds':>8} {'its figure, in the background':>30}")
    print(f"{'start-up, imports':<34} {start:>8.2f}")
    phases = measured["phases"]
    for name, seconds in phases.items():
        print(f"{name:<34} {seconds:>8.2f} {measured['figures'].get(name, 0.0):>30.2f}")
    rest = wall - start - sum(phases.values())
    print(f"{'tables, the last figure, run.json':<34} {rest:>8.2f}")
    print("\nJAX's work inside the phases above, all programs together (the compilation cache warm):")
    for event, seconds in measured["jax"].items():
        print(f"  {JAX_EVENTS[event]:<40} {seconds:6.2f} s")
    print(f"figures drawn and saved, all experiments: {sum(measured['figures'].values()):.2f} s")


if __name__ == "__main__":
    main()
