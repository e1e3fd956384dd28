"""`python -m derivations [--out DIR]`: regenerate the generated files (default: this checkout).

Installed without a checkout (as `flowsim.derivations`), `--out` is required.
"""

import argparse
from pathlib import Path

from .build import generate

_PARENT = Path(__file__).resolve().parent.parent
#: The repository checkout holding this folder, or None where it is installed without one.
REPOSITORY_ROOT = _PARENT if (_PARENT / "pyproject.toml").is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=REPOSITORY_ROOT,
        required=REPOSITORY_ROOT is None,
        help="directory standing for the repository root"
        + (" (default: %(default)s)" if REPOSITORY_ROOT is not None else ""),
    )
    args = parser.parse_args()
    for path in generate(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
