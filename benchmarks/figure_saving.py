"""Saving a figure as PNG and PDF: `flowsim.results.save_figure` against laying the figure out for each file.

The figures are `flowsim reproduce`'s five (`slr.experiment_figure`: four panels, 30 seeds, 201 logged points, log
axes whose tick labels are mathtext), from a quick reproduction (the full one draws the same number of points).
The baseline is what `save_figure` did before: two `savefig` calls, each running the figure's constrained layout
and measuring its text anew. Both write the same two files (the baseline to memory, `save_figure` to a temporary
folder, which costs it a few milliseconds more). Each figure is built anew for each timing, and the two ways are
alternated over `--rounds`, in one process.

Usage: python benchmarks/figure_saving.py [--rounds 3]
"""

import argparse
import io
import os
import platform
import tempfile
import time

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from flowsim import slr
from flowsim.results import save_figure


def laid_out_for_each_file(fig, _folder) -> None:
    """The baseline: PNG then PDF, each `savefig` laying the figure out (save_figure before 2026-11-29)."""
    for suffix, metadata in (("png", None), ("pdf", {"CreationDate": None})):
        fig.savefig(io.BytesIO(), format=suffix, dpi=150, bbox_inches="tight", metadata=metadata)


def flowsims(fig, folder) -> None:
    save_figure(fig, os.path.join(folder, "figure"))


def seconds(result, save, folder) -> float:
    fig = slr.experiment_figure(result)
    start = time.perf_counter()
    save(fig, folder)
    elapsed = time.perf_counter() - start
    plt.close(fig)
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two ways (>= 1)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    print(
        f"# figure saving: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"matplotlib {matplotlib.__version__}; load average at start {os.getloadavg()[0]:.2f}"
    )
    results = slr.reproduce(jax.random.key(0), quick=True, seeds=30)
    ways = {"laid out for each file": laid_out_for_each_file, "save_figure": flowsims}
    with tempfile.TemporaryDirectory() as folder:
        for result in results:  # a first save of each, untimed: fonts and caches loaded
            seconds(result, flowsims, folder)
        totals = {name: [] for name in ways}
        for round_ in range(args.rounds):
            for name, save in ways.items():
                each = [seconds(result, save, folder) for result in results]
                totals[name].append(sum(each))
                cells = ", ".join(f"{s:.2f}" for s in each)
                print(f"round {round_ + 1}, {name}: {sum(each):.2f} s for the five figures ({cells})", flush=True)
    print("| way | the five figures, s (each round) | mean |")
    print("| --- | --- | ---: |")
    for name, values in totals.items():
        print(f"| {name} | {' / '.join(f'{v:.2f}' for v in values)} | {sum(values) / len(values):.2f} |")
    base, ours = (sum(v) / len(v) for v in totals.values())
    print(f"save_figure: {base / ours:.2f}x faster; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
