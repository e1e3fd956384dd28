"""What a newcomer meets first (issue 54, finding 9): a command run twice with its default --out keeps both runs."""

import json
from pathlib import Path

import pytest

from flowsim.cli import main
from flowsim.commands.options import default_folder
from flowsim.results import SCHEMA


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_record(folder: Path, started: str, command: str = "flowsim flow") -> None:
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"schema": SCHEMA, "command": command, "started": started}))


def test_the_default_folder_is_the_first_of_the_sequence_not_taken(in_tmp):
    # No JAX: folders only.
    assert default_folder("flow") == "flowsim-out/flow"
    (in_tmp / "flowsim-out" / "flow").mkdir(parents=True)
    assert default_folder("flow") == "flowsim-out/flow", "an empty folder is taken"
    (in_tmp / "flowsim-out" / "flow" / "run.json").write_text("{}")
    assert default_folder("flow") == "flowsim-out/flow-2"
    # Names outside the sequence (flow-1, flow-02, flowx, another command's) are not counted; an empty one is taken.
    for name in ("flow-1", "flow-02", "flowx", "flow-2-old", "sgd"):
        (in_tmp / "flowsim-out" / name).mkdir()
        (in_tmp / "flowsim-out" / name / "x").write_text("")
    (in_tmp / "flowsim-out" / "flow-2").mkdir()
    assert default_folder("flow") == "flowsim-out/flow-2"
    (in_tmp / "flowsim-out" / "flow-2" / "notes.txt").write_text("")
    (in_tmp / "flowsim-out" / "flow-3").write_text("a file, not a folder")
    assert default_folder("flow") == "flowsim-out/flow-4", "a file of the name is not overwritten"
    assert default_folder("sparse sweep") == "flowsim-out/sparse-sweep"


def test_resume_and_replace_without_out_take_the_run_that_started_last(in_tmp):
    assert default_folder("flow", latest=True) == "flowsim-out/flow", "no earlier run: a new folder"
    _run_record(in_tmp / "flowsim-out" / "flow", "2026-01-02T10:00:00Z")
    _run_record(in_tmp / "flowsim-out" / "flow-10", "2026-01-01T10:00:00Z")
    _run_record(in_tmp / "flowsim-out" / "flow-2", "2026-01-02T10:00:00Z")
    (in_tmp / "flowsim-out" / "flow-3").mkdir()
    (in_tmp / "flowsim-out" / "flow-3" / "run.json").write_text('{"started": "2027-01-01T00:00:00Z"}')  # not flowsim's
    # The latest start, the higher number on a tie (flow-10's started earlier, though its number is higher).
    assert default_folder("flow", latest=True) == "flowsim-out/flow-2"
    assert default_folder("flow") == "flowsim-out/flow-4"


def test_a_command_run_twice_with_its_default_out_keeps_both_runs(in_tmp, capsys):
    """README's command block stopped at its second `flowsim flow` ("flowsim-out/flow holds an earlier run"). After a
    run in flowsim-out/flow (its record made as a run makes it), the next run (flow, d = 8, one start to t = 0.01: one
    compilation, about 5 s on 2 idle cores) writes into flowsim-out/flow-2 and says so."""
    from flowsim import results

    results.RunRecord("flowsim-out/flow", "flowsim flow", {"n": 1}, seed=0, log=None).finish()
    assert main(["flow", "--d", "8", "--n", "1", "--t-max", "0.01", "--saves", "2", "--no-progress"]) == 0
    assert "Results in flowsim-out/flow-2/" in capsys.readouterr().out
    record = json.loads((in_tmp / "flowsim-out" / "flow-2" / "run.json").read_text())
    assert record["status"] == "ok" and record["parameters"]["out"] == "flowsim-out/flow-2"
    assert (in_tmp / "flowsim-out" / "flow" / "run.json").is_file(), "the earlier run is kept"


def test_replace_and_resume_without_out_take_the_latest_run_and_say_so(in_tmp, capsys):
    """No JAX: the folder `choose_folder` gives the run, before anything is made."""
    from argparse import Namespace

    from flowsim.commands.options import choose_folder

    _run_record(in_tmp / "flowsim-out" / "flow", "2026-01-01T10:00:00Z")
    _run_record(in_tmp / "flowsim-out" / "flow-2", "2026-01-02T10:00:00Z")
    replace = Namespace(command="flow", out=None, replace=True)
    choose_folder(replace)
    assert replace.out == "flowsim-out/flow-2"
    assert capsys.readouterr().err == "flowsim flow: replacing the latest run, in flowsim-out/flow-2\n"
    resume = Namespace(command="flow", out=None, replace=False, resume=True)
    choose_folder(resume)
    assert resume.out == "flowsim-out/flow-2"
    given = Namespace(command="flow", out="mine", replace=True)
    choose_folder(given)
    assert given.out == "mine" and capsys.readouterr().err == "", "an explicit --out is kept as given"
    fresh = Namespace(command="flow", out=None, replace=False)
    choose_folder(fresh)
    assert fresh.out == "flowsim-out/flow-3"


def test_a_newton_root_that_diverged_is_not_compared_for_its_symmetry(monkeypatch):
    """README's `slr.reproduce(key, quick=True)` warned "invalid value encountered in subtract": a Newton polish from a
    far end point had diverged to (nan, ..., inf) and its symmetric images were compared. Such a root is not near its
    end point, so it is left unassigned without a warning (Newton stubbed: no compilation)."""
    import warnings

    import jax.numpy as jnp

    from flowsim import fixedpoints, slr

    def diverged(field, starts, args, t):
        return jnp.full(starts.shape, jnp.nan).at[:, -1].set(jnp.inf), jnp.zeros(starts.shape[0], bool)

    monkeypatch.setattr(fixedpoints, "newton_polish", diverged)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found, labels = fixedpoints.attractors(slr.Problem(8, 3, 0.5), [[0.5, 0.5, 0.1, 0.1, 0.2]] * 2)
    assert found == [] and labels.tolist() == [-1, -1]


def test_in_a_cluster_what_native_code_prints_goes_to_stderr():
    """Gloo said its connections ("[Gloo] Rank 1 is connected to 3 peer ranks") with std::cout, on the stdout of every
    process of a cluster, the non-leading ones included (docs/devices.md: they print nothing on stdout). A write to
    descriptor 1 stands for it: one subprocess, about 2 s of imports, no cluster started."""
    import subprocess
    import sys

    script = (
        "import os\n"
        "from flowsim.cli import _native_stdout_on_stderr\n"
        "with _native_stdout_on_stderr():\n"
        "    os.write(1, b'[native]\\n')\n"
        "    print('result', flush=True)\n"
        "print('after', flush=True)\n"  # stdout is a pipe: block-buffered unless PYTHONUNBUFFERED is set
        "os.write(1, b'[native after]\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "result\nafter\n[native after]\n"
    assert done.stderr == "[native]\n"
