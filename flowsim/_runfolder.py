"""An earlier run's folder, as its record describes it: the record checked field by field, the files it lists
confined to the folder and compared with what flowsim wrote, and deleted only then.

A run folder is the user's data: anyone can edit its run.json. So nothing in a record is trusted because flowsim
once wrote it. Every field is checked before use (a damaged record is refused in one line), every file name must
stay inside the folder (no absolute path, no "..", no symbolic link on the way out), and a file is flowsim's only
while its SHA-256 is still the one recorded when flowsim wrote it (`digest`): `replace` deletes only such files,
the temporary files their atomic writes may have left, and the folders they leave empty.
"""

import contextlib
import hashlib
import json
import os
import re
import stat
import string
from pathlib import Path, PurePosixPath

from flowsim._checks import InvalidInput

__all__ = [
    "SCHEMA",
    "UNITS",
    "UNIT_CHARACTERS",
    "checked_record",
    "delete_run",
    "digest",
    "earlier_run",
    "unchanged",
]

#: The mark of a run record that flowsim wrote (its "schema" field): only such a folder is replaced or resumed.
SCHEMA = "flowsim run record 2"

#: The folder of a run's finished units (`RunRecord.unit`).
UNITS = "units"

#: The characters of a stored unit's name (`RunRecord.unit`, `unit_name`): safe in a file's name on every file system.
UNIT_CHARACTERS = frozenset(string.ascii_letters + string.digits + "-_=.")

#: The temporary file of an atomic write (`flowsim.results.write_bytes`: ".NAME.XXXXXXXX.part", mkstemp's eight
#: characters) that a killed process left: flowsim's own, deleted with the run.
_LEFTOVER = re.compile(r"\..+\.[a-z0-9_]{8}\.part")

#: The fields of a record that flowsim reads, each with the test its value must pass and what it must be.
_FIELDS = {
    "command": (lambda v: isinstance(v, str), "a text"),
    "status": (lambda v: isinstance(v, str), "a text"),
    "started": (lambda v: isinstance(v, str), "a text"),
    "host": (lambda v: isinstance(v, str), "a text"),
    "pid": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "seed": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "an integer or null"),
    "parameters": (lambda v: isinstance(v, dict), "an object of the run's parameters"),
    "summary": (lambda v: isinstance(v, dict), "an object"),
    "environment": (lambda v: isinstance(v, dict), "an object"),
    "inputs": (
        lambda v: isinstance(v, dict) and all(d is None or isinstance(d, str) for d in v.values()),
        "an object of SHA-256 texts",
    ),
    "files": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of file names"),
    "units": (
        lambda v: (
            isinstance(v, list)
            and all(isinstance(n, str) and n and UNIT_CHARACTERS.issuperset(n) and not n.startswith(".") for n in v)
        ),
        "a list of unit names",
    ),
    "digests": (
        lambda v: isinstance(v, dict) and all(isinstance(d, str) for d in v.values()),
        "an object of SHA-256 texts by file name",
    ),
}


def digest(path: Path) -> str:
    """The SHA-256 of the file at `path`, as hexadecimal text."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def earlier_run(folder) -> dict | None:
    """The record (run.json) of the flowsim run that wrote `folder`, checked (`checked_record`), or None if it holds
    none.

    A record is flowsim's when its "schema" field is `SCHEMA`; a run.json of any other program (or of a flowsim too
    old to mark its records) is not, and such a folder is never deleted nor resumed.

    **Raises:** `InvalidInput` where the record is flowsim's but damaged (`checked_record`).
    """
    try:
        record = json.loads((Path(folder) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(record, dict) and record.get("schema") == SCHEMA):
        return None
    return checked_record(Path(folder), record)


def checked_record(folder: Path, record: dict) -> dict:
    """`record` (run.json in `folder`) with every field flowsim reads checked, and its file names confined.

    **Returns:** the record, its missing lists and objects (`files`, `units`, `parameters`, ...) made empty.

    **Raises:** `InvalidInput` naming the first damaged field, or a file name that would leave the folder, and
    saying how to proceed.
    """
    for name, (valid, what) in _FIELDS.items():
        if name in record and not valid(record[name]):
            _damaged(folder, f"its field {name!r} must be {what}, got {json.dumps(record[name])[:60]}")
    for name in record.get("files", []):
        if _outside(folder, name):
            _damaged(folder, f"it lists {name!r}, which is not a file name inside the folder")
    defaults = {"files": [], "units": [], "parameters": {}, "summary": {}, "environment": {}, "inputs": {}}
    return {**defaults, **record}


def _damaged(folder: Path, why: str):
    raise InvalidInput(
        f"the run record {folder / 'run.json'} is damaged ({why}): flowsim neither deletes nor resumes what it "
        "cannot trust; move the folder away, or give another --out"
    )


def _outside(folder: Path, name: str) -> bool:
    """Whether the file `name` of a record may lie outside `folder`: not a plain relative name (absolute, "..",
    ".", empty parts, a NUL), or in a folder reached through a symbolic link that leaves the folder."""
    parts = PurePosixPath(name).parts
    if not parts or "\0" in name or "\\" in name or PurePosixPath(name).is_absolute():
        return True
    if any(part in ("..", ".") for part in parts) or "//" in name or name.endswith("/"):
        return True
    # The folder it lies in, resolved (the file itself may be a link: never followed, `unchanged` refuses it).
    return not (folder / name).parent.resolve().is_relative_to(folder.resolve())


def unchanged(folder: Path, record: dict, name: str) -> bool | None:
    """Whether the file `name` of `record` is still what flowsim wrote: a regular file (not a link) whose SHA-256 is
    the recorded one; None where the record holds no digest of it (a record of an earlier flowsim)."""
    recorded = record.get("digests", {}).get(name)
    path = folder / name
    try:
        regular = stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False
    if recorded is None:
        return None
    return regular and digest(path) == recorded


def delete_run(folder: Path, record: dict) -> None:
    """Delete the run of `record` from `folder`: the files it lists, unchanged since flowsim wrote them, the
    temporary files their atomic writes left, run.json, and the folders they leave empty. Everything else stays.

    **Raises:** `InvalidInput`, before deleting anything, where the folder holds what flowsim did not write, a listed
    file was changed since (or its digest was never recorded), and, naming the file, where a deletion fails.
    """
    listed = {name for name in record["files"] if (folder / name).exists() or (folder / name).is_symlink()}
    changed = [name for name in sorted(listed) if not unchanged(folder, record, name)]
    if changed:
        unrecorded = [name for name in changed if name not in record.get("digests", {})]
        why = (
            "its run.json records no digest of them (written by an earlier flowsim)"
            if unrecorded
            else "they were changed since flowsim wrote them"
        )
        raise InvalidInput(
            f"cannot replace the earlier run in {folder}: flowsim cannot tell that {_few(changed)} are still what it "
            f"wrote ({why}); move them away or give another folder"
        )
    ours = {folder / "run.json", *(folder / name for name in listed)}
    folders = {parent for path in ours for parent in path.parents if folder in parent.parents}
    leftovers, others = set(), []
    for path in _entries(folder, folders):
        if path in ours:
            continue
        if _LEFTOVER.fullmatch(path.name) and stat.S_ISREG(path.lstat().st_mode):
            leftovers.add(path)
        else:
            others.append(path.relative_to(folder).as_posix())
    if others:
        raise InvalidInput(
            f"cannot replace the earlier run in {folder}: it also holds what flowsim did not write ({_few(others)}); "
            "move those away or give another folder"
        )
    try:
        for path in sorted(ours | leftovers):
            path.unlink(missing_ok=True)
        for path in sorted(folders, key=lambda p: len(p.parts), reverse=True):  # the innermost first
            with contextlib.suppress(OSError):
                path.rmdir()  # only where empty
    except OSError as error:
        raise InvalidInput(
            f"cannot replace the earlier run in {folder}: deleting {error.filename} failed ({error.strerror}); "
            "the files deleted before it are gone, the others kept"
        ) from None


def _entries(folder: Path, ours: set[Path]) -> list[Path]:
    """Everything in `folder` but the subfolders `ours`, in order: files, links (never followed) and other folders
    (not looked into: a folder the run did not make is not the run's, even empty)."""
    found = []
    for top, subfolders, files in os.walk(folder, followlinks=False):
        found += [Path(top, name) for name in files]
        found += [Path(top, name) for name in subfolders if Path(top, name) not in ours or Path(top, name).is_symlink()]
        subfolders[:] = [name for name in subfolders if Path(top, name) in ours]
    return sorted(found)


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
