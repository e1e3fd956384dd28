"""The portrait's peak memory against its estimate before work (`flowsim.tasks.slr._estimates`, `flowsim portrait`).

Each grid size runs `flowsim portrait --grid G --trajectories 0` in a fresh process (the streamline grid is the part
that grows with G: the sample trajectories are left out), and its peak resident memory is read from the kernel's
account of the finished child (`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`, the largest of the children waited
for so far: the sizes run in increasing order, so each reading is the new child's). The estimate is what the command
checks against the memory available before it makes its folder: the sum of its `Need`s at the same options.

Printed per size: the measured peak, the estimate, their ratio (peak / estimate), and the peak above the run at the
default grid (the process's own: Python, JAX, matplotlib, the compiled programs), which the estimate does not count
(it is checked against the memory still available to the running process).

Usage: python benchmarks/portrait_memory.py [--grids 2500,4000,6000]
"""

import argparse
import resource
import subprocess
import sys
import tempfile

from flowsim._memory import format_bytes
from flowsim.cli import _parser
from flowsim.tasks.slr import _estimates

#: The command's default grid: the process's memory without a large grid.
DEFAULT_GRID = 41


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", default="2500,4000,6000", help="grid sizes, comma-separated, increasing")
    return parser.parse_args()


def arguments(grid: int, out: str) -> list[str]:
    return ["portrait", "--grid", str(grid), "--trajectories", "0", "--out", out]


def estimate(grid: int) -> int:
    """The bytes the command's estimate before work needs at this grid (its options parsed as the command does)."""
    args = _parser().parse_args(arguments(grid, "unused"))
    needs, _ = _estimates.COMMANDS["portrait"](args)
    return sum(need.nbytes for need in needs)


def peak(grid: int) -> int:
    """The peak resident bytes of `flowsim portrait` at this grid, in a fresh process (Linux: ru_maxrss in KiB)."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "flowsim.cli", *arguments(grid, f"{folder}/out")]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def main() -> None:
    grids = [int(g) for g in parse_args().grids.split(",")]
    if grids != sorted(grids) or grids[0] <= DEFAULT_GRID:
        raise SystemExit(f"--grids must increase and exceed the default grid {DEFAULT_GRID}")
    base = peak(DEFAULT_GRID)
    print(f"peak at the default grid {DEFAULT_GRID}: {format_bytes(base)}\n")
    print("| grid | measured peak | estimate | peak / estimate | peak above the default grid's |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for grid in grids:
        measured, estimated = peak(grid), estimate(grid)
        print(
            f"| {grid} | {format_bytes(measured)} | {format_bytes(estimated)} | {measured / estimated:.2f} "
            f"| {format_bytes(measured - base)} ({(measured - base) / grid**2 / 8:.1f} values per point) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
