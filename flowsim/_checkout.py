"""Find `flowsim.derivations` when flowsim is imported from a checkout rather than an install.

`flowsim.derivations` is the repository's top-level derivations/ folder: an install maps it under
flowsim (the `package-dir` table of pyproject.toml). But `python -m pytest` or `python -m flowsim.cli`
run in a checkout put the checkout first on sys.path, so `import flowsim` finds the checkout's
flowsim/, which has no derivations/ inside it. For that case only, a finder placed last on
`sys.meta_path` (after every regular finder has failed) resolves that one name to the folder beside
flowsim/. Nothing is imported here: SymPy loads only when `flowsim.derivations` is imported.
"""

import importlib.util
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_FOLDER = _PACKAGE.parent / "derivations"
_NAME = "flowsim.derivations"


class CheckoutDerivations:
    """A meta path finder for the one name `flowsim.derivations`, in the checkout's derivations/."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        """The module spec of derivations/ for `flowsim.derivations`, None for every other name."""
        if name != _NAME:
            return None
        return importlib.util.spec_from_file_location(
            name, _FOLDER / "__init__.py", submodule_search_locations=[str(_FOLDER)]
        )


def install() -> None:
    """Add the finder, once, where flowsim is a checkout's folder with derivations/ beside it."""
    in_checkout = not (_PACKAGE / "derivations").is_dir() and (_FOLDER / "__init__.py").is_file()
    if in_checkout and CheckoutDerivations not in sys.meta_path:
        sys.meta_path.append(CheckoutDerivations)
