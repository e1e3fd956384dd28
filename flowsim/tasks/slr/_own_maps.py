"""A researcher's own attention map named on the command line: `FILE.py:NAME` or `MODULE:NAME`.

The spec's form (and the file's existence) is checked while the arguments are parsed; the map is loaded when the
run needs it: loading builds the `AttentionMap`, whose check computes with JAX, which must not start before the
processes of a cluster run have joined (docs/devices.md).
"""

import contextlib
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from flowsim._checks import InvalidInput
from flowsim.tasks.slr._attention import ATTENTION_MAPS, AttentionMap

__all__ = ["OWN_MAP", "check_spec", "loaded_digest", "own_map"]

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


def own_map(spec: str) -> AttentionMap:
    """The `AttentionMap` `spec` names: `NAME` in the Python file `FILE.py` (run once per process and contents,
    however many of its maps are named), or in the module `MODULE` (importable: installed, or on PYTHONPATH).

    **Raises:** `InvalidInput` naming what is missing or wrong, with what the file raised, if it did.
    """
    source, name = check_spec(spec)
    try:
        module = _file_module(Path(source)) if _is_file(source) else _imported(source)
    except InvalidInput:
        raise
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


def loaded_digest(spec: str) -> str | None:
    """The SHA-256 of the source `own_map(spec)`, called before, ran in this process (the file's bytes it executed; a
    module's file as this process first imported it through flowsim), or None for a module without a file (a
    namespace package)."""
    source, _ = check_spec(spec)
    return _LATEST[Path(source).resolve()] if _is_file(source) else _MODULE_DIGESTS[source]


def _is_file(source: str) -> bool:
    return Path(source).suffix.lower() == ".py"


#: The modules of the files run, by (resolved path, SHA-256 of the bytes run). A file edited between two runs in one
#: process (a notebook calling `flowsim.cli.main`) runs anew.
_LOADED: dict[tuple[Path, str], object] = {}
#: The SHA-256 of each file's latest contents run, by resolved path.
_LATEST: dict[Path, str] = {}
#: A module's file's SHA-256 when flowsim first imported it, by module name (Python keeps the module it imported).
_MODULE_DIGESTS: dict[str, str | None] = {}


def _file_module(path: Path):
    """The module of the file at `path`, its bytes read once, hashed and run: once per process and contents; named
    after its path and digest, so that two files of the same name, or two versions of a file, stay two modules."""
    path = path.resolve()
    try:
        code = path.read_bytes()
    except OSError as error:
        raise InvalidInput(f"cannot read {path}: {error.strerror or error}") from None
    digest = hashlib.sha256(code).hexdigest()
    key = (path, digest)
    if key not in _LOADED:
        stem = "".join(c if c.isalnum() else "_" for c in path.stem)
        name = f"_flowsim_own_map_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}_{digest[:10]}"
        loader = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module  # as an import would: dataclasses and equinox look their module up
        try:
            exec(compile(code, str(path), "exec"), module.__dict__)  # the bytes hashed, not a second read
        except BaseException:
            del sys.modules[name]
            raise
        _LOADED[key] = module
    _LATEST[path] = digest
    return _LOADED[key]


def _imported(module_name: str):
    """The module `module_name`, imported; its file's SHA-256 kept as first seen (`_MODULE_DIGESTS`)."""
    module = importlib.import_module(module_name)
    if module_name not in _MODULE_DIGESTS:
        found = getattr(module, "__spec__", None)
        data = getattr(getattr(found, "loader", None), "get_data", None)  # also for a module in a zip file
        _MODULE_DIGESTS[module_name] = None
        if found is not None and found.has_location and found.origin and data is not None:
            with contextlib.suppress(OSError):
                _MODULE_DIGESTS[module_name] = hashlib.sha256(data(found.origin)).hexdigest()
    return module
