"""Finished units of a run's work, stored as they finish, read back bit for bit by a resumed run.

A unit's result is a tree of NumPy arrays, numbers, strings, booleans and None, held in tuples, lists,
dicts, NamedTuples, dataclasses, enumerations or equinox Modules of flowsim's own. It is stored as one `.npz` file:
the arrays as arrays (float64 stays float64, bit for bit), the tree's shape as JSON beside them; no
pickle, so reading a stored unit runs no code but flowsim's constructors of its own classes.
"""

import dataclasses
import enum
import importlib
import io
import json
from pathlib import Path

import numpy as np

from flowsim._checks import InvalidInput

__all__ = ["load_unit", "unit_bytes"]

#: The key of the tree's description in a unit's .npz.
_TREE = "__tree__"


def unit_bytes(value) -> bytes:
    """The .npz file of a unit's result `value` (see the module's docstring for what it may hold)."""
    arrays: dict[str, np.ndarray] = {}

    def encode(item):
        if isinstance(item, enum.Enum):
            return {"class": _class_name(item), "member": item.name}
        if item is None or isinstance(item, bool | int | float | str):
            return {"value": item}
        if isinstance(item, np.generic):
            return encode(item.item())
        if hasattr(item, "__array__") and not isinstance(item, list | tuple | dict):
            name = f"a{len(arrays)}"
            arrays[name] = np.asarray(item)
            return {"array": name}
        if isinstance(item, dict):
            return {"dict": [[key, encode(entry)] for key, entry in item.items()]}
        if isinstance(item, tuple) and hasattr(item, "_fields"):
            return {"class": _class_name(item), "items": [encode(entry) for entry in item]}
        if isinstance(item, list | tuple):
            return {type(item).__name__: [encode(entry) for entry in item]}
        if dataclasses.is_dataclass(item):
            fields = {field.name: encode(getattr(item, field.name)) for field in dataclasses.fields(item)}
            return {"class": _class_name(item), "fields": fields}
        raise TypeError(f"a unit's result cannot hold a {type(item).__name__}")

    tree = encode(value)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, **{_TREE: np.frombuffer(json.dumps(tree).encode(), dtype=np.uint8)})
    return buffer.getvalue()


def load_unit(path: Path):
    """The result stored in a unit's .npz file (`unit_bytes`), rebuilt."""
    with np.load(path, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    tree = json.loads(arrays.pop(_TREE).tobytes().decode())

    def decode(node):
        if "value" in node:
            return node["value"]
        if "array" in node:
            return arrays[node["array"]]
        if "dict" in node:
            return {key: decode(entry) for key, entry in node["dict"]}
        if "list" in node:
            return [decode(entry) for entry in node["list"]]
        if "tuple" in node:
            return tuple(decode(entry) for entry in node["tuple"])
        kind = _flowsim_class(node["class"])
        if "member" in node:
            return kind[node["member"]]
        if "items" in node:
            return kind(*(decode(entry) for entry in node["items"]))
        made = object.__new__(kind)  # the stored fields as they were, without the constructor's conversions
        for name, entry in node["fields"].items():
            object.__setattr__(made, name, decode(entry))
        return made

    return decode(tree)


def _class_name(item) -> str:
    kind = type(item)
    return f"{kind.__module__}:{kind.__qualname__}"


def _flowsim_class(name: str):
    module, _, qualname = name.partition(":")
    if module != "flowsim" and not module.startswith("flowsim."):
        raise InvalidInput(f"a stored unit names the class {name}, not one of flowsim's: it was not written by flowsim")
    kind = importlib.import_module(module)
    for part in qualname.split("."):
        kind = getattr(kind, part)
    return kind
