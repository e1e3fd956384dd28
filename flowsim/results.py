"""A run's results on disk: atomic files, tidy CSV tables, figures and the run record `run.json`.

Task-agnostic: it writes what it is given. Every file is first written to a temporary file in
its own folder, then moved into place with `os.replace` (atomic on POSIX and Windows), so an
interrupted run leaves each file either as it was or complete, never half written. Floats in CSV
tables are written with `repr`, the shortest text that reads back to the same float64: a run
repeated with the same arguments and seed writes the same numbers, byte for byte.
"""

import contextlib
import csv
import datetime
import functools
import hashlib
import io
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flowsim._checks import InvalidInput
from flowsim._interrupt import raise_if_ctrl_c
from flowsim._runfolder import SCHEMA, UNIT_CHARACTERS, UNITS, delete_run, digest, earlier_run, unchanged
from flowsim._stored import load_unit, unit_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "COMPUTING",
    "PACKAGES",
    "UNIT_CHARACTERS",
    "NotWritten",
    "RunRecord",
    "csv_text",
    "earlier_run",
    "environment",
    "flowsim_source",
    "log_to_stderr",
    "long_table",
    "prepare_folder",
    "save_figure",
    "unit_name",
    "versions",
    "write_bytes",
    "write_csv",
    "write_text",
]

#: The parameters a resumed run may change: where and how it reports, not what it computes.
NOT_COMPARED = ("out", "progress", "replace", "resume", "yes")

#: Packages whose versions a run record names.
PACKAGES = (
    "flowsim", "jax", "jaxlib", "diffrax", "equinox", "optimistix", "lineax", "optax",
    "sympy", "numpy", "scipy", "matplotlib",
)  # fmt: skip

#: The packages whose versions decide a run's numbers: a resumed run must find the ones its units were computed with
#: (flowsim itself by its source, `flowsim_source`: its version does not change with every edit; sympy derives the
#: equations, which flowsim's source holds; matplotlib only draws, and figures are drawn anew).
COMPUTING = ("jax", "jaxlib", "diffrax", "equinox", "optimistix", "lineax", "optax", "numpy", "scipy")

# Read once: os.umask can only be read by setting it. mkstemp creates files readable by their
# owner only; results get the permissions an ordinary open() would give them.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def describe_run(record: dict) -> str:
    """An earlier run in a few words: its command, start and status ("running" said as killed where its
    process is gone)."""
    status = record.get("status")
    if status == "running":
        alive = record.get("host") == platform.node() and _process_exists(record.get("pid"))
        status = "running" if alive else "not finished: killed or crashed while running"
    return f"{record.get('command')}, started {record.get('started')}, status {status!r}"


def _process_exists(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    if os.name == "nt":  # there os.kill(pid, 0) would end the process
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.OpenProcess.restype = ctypes.c_void_p  # a HANDLE: pointer-sized, not ctypes' default int
        kernel32.OpenProcess.argtypes = (ctypes.c_ulong, ctypes.c_int, ctypes.c_ulong)
        kernel32.GetExitCodeProcess.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulong))
        kernel32.CloseHandle.argtypes = (ctypes.c_void_p,)
        return _windows_process_exists(pid, kernel32, ctypes)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _windows_process_exists(pid: int, kernel32, ctypes) -> bool:
    """Whether process `pid` runs, asked of Windows' kernel32 (given, with the ctypes module, for the tests)."""
    query_limited_information, access_denied, still_active = 0x1000, 5, 259
    handle = kernel32.OpenProcess(query_limited_information, False, pid)
    if not handle:
        return ctypes.get_last_error() == access_denied  # another user's process
    try:
        code = ctypes.c_ulong()
        return not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)) or code.value == still_active
    finally:
        kernel32.CloseHandle(handle)


def prepare_folder(path, *, replace: bool = False, resume: bool = False) -> Path:
    """Make `path` a folder that can be written, before any computation: new, empty, or an earlier run's.

    A folder never mixes two runs: an existing folder must be empty, or hold an earlier flowsim run
    (its run.json, marked as flowsim's) and either `replace` be given, which deletes exactly the files
    that run recorded, or `resume`, which keeps them (`RunRecord` checks that the run is the same). Nothing
    flowsim did not write is ever deleted: `replace` refuses a folder that holds anything else, a record that
    names a file outside the folder, and a file changed since flowsim wrote it (its SHA-256 in run.json), before
    deleting anything (`flowsim._runfolder.delete_run`). Checked before computing, so that a run never computes
    for minutes to fail on writing.

    **Arguments:**

    - `path`: the folder (created with its parents if needed).
    - `replace`: delete the earlier flowsim run found there.
    - `resume`: keep the earlier flowsim run found there, to be continued (not with `replace`).

    **Returns:** the folder as a `Path`.

    **Raises:** `InvalidInput` saying which folder cannot be used, why, and what to do instead.
    """
    folder = Path(path)
    with _usable(folder):
        return _prepare_folder(folder, replace, resume)


@contextlib.contextmanager
def _usable(folder: Path):
    """The file system's refusal to look into or make `folder` (a name too long, a parent that cannot be searched,
    a read-only file system) as InvalidInput naming the folder, before any computation."""
    try:
        yield
    except OSError as error:
        reason = error.strerror or str(error)
        raise InvalidInput(
            f"cannot write results into {folder}: {reason} (results need a folder that can be written)"
        ) from None


def _prepare_folder(folder: Path, replace: bool, resume: bool) -> Path:
    if replace and resume:
        raise InvalidInput(
            "--resume and --replace (resume=True, replace=True) contradict each other: --resume continues the earlier "
            "run in the folder, --replace deletes it first; give one of them"
        )
    if folder.exists() and not folder.is_dir():
        raise InvalidInput(f"cannot write results into {folder}: it is a file (results need a folder)")
    entries = sorted(folder.iterdir()) if folder.is_dir() else []
    if entries:
        earlier = earlier_run(folder)
        if earlier is None:
            shown = ", ".join(entry.name for entry in entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise InvalidInput(
                f"cannot write results into {folder}: it is not empty ({shown}) and holds no earlier flowsim run "
                "(no run.json written by flowsim); give a new or empty folder (flowsim deletes only its own results)"
            )
        if not (replace or resume):
            raise InvalidInput(
                f"{folder} holds an earlier run ({describe_run(earlier)}): give another folder, --resume to "
                "continue it, or --replace (replace=True) to delete it first (a folder never mixes two runs)"
            )
        if replace:
            delete_run(folder, earlier)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):
        pass
    return folder


class NotWritten(OSError):
    """A results file the file system refused (a full disk, a quota, permissions): an OSError naming the file."""


def write_bytes(path, data: bytes) -> Path:
    """Write a file atomically: a temporary file in the same folder, then `os.replace`.

    **Arguments:**

    - `path`: the file; its folder must exist.
    - `data`: the contents.

    **Returns:** the path written.

    **Raises:** `NotWritten`, an OSError naming `path` (its `filename`), where the file system refuses (a full disk,
    a quota).
    """
    path = Path(path)
    temporary = None
    try:
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~_UMASK)
        os.replace(temporary, path)
    except BaseException as error:
        if temporary is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        if isinstance(error, OSError) and error.errno is not None:
            # A write into an open file names none: the file it was for is what a reader needs.
            raise NotWritten(error.errno, error.strerror, str(path)) from error
        raise
    return path


def write_text(path, text: str) -> Path:
    """Write a text file (UTF-8) atomically; see `write_bytes`."""
    return write_bytes(path, text.encode("utf-8"))


def unit_name(text: str) -> str:
    """`text` as a stored unit's name (`RunRecord.unit`): each character outside `UNIT_CHARACTERS` made "_", leading
    dots dropped (a hidden file); empty if nothing is left."""
    return "".join(c if c in UNIT_CHARACTERS else "_" for c in text).lstrip(".")


def long_table(axes: Sequence[Mapping[str, Sequence]], values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Flatten arrays over a grid into a tidy table: one row per grid point, one column per quantity.

    **Arguments:**

    - `axes`: one mapping per axis of the grid, from column names to 1-D arrays of that axis'
      length (e.g. `[{"seed": seeds}, {"step": steps, "t": times}]`); rows run over the last
      axis fastest.
    - `values`: arrays that broadcast to the grid's shape (e.g. (seeds, logs) or (logs,)).

    **Returns:** {column name: 1-D array}, the axes' columns first.
    """
    columns = [{name: np.asarray(column) for name, column in axis.items()} for axis in axes]
    shape = tuple(len(next(iter(axis.values()))) for axis in columns)
    for axis, length in zip(columns, shape, strict=True):
        for name, column in axis.items():
            if column.shape != (length,):
                raise InvalidInput(f"column {name!r} has shape {column.shape}, its axis has length {length}")
    table = {}
    for i, axis in enumerate(columns):
        along = [1] * len(shape)
        along[i] = shape[i]
        for name, column in axis.items():
            table[name] = np.broadcast_to(column.reshape(along), shape).ravel()
    for name, value in values.items():
        table[name] = np.broadcast_to(np.asarray(value), shape).ravel()
    return table


def _cell(item) -> str:
    """One CSV cell: a float by repr (it reads back exactly), a boolean as true/false, the rest by str."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, float):
        return repr(item)
    return str(item)


def csv_text(table: Mapping[str, Sequence], *, header: bool = True) -> str:
    """A table as CSV text: a line of column names (if `header`), then one line per row.

    A long table written again as it grows can keep the text of its earlier rows (`header=False`) instead of
    formatting them anew: the text of a table is its header followed by the rows' texts of its parts.

    **Arguments:**

    - `table`: {column name: 1-D sequence}, all of one length (e.g. from `long_table`).
    - `header`: whether the text begins with the column names.

    **Returns:** the text; floats by repr (they read back exactly), booleans as true/false.
    """
    cells = {name: [_cell(item) for item in np.asarray(column).tolist()] for name, column in table.items()}
    lengths = {len(column) for column in cells.values()}
    if len(lengths) > 1:
        raise InvalidInput(f"the columns of a table must have one length, got {sorted(lengths)}")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(cells)
    writer.writerows(zip(*cells.values(), strict=True))
    return buffer.getvalue()


def write_csv(path, table: Mapping[str, Sequence]) -> Path:
    """Write a table as CSV atomically (`csv_text`: a header of column names, then one line per row).

    **Arguments:**

    - `path`: the file.
    - `table`: {column name: 1-D sequence}, all of one length (e.g. from `long_table`).

    **Returns:** the path written.
    """
    return write_text(path, csv_text(table))


def save_figure(fig: "Figure", path_stem) -> list[Path]:
    """Write a figure as PNG (150 dpi) and PDF side by side, each atomically, creating the folder.

    The PDF carries no creation date, so that the same figure gives the same file. Its layout is the one the PNG's
    drawing computed (a figure's layout engine, e.g. constrained layout, runs for the first file only, then again
    when the figure is next drawn), so both files show the same arrangement.

    **Arguments:**

    - `fig`: the figure.
    - `path_stem`: the path without suffix (a ".png" or ".pdf" suffix is dropped).

    **Returns:** the paths written, PNG first.
    """
    stem = Path(path_stem)
    if stem.suffix.lower() in (".png", ".pdf"):
        stem = stem.with_suffix("")
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    engine = fig.get_layout_engine()
    try:
        for suffix, metadata_ in (("png", None), ("pdf", {"CreationDate": None})):
            buffer = io.BytesIO()
            fig.savefig(buffer, format=suffix, dpi=150, bbox_inches="tight", metadata=metadata_)
            paths.append(write_bytes(stem.parent / f"{stem.name}.{suffix}", buffer.getvalue()))
            # The layout is placed now: laying it out again for the PDF (a quarter of a figure's saving, mostly text
            # measured anew) would move nothing visible.
            fig.set_layout_engine("none")
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)
    return paths


def environment(packages: Sequence[str] = PACKAGES) -> dict:
    """Where a run ran: Python, the platform, the CPU count, package versions and JAX's devices.

    **Arguments:**

    - `packages`: distribution names whose versions to record (None where not installed).

    **Returns:** a JSON-serialisable dict; `jax_devices` only if JAX was imported.
    """
    found = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "packages": versions(packages),
        "flowsim_source": flowsim_source(),
    }
    if "jax" in sys.modules:
        found["jax_devices"] = [str(device) for device in sys.modules["jax"].devices()]
    return found


def versions(packages: Sequence[str]) -> dict[str, str | None]:
    """The installed version of each distribution named, None where it is not installed."""
    found = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


@functools.cache
def flowsim_source() -> str:
    """The SHA-256 of flowsim's own source: every module of the package (its path within it and its bytes), in order.

    Read once per process (about a hundred files). It changes with any edit, so that a run resumed by other code
    than the one that began it is refused (`RunRecord`). The derivations are left out: an install holds them in the
    package and a checkout beside it, and what they derive is in the package (`_generated*.py`).
    """
    package = Path(__file__).resolve().parent
    source = hashlib.sha256()
    # In the order of their paths as POSIX text, and their line ends as "\n", on every system: a checkout on Windows
    # may hold "\r\n" where the installed wheel holds "\n".
    modules = {path.relative_to(package).as_posix(): path for path in package.rglob("*.py")}
    for name in sorted(modules):
        if name.split("/")[0] != "derivations":
            text = modules[name].read_bytes().replace(b"\r\n", b"\n")
            source.update(name.encode() + b"\0" + text + b"\0")
    return source.hexdigest()


def _loads(path: Path) -> bool:
    """Whether the unit stored at `path` reads back."""
    try:
        load_unit(path)
    except Exception:  # a damaged file fails in many ways (zip, JSON, a class that is not flowsim's)
        return False
    return True


def _jsonable(value):
    """Plain JSON: NumPy scalars and arrays as Python numbers and lists, non-finite floats as null."""
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_jsonable(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def log_to_stderr(line: str) -> None:
    """Print a line to stderr at once (the default log of `RunRecord`)."""
    print(line, file=sys.stderr, flush=True)


def _digest_change(recorded: Mapping, key: str, digest: str | None, unrecorded: str, changed: str) -> str | None:
    """Why an earlier run's `recorded[key]` does not vouch for this run's `digest` (a SHA-256, or None), or None
    where it does; `unrecorded` and `changed` name what the digest is of, in the two messages."""
    if key not in recorded:
        return f"that run did not record {unrecorded} (an earlier flowsim), so it may have changed"
    if recorded[key] != digest:
        was, now = (str(value)[:12] for value in (recorded[key], digest))
        return f"{changed} has changed since (SHA-256 {was}... then, {now}... now)"
    return None


class RunRecord:
    """A run's output folder and its record, `run.json` there, kept current as the run goes.

    The record holds the command, every parameter, the seed, the environment (`environment`),
    the start time (ISO 8601, UTC), the duration of the run and of each phase, the files
    written through it (paths relative to the folder), the status, each failure's details and a
    free-form summary. run.json is written when the record is made (status "running") and again
    after every file and phase, so that a run killed at any point leaves a record of what it
    finished; `finish` writes the final status: "ok", "numerical failure" (results kept),
    "interrupted" or "error".

    **Arguments:**

    - `folder`: the output folder (see `prepare_folder`: new, empty, or an earlier run to replace).
    - `command`: the command's name.
    - `parameters`: every parameter of the run (JSON-serialisable values).
    - `seed`: the PRNG seed, if any.
    - `log`: called with a line when a phase starts and ends (default: print to stderr; None: silent).
    - `replace`: delete an earlier flowsim run in `folder` first (exactly the files it recorded).
    - `resume`: continue the earlier run in `folder`: the same command with the same parameters
      (`NOT_COMPARED` aside), seed and `inputs`, run by the same software (`flowsim_source` and the `COMPUTING`
      versions), else `InvalidInput` naming what differs. Its finished units (`unit`) that are still what flowsim
      wrote (their SHA-256 in run.json) are read back instead of computed again, the others computed again
      (`damaged`); its other files stay listed until written anew.
    - `inputs`: what the run read beyond its parameters that decides its results (e.g. a researcher's
      own attention map), as the SHA-256 of its contents (None where there is no file)
      by the name the parameters give it: run.json keeps them, so that a run resumed after an edit is
      refused.
    """

    def __init__(
        self,
        folder,
        command: str,
        parameters: Mapping,
        *,
        seed: int | None = None,
        log: Callable[[str], None] | None = log_to_stderr,
        replace: bool = False,
        resume: bool = False,
        inputs: Mapping[str, str | None] | None = None,
    ):
        # The outermost folder this run creates (None if `folder` exists): what `discard` may remove.
        with _usable(Path(folder)):
            missing = [path for path in (Path(folder), *Path(folder).parents) if not path.exists()]
        self.created = missing[-1] if missing else None
        self.command = command
        self.parameters = dict(parameters)
        self.seed = seed
        self.inputs = dict(inputs or {})
        self.folder = prepare_folder(folder, replace=replace, resume=resume)  # with `resume`, deletes nothing
        earlier = earlier_run(self.folder) if resume else None
        if earlier is not None:
            self._check_same_run(self.folder, earlier)
        self.started = datetime.datetime.now(datetime.UTC)
        self.files: list[str] = []
        self.digests: dict[str, str] = {}  # the SHA-256 of each file as written: what `replace` may delete
        self.units: list[str] = []
        self.damaged: list[str] = []  # a resumed run's units that are no longer what flowsim wrote: computed again
        if earlier is not None:
            self._keep(earlier)
        self.resumed = len(self.units) if earlier is not None else None
        self.phases: dict[str, float] = {}
        self.failures: list[dict] = []
        self.summary: dict = {}
        self.reason: str | None = None  # why the run did not end (interrupted, error)
        self.closed = False
        self._log = log
        self._clock = time.perf_counter()
        self._environment = environment()
        self._write_record("running")

    def _keep(self, earlier: dict) -> None:
        """Take over the files of the earlier run being resumed that are still what flowsim wrote (so that the record
        lists every file of the folder that flowsim wrote, whenever this run stops), and its finished units that
        are; a unit changed since (damaged, or another's file) is left to be computed again, and said so."""
        units = {f"{UNITS}/{name}.npz": name for name in earlier["units"]}
        for name in earlier["files"]:
            sound = unchanged(self.folder, earlier, name)
            if sound is None and name in units:  # a unit of an earlier flowsim, which recorded no digests
                sound = _loads(self.folder / name)
            if sound is None and (self.folder / name).is_file():
                self.files.append(name)  # kept, but not vouched for: `replace` will refuse it
            elif sound:
                self.files.append(name)
                self.digests[name] = digest(self.folder / name)
                if name in units:
                    self.units.append(units[name])
            elif name in units and (self.folder / name).exists():
                self.damaged.append(name)

    def _check_same_run(self, folder: Path, earlier: dict) -> None:
        """`InvalidInput` unless the earlier run in `folder` is this run: same command, parameters, seed and inputs."""
        if earlier.get("status") == "running" and "not finished" not in describe_run(earlier):
            raise InvalidInput(f"cannot resume the run in {folder}: it is still running ({describe_run(earlier)})")
        then = {"command": earlier.get("command"), "seed": earlier.get("seed"), **earlier.get("parameters", {})}
        now = _jsonable({"command": self.command, "seed": self.seed, **self.parameters})
        differ = [
            f"{name}: {then.get(name)!r} then, {now.get(name)!r} now"
            for name in sorted(then.keys() | now.keys())
            if name not in NOT_COMPARED and then.get(name) != now.get(name)
        ]
        if differ:
            raise InvalidInput(
                f"cannot resume the run in {folder} with other arguments ({'; '.join(differ)}): give the same "
                "arguments, or another folder"
            )
        self._check_same_software(folder, earlier.get("environment", {}))
        recorded = earlier.get("inputs", {})
        for name, contents in self.inputs.items():
            why = _digest_change(recorded, name, contents, f"the contents of {name}", name)
            if why is not None:
                raise InvalidInput(
                    f"cannot resume the run in {folder}: {why}: resume with the file as that run read it, or give "
                    "another folder"
                )

    @staticmethod
    def _check_same_software(folder: Path, then: dict) -> None:
        """`InvalidInput` unless this process runs the flowsim source and the `COMPUTING` versions of run.json's
        `environment` (`then`): units computed by other code would be mixed with this code's."""
        why = _digest_change(then, "flowsim_source", flowsim_source(), "flowsim's source", "flowsim's source")
        if why is None:
            packages = then.get("packages", {})
            changed = [
                f"{name} {packages.get(name)} then, {version} now"
                for name, version in versions(COMPUTING).items()
                if packages.get(name) != version
            ]
            if not changed:
                return
            why = f"the packages that compute it have changed ({'; '.join(changed)})"
        raise InvalidInput(
            f"cannot resume the run in {folder}: {why}: resume with the software that began it, or give another folder"
        )

    def unit(self, name: str, compute: Callable[[], Any]) -> Any:
        """A finished unit of the run's work: read back if a resumed run finished it, else computed and stored.

        Each unit is stored as it finishes (`units/NAME.npz`, listed in run.json), so that Ctrl-C, a crash
        or a killed process keeps it, and a run resumed with the same arguments reads it back bit for bit
        instead of computing it again. Its result must be a tree of arrays, numbers and strings in tuples,
        dicts, NamedTuples, dataclasses or equinox Modules of flowsim's (`flowsim._stored`).

        **Arguments:**

        - `name`: the unit's name, unique in the run (`UNIT_CHARACTERS`: ASCII letters, digits, "-", "_", "=", "."; not
          starting with "."; `unit_name` makes one of any text).
        - `compute`: computes the unit's result.

        **Returns:** the result.
        """
        if not name or not UNIT_CHARACTERS.issuperset(name) or name.startswith("."):
            raise InvalidInput(f"a unit's name must be ASCII letters, digits, '-', '_', '=' or '.', got {name!r}")
        raise_if_ctrl_c()  # a Ctrl-C dropped during the last unit stops the run here, between two units
        path = self.folder / UNITS / f"{name}.npz"
        if name in self.units:
            return load_unit(path)
        value = compute()
        path.parent.mkdir(exist_ok=True)
        self._written([write_bytes(path, unit_bytes(value))])
        self.units.append(name)
        self._write_record("running")
        return value

    @contextlib.contextmanager
    def phase(self, name: str, description: str = "") -> Iterator[None]:
        """Time a phase of the run under `name`, logging when it starts and how long it took."""
        self.log(f"{name}: {description or 'started'}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start
            self.log(f"{name}: {time.perf_counter() - start:.1f} s")
        self._write_record("running")

    def log(self, line: str) -> None:
        """Log a line, prefixed with the seconds since the run started."""
        if self._log is not None:
            self._log(f"[{self.elapsed:7.1f} s] {line}")

    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self._clock

    @property
    def status(self) -> str:
        """ "ok", or "numerical failure" once a failure was recorded."""
        return "numerical failure" if self.failures else "ok"

    def path(self, name: str) -> Path:
        """The path of a result file `name` (relative, may name subfolders, created here)."""
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _written(self, paths: list[Path]) -> None:
        for path in paths:
            name = path.relative_to(self.folder).as_posix()
            if name not in self.files:
                self.files.append(name)
            self.digests[name] = digest(path)
        self._write_record("running")

    def write_text(self, name: str, text: str) -> Path:
        """Write a text file into the folder (atomically) and record it."""
        path = write_text(self.path(name), text)
        self._written([path])
        return path

    def write_csv(self, name: str, table: Mapping[str, Sequence]) -> Path:
        """Write a table (see `write_csv`) into the folder and record it."""
        path = write_csv(self.path(name), table)
        self._written([path])
        return path

    def save_figure(self, fig: "Figure", stem: str) -> list[Path]:
        """Write a figure as `stem`.png and `stem`.pdf (see `save_figure`) and record both."""
        paths = save_figure(fig, self.path(stem))
        self._written(paths)
        return paths

    def fail(self, message: str, **where) -> None:
        """Record a numerical failure: a one-line `message` and where it happened (e.g. seed, step, time)."""
        self.failures.append({"message": message, **where})

    def finish(self, status: str | None = None, reason: str | None = None) -> Path:
        """Write the final `run.json` (atomically) with everything recorded so far.

        **Arguments:**

        - `status`: "interrupted" or "error" for a run that did not end; default `status` ("ok" or
          "numerical failure").
        - `reason`: why it did not end (e.g. the error's message).

        **Returns:** its path.
        """
        self.reason, self.closed = reason, True
        return self._write_record(status or self.status)

    def discard(self) -> None:
        """Remove run.json, and the folders this run created if it left them empty: for a run refused
        (invalid input found once the folder was made) before it wrote any file."""
        if self.files:
            raise InvalidInput(f"the run wrote {len(self.files)} files into {self.folder}: finish it instead")
        (self.folder / "run.json").unlink(missing_ok=True)
        if self.created is not None:
            # The folders this run made, innermost first, as long as they are empty.
            for path in (self.folder, *self.folder.parents):
                if any(path.iterdir()):
                    break
                path.rmdir()
                if path == self.created:
                    break
        self.closed = True

    def _write_record(self, status: str) -> Path:
        record = {
            "schema": SCHEMA,
            "command": self.command,
            "status": status,
            **({"reason": self.reason} if self.reason else {}),
            "failures": self.failures,
            "summary": self.summary,
            "parameters": self.parameters,
            **({"inputs": self.inputs} if self.inputs else {}),
            "seed": self.seed,
            "started": self.started.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "durations_s": {"total": self.elapsed, "phases": self.phases},
            "files": self.files,
            "digests": self.digests,
            "units": self.units,
            **({} if self.resumed is None else {"resumed_units": self.resumed}),
            "pid": os.getpid(),
            "host": platform.node(),
            "environment": self._environment,
        }
        text = json.dumps(_jsonable(record), indent=2, allow_nan=False)
        return write_text(self.folder / "run.json", text + "\n")
