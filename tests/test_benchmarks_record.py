"""BENCHMARKS.md is a document of current figures, benchmarks/ holds the scripts its tables name, and one command
(benchmarks/regenerate.py) runs them all again.

Every script under benchmarks/ is named in BENCHMARKS.md (a script no table names measures nothing the project
claims: git keeps the one-off investigations), every script the file names exists and is run by the driver, and
the file stays short enough to read: the dated history of the measurements is in git, not in the file.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
BENCHMARKS = (REPOSITORY / "BENCHMARKS.md").read_text(encoding="utf-8")
#: A script as BENCHMARKS.md names it: its path from the repository's root.
NAMED = set(re.findall(r"benchmarks/[\w.-]+\.(?:py|sh)", BENCHMARKS))
SCRIPTS = {path.relative_to(REPOSITORY).as_posix() for path in (REPOSITORY / "benchmarks").glob("*.*")}
#: The most lines the file may take: the current figures of each benchmark, not their history (about 25 sections of
#: a table or a paragraph each; 3 049 lines when it was a diary; issue 57 asks for under 400).
MOST_LINES = 400


def test_every_script_is_named_in_benchmarks_md():
    assert {name for name in SCRIPTS if name.endswith((".py", ".sh"))} - NAMED == set()


def test_every_named_script_exists():
    assert NAMED - SCRIPTS == set()


def test_benchmarks_md_is_short():
    assert len(BENCHMARKS.splitlines()) < MOST_LINES


def _script(name: str):
    """benchmarks/NAME.py as a module (benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPOSITORY / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sections() -> dict[str, str]:
    """BENCHMARKS.md's sections by heading."""
    parts = re.split(r"^## (.+)$", BENCHMARKS, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


#: Scripts named in BENCHMARKS.md that measure nothing themselves: README's renderer and the driver.
NOT_MEASURING = {"benchmarks/readme_figures.py", "benchmarks/regenerate.py"}


def test_regenerate_runs_every_script_and_quotes_each_section():
    """One command regenerates every table: each script BENCHMARKS.md names is run by a table of
    benchmarks/regenerate.py, each table's first command is written verbatim in its section, and every
    script a table runs is named there."""
    regenerate, sections = _script("regenerate"), _sections()
    run = {word for table in regenerate.TABLES for c in table.commands for word in c.split() if word in NAMED}
    assert NAMED - NOT_MEASURING - run == set()
    for table in regenerate.TABLES:
        assert table.section in sections, table.section
        text = " ".join(sections[table.section].split())  # a command may be wrapped over two lines
        assert table.commands[0] in text, (table.name, table.commands[0])
        for command in table.commands:
            assert command.split()[1] in text, (table.name, command)
        assert (table.before is not None) == any("BEFORE" in c.split() for c in table.commands), table.name
        if table.before:
            assert f"BEFORE a worktree of {table.before}" in text, table.name


def test_regenerate_plan_and_its_estimate_as_benchmarks_md_states_them():
    regenerate = _script("regenerate")
    tables = regenerate.plan()
    assert [t.name for t in tables] == [t.name for t in regenerate.TABLES if not t.gpu]
    total = regenerate.format_minutes(sum(t.minutes for t in tables))
    assert f"about {total} on the CPU" in " ".join(BENCHMARKS.split())
    assert regenerate.describe(tables).endswith(f"about {total}")
    assert [t.name for t in regenerate.plan(only=["gpu", "chain"])] == ["chain", "gpu"]
    assert "chain" not in [t.name for t in regenerate.plan(skip=["chain"])]


def test_regenerate_refuses_unknown_tables_naming_the_known_ones(capsys):
    regenerate = _script("regenerate")
    with pytest.raises(SystemExit) as stop:
        regenerate.parse_args(["--only", "flows"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "--only: unknown table flows" in error and "flow, stiffness" in error


def test_regenerate_runs_commands_into_a_new_folder_and_keeps_going(tmp_path, monkeypatch):
    """A failing command is recorded and the next one runs; the summary holds both; BEFORE becomes a worktree."""
    regenerate = _script("regenerate")
    repository = tmp_path / "repository"
    repository.mkdir()
    git = ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    (repository / "marker.txt").write_text("before\n")
    subprocess.run([*git, "add", "marker.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setattr(regenerate, "REPOSITORY", repository)
    read = "python -c \"import sys; print(open(sys.argv[1] + '/marker.txt').read())\" BEFORE"
    tables = [
        regenerate.Table("fails", "A", ("python -c 'raise SystemExit(3)'",), minutes=1),
        regenerate.Table("reads", "B", (read,), minutes=1, before=commit),
    ]
    out = regenerate.new_folder(tmp_path / "out")
    done = regenerate.run(tables, out)
    assert [record["returncode"] for record in done] == [3, 0]
    assert "before" in (out / "reads-1.txt").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert [record["table"] for record in summary] == ["fails", "reads"]
    assert not (out / f"before-{commit}").exists()  # the worktree it made, removed
    with pytest.raises(SystemExit, match="not an empty folder"):
        regenerate.new_folder(out)


def test_the_fresh_install_runs_readmes_two_commands(tmp_path, capsys):
    """benchmarks/fresh_install.py times README's quickstart as it stands: two one-line commands, the first ending in
    the demo, the second the one .ci/run runs; its profile table sums the workers' records per test file, and its
    summary holds the suite's exit status and counts against the budget."""
    fresh_install = _script("fresh_install")
    first, second = fresh_install.quickstart_commands((REPOSITORY / "README.md").read_text(encoding="utf-8"))
    assert first.endswith("&& flowsim demo") and second.endswith("&& python -m pytest")
    assert second in (REPOSITORY / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    with pytest.raises(SystemExit, match="two one-line bash blocks"):
        fresh_install.quickstart_commands("## Quickstart\n\n```bash\nflowsim demo\n```\n")
    (tmp_path / "gw0.json").write_text(
        json.dumps({"a.py": {"wall": 10, "compile": 5, "trace": 1}, "b.py": {"wall": 3}})
    )
    (tmp_path / "gw1.json").write_text(json.dumps({"a.py": {"wall": 2, "lower": 1}, "(collection)": {"compile": 2}}))
    totals, rows = fresh_install.profile_table(tmp_path, files=1)
    assert totals == {"wall": 15.0, "trace": 1.0, "lower": 1.0, "compile": 7.0}
    assert rows[2:] == ["| a.py | 12.0 | 7.0 | 58% |", "| all 2 files | 15.0 | 9.0 | 60% |"]
    for arguments, said in (
        (["--files", "0"], "--files must be at least 1"),
        (["--commit", "no-such-commit"], "--commit"),
    ):
        with pytest.raises(SystemExit):
            fresh_install.parse_args(arguments)
        assert said in capsys.readouterr().err
    log = tmp_path / "pytest.log"
    log.write_text(
        "SKIPPED [5] tests/test_notebooks.py:347: minutes of work: FLOWSIM_NOTEBOOKS=1 executes every notebook\n"
        "=== 3 passed, 5 skipped in 12.50s (0:00:12) ===\n"
    )
    assert fresh_install.suite_counts(log) == {
        "passed": 3,
        "skipped": 5,
        "pytest_seconds": 12.5,
        "skipped_because": [
            "5 in tests/test_notebooks.py: minutes of work: FLOWSIM_NOTEBOOKS=1 executes every notebook"
        ],
    }
    record = {"demo": {}, "suite": {"passed": 3, "failed": 1, "status": 1, "seconds": 481.0}}
    assert fresh_install.summary(record) == [
        "suite: exit 1, 3 passed, 1 failed in 8 min 01 s, over its 8-minute budget"
    ]
