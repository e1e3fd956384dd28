"""Every code block of README.md and docs/*.md runs as written, in order, as a newcomer would run them.

Each page's blocks run in one empty working folder, one after the other: Python blocks in one namespace (a session),
shell blocks with bash (`flowsim` is the executable of this Python). A block that cannot or should not run here says
so in the page, in an HTML comment on the line before it (invisible on the rendered page, read by this test):

- `<!-- test: fragment, WHY -->`: not run (a part of a file, commands for a cluster, an installation, the suite);
- `<!-- test: file NAME -->`: a file of the reader's, written to NAME in the working folder for the blocks after it;
- `<!-- test: smaller, "A" as "B", "C" as "D" -->`: run with each text A replaced by B, a long run made short
  (the page's numbers are the full run's; in A and B, \\n is a line's end and \\" a quote);
- `, exit N` at the end of a mark: a shell block whose last command ends with status N, as the page says (a claim
  that fails, status 1).

Blocks of output (`text`) and of references (`bibtex`) are not code. Blocks without a comment run as written.

Every block is checked in the suite (its mark valid, its replacements applicable, its Python compiled), at no cost.
Running them costs minutes even made smaller (measured 2026-12-04 on 2 busy cores: docs/architecture.md 73 s and
docs/devices.md 167 s of wall time, the latter starting five `flowsim` processes), above the suite's budget: they run
with FLOWSIM_DOC_BLOCKS=1 (`FLOWSIM_DOC_BLOCKS=1 python -m pytest -n 0 tests/test_doc_blocks.py`).
"""

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared import check_command_line

REPOSITORY = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *(f"docs/{page.name}" for page in sorted((REPOSITORY / "docs").glob("*.md")))]
#: Fenced blocks in these languages are not code.
NOT_CODE = ("text", "bibtex")
_BLOCK = re.compile(r"(?:^<!-- test: (?P<mark>.*?) -->\n)?^```(?P<language>\w*)\n(?P<code>.*?)^```", re.S | re.M)
#: The exit status a mark expects of its shell block (0 if it names none).
_EXIT = re.compile(r", exit (\d+)$")
_REPLACEMENT = re.compile(r'"((?:[^"\\]|\\.)*)" as "((?:[^"\\]|\\.)*)"')


def blocks(text: str) -> list[tuple[int, str, str, str]]:
    """The fenced code blocks of a page: (line, language, code, the test's mark or "")."""
    return [
        (text[: match.start("code")].count("\n"), match["language"], match["code"], match["mark"] or "")
        for match in _BLOCK.finditer(text)
    ]


def prepared(code: str, mark: str) -> str:
    """A block's code as the test runs it: with the replacements of a `smaller` mark, each of which must apply."""
    if not mark.startswith("smaller"):
        return code
    for old, new in (tuple(_unescaped(text) for text in pair) for pair in _REPLACEMENT.findall(mark)):
        assert old in code, f"the mark replaces {old!r}, which the block does not hold"
        code = code.replace(old, new)
    return code


def _unescaped(text: str) -> str:
    """A mark's text as it is meant: \\n a line's end, \\" a quote."""
    return text.replace("\\n", "\n").replace('\\"', '"')


def test_marks_are_read():
    text = (
        'Some text.\n<!-- test: smaller, "steps=2_000" as "steps=20" -->\n```python\nrun(steps=2_000)\n```\n'
        "```text\nout\n```\n<!-- test: fragment, a part -->\n```python\n...\n```\n"
    )
    found = blocks(text)
    assert [(line, language, mark.split(",")[0]) for line, language, _, mark in found] == [
        (3, "python", "smaller"),
        (6, "text", ""),
        (10, "python", "fragment"),
    ]
    assert prepared(found[0][2], found[0][3]) == "run(steps=20)\n"
    with pytest.raises(AssertionError, match="does not hold"):
        prepared("run()\n", found[0][3])


def runnable(page: str) -> list[tuple[str, str, str, str]]:
    """A page's blocks as the test takes them: (where, language, code as run, kind: "run" or "file NAME"); fails on
    a block in another language without a mark, an unknown mark, or a replacement the block does not hold."""
    taken = []
    for line, language, code, mark in blocks((REPOSITORY / page).read_text(encoding="utf-8")):
        where = f"{page}, line {line}"
        kind = mark.split(",")[0].split(" ")[0]
        assert kind in ("", "fragment", "file", "smaller"), f"{where}: unknown mark {mark!r}"
        if language in NOT_CODE or kind == "fragment":
            continue
        assert language in ("python", "bash"), f"{where}: a block in {language!r}: mark it, or name its language"
        if kind == "file":
            taken.append((where, language, code, mark))
            continue
        try:
            code = prepared(code, mark)
        except AssertionError as error:
            raise AssertionError(f"{where}: {error}") from None
        taken.append((where, language, code, f"run{status[0] if (status := _EXIT.findall(mark)) else 0}"))
    return taken


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_code_or_marked(page, capsys, tmp_path, monkeypatch):
    """No JAX: each block's mark read, its Python compiled, and its `flowsim` lines, made smaller, parsed and checked
    as the executable does (an option a `smaller` mark adds that the command lacks, or a value it refuses, fails)."""
    from flowsim.cli import _parser

    monkeypatch.chdir(tmp_path)
    parser = _parser()
    for where, language, code, kind in runnable(page):
        if kind.startswith("file"):
            (tmp_path / kind.split(" ", 1)[1].strip()).write_text(code, encoding="utf-8")
        if language == "python":
            compile(code, where, "exec")  # a SyntaxError names the page and line
            continue
        for line in code.splitlines():
            if not (command := re.match(r"\s*(?:\w+=\S*\s+)*flowsim\s+(.*)", line.split(" #")[0])):
                continue
            arguments = re.split(r"\s*&", command.group(1))[0].split()
            check_command_line(parser, arguments, f"{where}: `flowsim {' '.join(arguments)}`", capsys)


@pytest.mark.skipif(
    os.environ.get("FLOWSIM_DOC_BLOCKS") != "1", reason="minutes of work: FLOWSIM_DOC_BLOCKS=1 runs every block"
)
@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_a_page_runs_in_order(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    environment = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    namespace: dict = {"__name__": "__main__"}
    for where, language, code, kind in runnable(page):
        if kind.startswith("file"):
            (tmp_path / kind.split(" ", 1)[1].strip()).write_text(code, encoding="utf-8")
            continue
        if language == "python":
            with contextlib.chdir(tmp_path):
                exec(compile(code, where, "exec"), namespace)  # the page's own code, as a reader runs it
        else:
            done = subprocess.run(
                ["bash", "-e", "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == int(kind[3:]), (
                f"{where}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            )
