"""`python -m derivations [--out DIR]`: regenerate the generated files (default: this repository)."""

import argparse
from pathlib import Path

from derivations.build import generate

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m derivations", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=REPOSITORY_ROOT,
        help="directory standing for the repository root (default: %(default)s)",
    )
    args = parser.parse_args()
    for path in generate(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
