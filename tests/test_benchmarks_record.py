"""BENCHMARKS.md is a document of current figures, and benchmarks/ holds the scripts its tables name (pure text).

Every script under benchmarks/ is named in BENCHMARKS.md (a script no table names measures nothing the project
claims: git keeps the one-off investigations), every script the file names exists, and the file stays short
enough to read: the dated history of the measurements is in git, not in the file.
"""

import re
from pathlib import Path

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
