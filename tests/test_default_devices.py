"""The installed `flowsim` executable as users run it: its default split of the CPU into devices, Ctrl-C, --resume.

Nothing here pins FLOWSIM_HOST_DEVICES: the executable splits the CPU into one JAX device per core
(2 on the 2-core machine), so the batches run sharded, as they do for every user with more than one
core. Each command runs in a subprocess of its own, sharing the session's compilation cache
(tests/conftest.py). A subprocess pays its imports and compiles again, so the runs are few: one command
whose flow and SGD chain both run sharded (`compare --attention softmax`: a map taken by a rule, solved by
the task's own solver), and one run stopped by a real SIGINT and resumed. The engine's sharded numbers
are checked against one device in tests/test_devices.py; every command's own path in tests/test_cli.py;
the other commands' interruption and --resume in this process in tests/test_runs.py and tests/test_advantage.py.

Interruption is a real SIGINT, sent once the run's record lists a finished unit of work; the run is
then resumed with --resume, and its tables must equal, byte for byte, those of an uninterrupted run.
"""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.shared import default_ctrl_c

REPOSITORY = Path(__file__).resolve().parent.parent
#: Small sizes: what is tested is that every command runs sharded and resumes, not its numbers.
TINY = "--d 10 --L 3"
#: Runs that must succeed with the default device split: name: arguments (--out is added). Diffrax's implicit
#: solvers under the split (`flow --solver kvaerno5` failed so) are checked in tests/test_devices.py.
RUNS = {
    "compare_softmax": f"compare --attention softmax {TINY} --steps 20 --log-every 10 --seeds 3 --lr 0.01",
}
#: Interrupted, resumed and uninterrupted: name: (arguments, the tables to compare, units of the whole run). The
#: l1 control's sweep: the cheapest command with units (scikit-learn fits, few compilations), sized so that the
#: work after its first unit takes seconds (60 fits per T): with two units of milliseconds each, a loaded machine
#: once let the run finish before this process, polling its record, could send the SIGINT.
RESUMED = {
    "sparse": (
        "sparse sweep --Ts 64,128,256 --learners l1 --seeds 10 --candidates 6 --rounds 1 --erm-trials 20 --repeats 1",
        ("critical.csv",),
        6,
    ),
}


def _executable() -> list[str]:
    """The installed `flowsim` script beside this Python, else the module (the same `command()`)."""
    script = Path(sys.executable).parent / "flowsim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "flowsim.cli"]


def _environment() -> dict:
    pinned = ("FLOWSIM_HOST_DEVICES", "XLA_FLAGS")  # what would pin the device count: users do not set them
    return {**{name: value for name, value in os.environ.items() if name not in pinned}, "JAX_PLATFORMS": "cpu"}


def _run(arguments: str, out: Path) -> subprocess.CompletedProcess:
    command = [*_executable(), *arguments.split(), "--out", str(out)]
    with default_ctrl_c():  # the child starts with SIGINT's default action, as from a user's shell
        return subprocess.run(command, capture_output=True, text=True, timeout=600, env=_environment(), cwd=out.parent)


def _interrupted(arguments: str, out: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The run stopped by SIGINT once its record lists a finished unit: (the process, the units it kept)."""
    command = [*_executable(), *arguments.split(), "--out", str(out)]
    with default_ctrl_c():  # the child starts with SIGINT's default action, as from a user's shell
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment(), cwd=out.parent
        )
    deadline = time.monotonic() + 600
    while process.poll() is None and time.monotonic() < deadline:
        if _units(out):
            process.send_signal(signal.SIGINT)
            break
        time.sleep(0.02)
    stdout, stderr = process.communicate(timeout=600)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), _units(out)


def _units(out: Path) -> list[str]:
    try:
        return json.loads((out / "run.json").read_text()).get("units", [])
    except (OSError, ValueError):
        return []


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """run(name): the named run's outcome, run on first request (a plain run of RUNS, or the three runs of a
    RESUMED name: (uninterrupted, interrupted, units kept, resumed, their folder))."""
    base = tmp_path_factory.mktemp("default-devices")

    @functools.cache
    def run(name):
        if name in RUNS:
            return _run(RUNS[name], base / name)
        arguments = RESUMED[name][0]
        folder = base / name
        folder.mkdir()
        whole = _run(arguments, folder / "whole")
        interrupted, kept = _interrupted(arguments, folder / "resumed")
        return whole, interrupted, kept, _run(f"{arguments} --resume", folder / "resumed"), folder

    return run


def _ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("name", RUNS)
def test_commands_run_on_the_default_device_split(runs, name):
    """compare (softmax attention: its flow and its SGD chain) with the batch split over one device per core:
    exit 0, no traceback, the files written and run.json on 2 devices."""
    result = runs(name)
    _ok(result)
    out = Path(result.args[result.args.index("--out") + 1])
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "ok"
    assert len(record["environment"]["jax_devices"]) == min(len(os.sched_getaffinity(0)), os.cpu_count())
    assert record["files"] and all((out / name).exists() for name in record["files"])


@pytest.mark.parametrize("name", RESUMED)
def test_an_interrupted_run_resumes_to_the_uninterrupted_tables(runs, name):
    """SIGINT after the first finished unit: exit 130, run.json "interrupted" with the finished units kept; the
    same command with --resume reads them back, computes the rest, and writes the uninterrupted run's tables."""
    whole, interrupted, kept, resumed, folder = runs(name)
    _, tables, units = RESUMED[name]
    _ok(whole)
    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    assert "Traceback" not in interrupted.stderr and "--resume" in interrupted.stderr
    record = json.loads((folder / "resumed" / "run.json").read_text())
    assert record["status"] == "ok" and record["resumed_units"] == len(kept)
    assert 1 <= len(kept) < units, kept  # interrupted with work left
    assert len(record["units"]) == units
    _ok(resumed)
    assert f"{len(kept)} finished units read back" in resumed.stderr
    for table in tables:
        assert (folder / "resumed" / table).read_bytes() == (folder / "whole" / table).read_bytes(), table


def test_replace_refuses_a_folder_holding_a_users_file(runs, tmp_path):
    """--replace deletes only what the earlier run recorded: beside a user's file it refuses, and the file stays."""
    result = runs("compare_softmax")
    out = Path(result.args[result.args.index("--out") + 1])
    folder = tmp_path / "earlier"
    shutil.copytree(out, folder)
    (folder / "my_notes.txt").write_text("mine")
    (folder / "my_analysis").mkdir()
    refused = _run(f"{RUNS['compare_softmax']} --replace", folder)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"flowsim compare: error: cannot replace the earlier run in {folder}: it also holds what flowsim did not "
        "write (my_analysis, my_notes.txt); move those away or give another folder"
    ]
    assert (folder / "my_notes.txt").read_text() == "mine" and (folder / "my_analysis").is_dir()
    assert json.loads((folder / "run.json").read_text()) == json.loads((out / "run.json").read_text())
