"""Regenerate the README's figures (docs/figures/*.png) with the command line, at the paper's defaults, and the figures
of measurements too long to repeat here from their stored runs (docs/data).

Usage: python docs/make_figures.py [NAME ...]   (all of them: about five minutes on 2 CPU cores, optima four)

NAME: a figure's name in docs/figures (phase_portrait, sgd_sphere_schedule, compare, optima, heads_diagram,
sparse_transformer): only those are drawn again.
"""

import shutil
import sys
import tempfile
from pathlib import Path

from flowsim.cli import main
from flowsim.tasks import sparse

FIGURES = Path(__file__).resolve().parent / "figures"
#: figure name in docs/figures: (command line, the PNG it writes, relative to --out).
RUNS = {
    "phase_portrait": ("portrait", "phase_portrait.png"),
    "sgd_sphere_schedule": ("reproduce --only sgd_sphere_schedule", "sgd_sphere_schedule.png"),
    "compare": ("compare --seeds 8", "compare.png"),
    "optima": ("optima", "optima.png"),
    "heads_diagram": ("heads diagram", "diagram.png"),
}
DATA = Path(__file__).resolve().parent / "data"
#: figure name in docs/figures: the folders in docs/data holding the `flowsim sparse sweep` runs it is drawn from.
SWEEPS = {"sparse_transformer": ("sparse-transformer-h200", "sparse-transformer-h200-budgets")}


def make_figures(names: list[str] | None = None) -> None:
    """Draw the figures `names` (all of them if None) into docs/figures."""
    unknown = sorted(set(names or ()) - RUNS.keys() - SWEEPS.keys())
    if unknown:
        sys.exit(f"no figure named {', '.join(unknown)}: choose from {', '.join([*RUNS, *SWEEPS])}")
    FIGURES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, (command, png) in RUNS.items():
            if names and name not in names:
                continue
            out = Path(scratch) / name
            status = main([*command.split(), "--out", str(out), "--no-progress"])
            if status != 0:
                sys.exit(f"flowsim {command} exited with status {status}")
            shutil.copyfile(out / png, FIGURES / f"{name}.png")
            print(f"wrote {FIGURES / name}.png")
    for name, folders in SWEEPS.items():
        if names and name not in names:
            continue
        runs = sorted(path for folder in folders for path in (DATA / folder).iterdir() if path.is_dir())
        sparse.sweep_figure(sparse.read_sweep(*runs)).savefig(FIGURES / f"{name}.png", dpi=110)
        print(f"wrote {FIGURES / name}.png")


if __name__ == "__main__":
    make_figures(sys.argv[1:])
