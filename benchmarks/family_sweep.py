"""The follow-up's Figure 2 with dynamics: the seven-parameter flow's throughput, the whole sweep, the rules' errors.

Three parts (`--parts`, default all):

- `flow`: the gradient flow on the seven of N small starts to convergence (t = 1e4) at L = 3 (spiked-SLR, nu = 3,
  softmax), at the sweep's tolerances (Rodas5, rtol = atol = 1e-3), with Gauss-Hermite rules over the tokens'
  orbits (`token_rule`) of orders 6, 8, 12 (`--orders`) at N = 256, and of order 8 at N = 64, 1024 (`--starts`):
  the cost per start, extrapolated to 10^4 starts (measured there, at the lowest order, with `--ten-thousand`),
  the share of starts ending within 5% of the Bayes point, and the rule's error there against order 48. Baseline,
  in the same run: the task's defaults (the 4096-point product rule `default_rules`, rtol 1e-6, atol 1e-8) on 8
  starts.
- `sweep`: `figure_two` with its defaults (3 settings x 4 maps x 8 nu) in a fresh process (every program
  compiled: a cold run), its estimate before work against the time taken, wall and CPU.
- `rules`: what the sweep's rules cost in accuracy, at each setting's largest nu and at nu = 2: the optimum's
  and the Bayes risk's fine rule against a finer one (order 128, or the most within 2e5 points); the flow rule's
  risk at the flow's end nearest the optimum against the fine rule there (where it is near the plane k || k*,
  v || v*, on which the fine rule is exact); for softmax, the flow's ends and time to the Bayes point at the
  sweep's tolerances against rtol 1e-4, atol 1e-6.

Times are on this machine as it is (its load is printed: a shared 2-core machine runs slower than alone);
CPU seconds are this process's (`time.process_time`, or the child's for the sweep).

Usage: python benchmarks/family_sweep.py [--parts flow sweep rules] [--starts 64 256 1024] [--orders 6 8 12]
       [--ten-thousand] [--figure STEM]
"""

import argparse
import os
import platform
import resource
import subprocess
import sys
import time

import jax
import numpy as np

from flowsim import slr
from flowsim.integrate import solve_flow
from flowsim.tasks.slr._family_figure import (
    FIGURE_TWO_MAPS,
    FIGURE_TWO_NUS,
    FIGURE_TWO_SETTINGS,
    FigureRules,
    _fine_risks,
    _log_times,
    basin_shares,
    bayes_distance,
    figure_two_work,
    population_optimum,
    relative_distance,
    token_rule,
)
from flowsim.tasks.slr._family_risk import bayes_risk, default_rules, family_risk


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["flow", "sweep", "rules"], choices=["flow", "sweep", "rules"])
    parser.add_argument(
        "--starts", nargs=3, type=int, default=[64, 256, 1024], help="starts timed (order: --orders' 2nd)"
    )
    parser.add_argument("--orders", nargs=3, type=int, default=[6, 8, 12], help="rule orders timed at the 2nd --starts")
    parser.add_argument("--ten-thousand", action="store_true", help="also solve 10^4 starts")
    parser.add_argument("--figure", help="with the sweep: write its figure (PNG and PDF) to this path stem")
    parser.add_argument("--sweep-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def timed(function):
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    jax.block_until_ready(jax.tree.leaves(result))
    return result, time.perf_counter() - wall, time.process_time() - cpu


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
        f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; jax {jax.__version__}"
    )


# --- (a) the flow of many starts at L = 3 -------------------------------------------------------------------------


def flow_part(args) -> None:
    data = slr.spiked_slr(3.0, 3)
    softmax = slr.ATTENTION_MAPS["softmax"]
    reference = (token_rule(data, 3, 48),)
    ts = _log_times(1e4, 41)
    print(f"\n## The flow on the seven at L = 3 (spiked-SLR nu = 3, softmax), to t = 1e4: {machine()}")
    print("Rodas5 at rtol = atol = 1e-3; rule error: the rule's risk at the flow's end against order 48's\n")
    print(
        "| rule | points | starts | first call (s) | run: wall (s) | run: CPU (s) | per start (ms, wall) | steps (max) "
        "| at Bayes | rule error at the end | 10^4 starts (s, extrapolated) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cases = [(order, args.starts[1]) for order in args.orders] + [(args.orders[1], n) for n in args.starts[::2]]
    if args.ten_thousand:
        cases.append((args.orders[0], 10_000))
    for order, n in cases:
        rule = token_rule(data, 3, order)
        problem = slr.FamilyProblem(data, "softmax", rules=(rule,))
        y0 = problem.initial_states(jax.random.key(n), n, "small")

        def solve(problem=problem, y0=y0):
            return solve_flow(problem, y0, ts, rtol=1e-3, atol=1e-3)

        _, first, _ = timed(solve)
        solved, wall, cpu = timed(solve)
        end = np.asarray(solved.y_final)
        near = float(np.mean(bayes_distance(problem, end) <= 0.05))
        error = abs(
            float(family_risk(data, softmax, end[0], (rule,)) / family_risk(data, softmax, end[0], reference)) - 1
        )
        steps = int(np.max(np.asarray(solved.num_steps)))
        cells = [f"order {order}", rule.size, n, f"{first:.1f}", f"{wall:.2f}", f"{cpu:.2f}", f"{1e3 * wall / n:.2f}"]
        cells += [steps, f"{near:.2f}", f"{error:.1e}", f"{1e4 * wall / n:.0f}"]
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)
    baseline = slr.FamilyProblem(data, "softmax")
    y0 = baseline.initial_states(jax.random.key(1), 8, "small")
    timed(lambda: solve_flow(baseline, y0, ts))
    solved, wall, cpu = timed(lambda: solve_flow(baseline, y0, ts))
    rule = default_rules(data)[0]
    print(
        f"\nbaseline (the task's defaults: {rule.name}, {rule.size} points; rtol 1e-6, atol 1e-8), 8 starts: "
        f"{wall:.2f} s wall, {cpu:.2f} s CPU, {1e3 * wall / 8:.0f} ms a start, "
        f"{int(np.max(np.asarray(solved.num_steps)))} steps"
    )


# --- (b) the whole sweep, cold ------------------------------------------------------------------------------------


def sweep_worker(figure: str | None) -> None:
    from flowsim.tasks.slr._family_figure import figure_two, figure_two_figure, figure_two_text

    began = time.perf_counter()
    result = figure_two(progress=False, log=lambda line: print(f"[{time.perf_counter() - began:6.0f} s] {line}"))
    print(figure_two_text(result))
    if figure:
        import matplotlib

        matplotlib.use("Agg")
        from flowsim.results import save_figure

        print("figure:", *save_figure(figure_two_figure(result), figure))


def sweep_part(args) -> None:
    rules = FigureRules()
    _, costs = figure_two_work(tuple(FIGURE_TWO_SETTINGS), FIGURE_TWO_MAPS, FIGURE_TWO_NUS, starts=8, n=8, rules=rules)
    estimate = sum(cost.seconds for cost in costs)
    print(f"\n## The Figure-2 sweep (figure_two's defaults), cold, in a fresh process: {machine()}")
    for cost in costs:
        print(f"- estimated: {cost.what}: {cost.seconds:.0f} s")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    env = {key: value for key, value in os.environ.items() if key != "JAX_COMPILATION_CACHE_DIR"}
    command = [sys.executable, os.path.abspath(__file__), "--sweep-worker"]
    command += ["--figure", args.figure] if args.figure else []
    done = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(done.stdout)
    if done.returncode:
        print(done.stderr[-3000:])
    print(f"sweep: {wall:.0f} s wall, {cpu:.0f} s CPU (estimated before work: {estimate:.0f} s); {machine()}")


# --- (c) the rules' errors ----------------------------------------------------------------------------------------


def _finer(data, rules: FigureRules):
    return FigureRules(rules.search, rules.search_h, rules.search_points, 128, 200_000).for_plane(data)


def rules_part(args) -> None:
    rules = FigureRules()
    print(f"\n## What the sweep's rules cost in accuracy: {machine()}")
    print(
        "| setting | nu | map | search / flow rule (points) | fine rule (points) | optimum: fine vs finer (rel.) "
        "| Bayes: fine vs finer (rel.) | flow's end: flow rule vs fine (rel.) | flow end vs optimum "
        "| loose vs tight solve: ends, time to Bayes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for setting, make in FIGURE_TWO_SETTINGS.items():
        for nu in (2.0, FIGURE_TWO_NUS[-1]):
            data = make(nu)
            search, fine, finer = rules.for_search(data), rules.for_plane(data), _finer(data, rules)
            bayes_fine, bayes_finer = float(bayes_risk(data, fine)), float(bayes_risk(data, finer))
            for attention in FIGURE_TWO_MAPS:
                optimum = population_optimum(data, attention, key=1, rules=search, plane_rules=fine)
                attention_map = slr.ATTENTION_MAPS[attention]
                at_finer = float(family_risk(data, attention_map, optimum.seven, finer))
                problem = slr.FamilyProblem(data, attention, rules=search)
                loose = basin_shares(problem, key=2)
                # The group nearest the optimum; the fine rule (exact in h on the plane) only where it is near it.
                group = min(loose.groups, key=lambda g: float(loose.distance(g.point, optimum.seven)))
                end_fine = float(_fine_risks(data, attention_map, group.point[None], fine)[0])
                solve = "-"
                if attention == "softmax":  # the time to the Bayes point is softmax's measure
                    tight = basin_shares(problem, key=2, rtol=1e-4, atol=1e-6)
                    ends = float(np.max(relative_distance(loose.end_points, tight.end_points)))
                    times = np.max(np.abs(np.log(loose.time_to_bayes / tight.time_to_bayes)))
                    solve = f"{ends:.1e}, " + ("equal" if times == 0 else f"ratio {np.exp(times):.2f}")
                cells = [
                    setting,
                    f"{nu:g}",
                    attention,
                    " + ".join(str(rule.size) for rule in search),
                    " + ".join(str(rule.size) for rule in fine),
                    f"{abs(optimum.risk / at_finer - 1):.1e}",
                    f"{abs(bayes_fine / bayes_finer - 1):.1e}",
                    ("off the plane" if np.isnan(end_fine) else f"{abs(group.risk / end_fine - 1):.1e}")
                    + ("" if group.settled else " (moving)"),
                    f"{loose.distance(group.point, optimum.seven):.2g} ({group.share:.2f} of starts)",
                    solve,
                ]
                print("| " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    args = parse_args()
    if args.sweep_worker:
        sweep_worker(args.figure)
        return
    if "flow" in args.parts:
        flow_part(args)
    if "sweep" in args.parts:
        sweep_part(args)
    if "rules" in args.parts:
        rules_part(args)


if __name__ == "__main__":
    main()
