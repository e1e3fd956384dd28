"""What an ordinary interpreter exit costs after a flowsim command, against the executable's (`flowsim.cli.executable`).

The executable ends its process with `os._exit` once the command has returned (its files written, its streams
flushed, a cluster left), skipping the interpreter's teardown: freeing every object, JAX's backends and every
compiled program. Both ways run the same command in a fresh process with the same warm compilation cache,
alternated over `--rounds` so that the machine's drift falls on both:

- executable: `python -m flowsim.cli COMMAND` (what `flowsim COMMAND` runs);
- ordinary exit: `python -c "import sys; from flowsim.cli import command; sys.exit(command())" COMMAND`, the
  same `command()` followed by Python's own exit (atexit handlers, garbage collection, module teardown).

Each process prints how long its `command()` took: the wall time outside it is start-up, imports and the exit,
the same for both ways but the exit, so that the difference of the two is what the executable saves.

Usage: python benchmarks/exit_cost.py [--rounds 3] [-- COMMAND ...]   (default command: reproduce --no-progress)
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

#: `command()` timed, then the exit of the given kind ("hard": the executable's, "ordinary": Python's).
WRAPPER = """
import os, sys, time
from flowsim.cli import command, executable
kind = sys.argv.pop(1)
sys.argv[0] = "flowsim"
start = time.perf_counter()
if kind == "hard":
    import flowsim.cli
    timed = flowsim.cli.command
    def command_timed():
        status = timed()
        print(f"COMMAND {time.perf_counter() - start:.3f}", file=sys.stderr, flush=True)
        return status
    flowsim.cli.command = command_timed
    executable()
status = command()
print(f"COMMAND {time.perf_counter() - start:.3f}", file=sys.stderr, flush=True)
sys.exit(status)
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two ways")
    parser.add_argument("command", nargs="*", default=["reproduce", "--no-progress"], help="the flowsim command")
    return parser.parse_args()


def run(kind: str, command: list[str]) -> tuple[float, float]:
    """(wall seconds of the process, seconds of its `command()`), in a fresh process from a folder outside any
    checkout, its --out a new folder."""
    with tempfile.TemporaryDirectory() as folder:
        arguments = [sys.executable, "-c", WRAPPER, kind, *command, "--out", f"{folder}/out"]
        start = time.perf_counter()
        done = subprocess.run(arguments, capture_output=True, text=True, cwd=folder, check=True)
        wall = time.perf_counter() - start
    inside = [line for line in done.stderr.splitlines() if line.startswith("COMMAND ")]
    return wall, float(inside[-1].split()[1])


def main():
    args = parse_args()
    print(f"# exit cost: {' '.join(args.command)}; load average at start {os.getloadavg()[0]:.2f}")
    run("hard", args.command)  # the compilation cache warm for both ways
    times = {"hard": [], "ordinary": []}
    for round_ in range(args.rounds):
        for kind in ("ordinary", "hard") if round_ % 2 else ("hard", "ordinary"):
            wall, inside = run(kind, args.command)
            times[kind].append((wall, inside))
            print(f"round {round_ + 1}, {kind} exit: {wall:.2f} s wall, command() {inside:.2f} s, outside it "
                  f"{wall - inside:.2f} s")  # fmt: skip
    outside = {kind: statistics.median(wall - inside for wall, inside in rows) for kind, rows in times.items()}
    walls = {kind: statistics.median(wall for wall, _ in rows) for kind, rows in times.items()}
    print(
        f"median wall: executable {walls['hard']:.2f} s, ordinary exit {walls['ordinary']:.2f} s; outside command() "
        f"(start-up, imports and the exit): {outside['hard']:.2f} s against {outside['ordinary']:.2f} s"
    )


if __name__ == "__main__":
    main()
