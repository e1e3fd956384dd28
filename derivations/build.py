"""Write every task's generated files (its JAX module and its equations in LaTeX).

A task is a module of this package (one per task: `slr`, ...) with

- `OUTPUT_FILES`: the paths of its generated files, relative to the repository root;
- `outputs()`: derives its equations and returns the text of each of those files, by path.
"""

from pathlib import Path

from . import latent, slr, slr_family, slr_heads, slr_maps

__all__ = ["GENERATED_FILES", "TASKS", "generate"]

#: The task modules, in the order their files are written.
TASKS = (slr, slr_maps, slr_family, slr_heads, latent)

#: Paths of the generated files, relative to the repository root.
GENERATED_FILES = tuple(path for task in TASKS for path in task.OUTPUT_FILES)

if len(set(GENERATED_FILES)) != len(GENERATED_FILES):
    raise RuntimeError(f"two tasks write the same file: {GENERATED_FILES}")


def generate(root: Path) -> list[Path]:
    """Derive every task's equations and write the generated files under `root`.

    **Arguments:**

    - `root`: the directory standing for the repository root.

    **Returns:** the paths written, in the order of `GENERATED_FILES`.
    """
    written = []
    for task in TASKS:
        contents = task.outputs()
        if tuple(contents) != task.OUTPUT_FILES:
            raise RuntimeError(f"{task.__name__}.outputs() wrote {tuple(contents)}, not {task.OUTPUT_FILES}")
        for relative, text in contents.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written
