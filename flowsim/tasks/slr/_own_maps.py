"""A researcher's own attention map named on the command line: `FILE.py:NAME` or `MODULE:NAME`.

The spec's form (and the file's existence) is checked while the arguments are parsed; the map is loaded when the
run needs it: loading builds the `AttentionMap`, whose check computes with JAX, which must not start before the
processes of a cluster run have joined (docs/devices.md).
"""

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from flowsim._checks import InvalidInput
from flowsim.tasks.slr._attention import ATTENTION_MAPS, AttentionMap

__all__ = ["OWN_MAP", "check_spec", "own_map", "source_files"]

#: How the command line names a researcher's own map (docs/own-attention-map.md), besides the built-in names.
OWN_MAP = "FILE.py:NAME or MODULE:NAME"


def check_spec(spec: str) -> tuple[str, str]:
    """The (source, name) of `spec`, a built-in map's name or `OWN_MAP`; the file checked to exist.

    **Raises:** `InvalidInput` saying what is wrong.
    """
    source, _, name = spec.rpartition(":")  # the last colon: C:\\maps.py:capped on Windows
    if not source or not name.isidentifier():
        raise InvalidInput(f"{spec!r} is not a built-in map ({', '.join(ATTENTION_MAPS)}) nor {OWN_MAP}")
    if _is_file(source):
        if not Path(source).is_file():
            raise InvalidInput(f"{spec}: there is no file {source}")
    elif not _importable(source):
        raise InvalidInput(f"{spec}: there is no module {source} (to import: installed, or on PYTHONPATH)")
    return source, name


def _importable(module: str) -> bool:
    """Whether `module` can be found, without running it (a dotted name's parent packages are imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def source_files(specs) -> dict[str, Path | None]:
    """The files the researcher's maps among `specs` are read from, by their source as given (`FILE.py`, or
    `MODULE`: the module's own file, None for a namespace package): what decides the maps besides their names."""
    files = {}
    for spec in specs:
        if spec not in ATTENTION_MAPS:
            source, _ = check_spec(spec)
            files[source] = Path(source) if _is_file(source) else _origin(source)
    return files


def _origin(module: str) -> Path | None:
    found = importlib.util.find_spec(module)
    return Path(found.origin) if found is not None and found.has_location else None


def own_map(spec: str) -> AttentionMap:
    """The `AttentionMap` `spec` names: `NAME` in the Python file `FILE.py` (run once per process, however many of its
    maps are named), or in the module `MODULE` (importable: installed, or on PYTHONPATH).

    **Raises:** `InvalidInput` naming what is missing or wrong, with what the file raised, if it did.
    """
    source, name = check_spec(spec)
    try:
        module = _file_module(Path(source).resolve()) if _is_file(source) else importlib.import_module(source)
    except (Exception, SystemExit) as error:  # the researcher's code: say what it raised, as for a map's checks
        raise InvalidInput(f"{spec}: loading {source} raised {type(error).__name__}: {error}") from error
    found = getattr(module, name, None)
    if isinstance(found, AttentionMap):
        return found
    if found is None:
        got = "nothing (no such name there)"
    elif isinstance(found, type):
        got = f"the class {found.__name__}"
    else:
        got = f"an object of type {type(found).__name__}"
    raise InvalidInput(f"{spec}: {name} in {source} must be a flowsim.slr.AttentionMap, got {got}")


def _is_file(source: str) -> bool:
    return Path(source).suffix.lower() == ".py"


_LOADED: dict[Path, object] = {}


def _file_module(path: Path):
    """The module of the file at `path` (resolved), run once per process; named after its path, so that two files of
    the same name in different folders stay two modules."""
    if path not in _LOADED:
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
        stem = "".join(c if c.isalnum() else "_" for c in path.stem)
        loader = importlib.util.spec_from_file_location(f"_flowsim_own_map_{stem}_{digest}", path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[loader.name] = module  # as an import would: dataclasses and equinox look their module up
        try:
            loader.loader.exec_module(module)
        except BaseException:
            del sys.modules[loader.name]
            raise
        _LOADED[path] = module
    return _LOADED[path]
