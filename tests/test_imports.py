"""flowsim's modules import one way: no circle, and nothing below the front end imports what sits above it.

The import graph is read from the source with `ast` (no module is imported), every import counted: at the top
of a module, inside a function (an import deferred for speed is still a dependency), and under TYPE_CHECKING
(an annotation's module is one the reader must know first). An import of a package's submodule is an edge to
that submodule, not to the package's `__init__`, which Python runs first but which the submodule does not use.
Costs no JAX: about 0.1 s.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "flowsim"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of flowsim: dotted name -> (file, whether it is a package's `__init__`)."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        package = path.name == "__init__.py"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    return modules


def _imported(name: str, path: Path, package: bool, modules) -> set[str]:
    """The flowsim modules that module `name` imports anywhere in its source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if package else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            # `from package import submodule` imports the submodule; `from module import name`, the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:  # `import flowsim.x.y as z` of a name y in module x
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                found.add(target)
    return found


MODULES = _modules()
GRAPH = {name: _imported(name, path, package, MODULES) for name, (path, package) in MODULES.items()}
#: The task-free engine: flowsim's own modules, and the command-line toolkit that every task's cli imports.
ENGINE = sorted(
    name
    for name in GRAPH
    if (name.count(".") == 1 and name.split(".")[1] not in ("__main__", "cli", "commands", "tasks"))
    or name.startswith("flowsim.commands")
)
#: The front end: the package's re-exports, the assembler of the command line and `python -m flowsim`.
FRONT = {"flowsim", "flowsim.__main__"} | {name for name in GRAPH if name.startswith("flowsim.cli")}


def _reached(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for module in GRAPH[todo.pop()] - seen:
            seen.add(module)
            todo.append(module)
    return seen


def _circle() -> list[str] | None:
    """One import circle of the graph (its modules, the first repeated at the end), or None."""
    state = {}  # module -> "open" while on the path, "done" once every module below it is known circle-free
    path = []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for imported in sorted(GRAPH[module]):
            if state.get(imported) == "open":
                return [*path[path.index(imported) :], imported]
            if imported not in state and (circle := visit(imported)):
                return circle
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(GRAPH):
        if module not in state and (circle := visit(module)):
            return circle
    return None


def test_the_graph_is_read_whole():
    """The reader finds what it must: the engine, the tasks, and the edges of a deferred and a TYPE_CHECKING
    import (`_experiments` draws its figures with flowsim.figures, imported in a function)."""
    assert len(ENGINE) >= 25 and "flowsim.commands.parts" in ENGINE and "flowsim.integrate" in ENGINE
    assert {"flowsim.tasks.slr._problem", "flowsim.tasks.sparse", "flowsim.tasks.latent"} <= set(GRAPH)
    assert "flowsim.figures" in GRAPH["flowsim.tasks.slr._experiments"]
    assert "flowsim.tasks.slr._generated_maps" in GRAPH["flowsim.tasks.slr._maps"]  # `from package import module`
    assert "flowsim.tasks.slr" not in GRAPH["flowsim.tasks.slr._maps"]


def test_no_import_circle():
    """The modules import one way; in single-location regression, `_problem` on top of the rule's risks and flows,
    the sampler and the overlap chain (which read it through `_parameters.Parameters`)."""
    assert _circle() is None, " -> ".join(_circle())
    below = _reached("flowsim.tasks.slr._problem")
    assert {"flowsim.tasks.slr._maps", "flowsim.tasks.slr._data", "flowsim.tasks.slr._overlap_sgd"} <= below


@pytest.mark.parametrize("module", ENGINE)
def test_no_engine_module_reaches_a_task_or_the_front_end(module):
    """An engine module imports, even through others, no task and nothing of the front end: not the `flowsim`
    package, whose `__init__` re-exports the tasks."""
    reached = _reached(module)
    assert not {name for name in reached if name.startswith("flowsim.tasks")}, f"{module} reaches a task"
    assert not reached & FRONT, f"{module} imports {sorted(reached & FRONT)}"


def test_no_task_imports_the_front_end():
    """A task (its cli included) imports the engine and the toolkit, never the package's re-exports or the
    assembler, which import the tasks."""
    tasks = [name for name in GRAPH if name.startswith("flowsim.tasks")]
    assert [(name, sorted(GRAPH[name] & FRONT)) for name in tasks if GRAPH[name] & FRONT] == []


def test_the_parameters_protocol_is_what_the_problems_have():
    """Both tasks of single-location regression have every member the lower modules read (a check by names: the
    protocol has no runtime meaning of its own)."""
    from flowsim import slr
    from flowsim.tasks.slr._parameters import Parameters

    members = set(Parameters.__annotations__) | {"s", "lam_at"}
    for task in (slr.Problem(d=10, L=3, lam=0.5), slr.ProblemOnManifold(d=10, L=3, lam=0.5)):
        assert all(hasattr(task, member) for member in members), type(task).__name__


#: Libraries slow to import that flowsim imports only where it uses them, inside a function: `import flowsim` and
#: every command's start-up stay without them (scipy.stats alone is a third of `import flowsim`: 0.65-1.4 s).
DEFERRED = ("scipy.stats", "sympy", "sklearn")


def _imported_at_import(path: Path) -> set[str]:
    """The modules a file imports when it is imported: its statements outside functions (an `if` or `try` counts)."""
    found, todo = set(), list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return found


def test_slow_libraries_are_imported_where_they_are_used():
    """No module of flowsim imports `DEFERRED`'s libraries when it is imported (`from scipy import stats` included)."""
    eager = {
        name: sorted(m for m in _imported_at_import(path) if m.split(".")[0] in DEFERRED or m.startswith(DEFERRED))
        for name, (path, _) in MODULES.items()
    }
    assert {name: found for name, found in eager.items() if found} == {}
