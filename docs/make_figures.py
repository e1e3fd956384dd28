"""Regenerate the README's figures (docs/figures/*.png) with the command line, at the paper's defaults.

Usage: python docs/make_figures.py   (about a minute on 2 CPU cores)
"""

import shutil
import sys
import tempfile
from pathlib import Path

from flowsim.cli import main

FIGURES = Path(__file__).resolve().parent / "figures"
#: figure name in docs/figures: (command line, the PNG it writes, relative to --out).
RUNS = {
    "phase_portrait": ("portrait", "phase_portrait.png"),
    "sgd_sphere_schedule": ("reproduce --only sgd_sphere_schedule", "sgd_sphere_schedule.png"),
    "compare": ("compare --seeds 8", "compare.png"),
}


def make_figures() -> None:
    FIGURES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, (command, png) in RUNS.items():
            out = Path(scratch) / name
            status = main([*command.split(), "--out", str(out), "--no-progress"])
            if status != 0:
                sys.exit(f"flowsim {command} exited with status {status}")
            shutil.copyfile(out / png, FIGURES / f"{name}.png")
            print(f"wrote {FIGURES / name}.png")


if __name__ == "__main__":
    make_figures()
