"""Signals honoured from the executable's first instant (issue 54): a Ctrl-C or SIGTERM while the `flowsim` executable
imports, starts or runs ends it within about a second with one line on stderr and the exit status of a stopped run,
never a traceback or a lost signal, and a run folder that was made says how the run ended. And an XLA_FLAGS that XLA
cannot read is refused in one line before JAX starts.

Each case is the installed `flowsim` executable in a subprocess (what only a process of its own shows: its exit
status, its stderr, its signal handling during the imports), about 1-2 s of imports each; the interrupted ones stop
before anything is compiled, and the SIGTERM case once its run folder is made (its first compilation, if any, is
abandoned: `flowsim.integrate.STOP_SECONDS`).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.shared import default_ctrl_c

#: The console script pip installed beside this Python (the `flowsim` a user runs).
EXECUTABLE = Path(sys.executable).with_name("flowsim")
#: The longest wait allowed from a signal to the process's end: the issue asks for about a second; more on a loaded
#: 2-core machine running the other test worker.
LATENCY = 3.0


def _start(out: Path, **env) -> subprocess.Popen:
    assert EXECUTABLE.is_file(), f"{EXECUTABLE} is missing: install flowsim (pip install -e .)"
    # The child starts with SIGINT as a user's shell gives it, whatever this worker has: a child inherits an ignored
    # or blocked SIGINT (seen in a full-suite run: all three Ctrl-C cases ran to the end, their signal never heard).
    with default_ctrl_c():
        return subprocess.Popen(
            [str(EXECUTABLE), "flow", "--n", "4", "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )


def _stop(process: subprocess.Popen, signum: int) -> tuple[float, str]:
    """Send `signum`; (seconds until the process ended, its stderr)."""
    sent = time.perf_counter()
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    return time.perf_counter() - sent, stderr


def _assert_final_record(out: Path) -> None:
    """A run folder that was made holds a run.json that says the run was interrupted (never "running")."""
    if out.exists():
        record = json.loads((out / "run.json").read_text(encoding="utf-8"))
        assert record["status"] == "interrupted", record


# 0.2 s: Python has started flowsim's imports (an interpreter's own start, about 0.05 s here, precedes any of
# flowsim's code: a signal then is Python's alone); 0.5 and 1.0 s: inside JAX's imports, where a KeyboardInterrupt
# was dropped in a garbage collector's callback ("Exception ignored") or ended in a traceback.
@pytest.mark.parametrize("after", [0.2, 0.5, 1.0])
def test_ctrl_c_while_starting_ends_the_run_in_one_line(tmp_path, after):
    out = tmp_path / "run"
    process = _start(out)
    time.sleep(after)
    latency, stderr = _stop(process, signal.SIGINT)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert "interrupted by the user (Ctrl-C)" in stderr.strip().splitlines()[-1], stderr
    if not out.exists():  # stopped while starting: that one line alone (a run stopped later lists its files first)
        assert len(stderr.strip().splitlines()) == 1, stderr
    assert latency < LATENCY
    _assert_final_record(out)


def test_sigterm_once_the_run_has_its_folder_ends_it_as_interrupted(tmp_path):
    """SIGTERM (a scheduler's time limit) after the run made its folder: exit 143 within about a second, run.json
    final. Sent as soon as run.json exists: the run is then starting its devices or compiling its first solve."""
    out = tmp_path / "run"
    process = _start(out)
    deadline = time.perf_counter() + 120
    while not (out / "run.json").exists() and process.poll() is None and time.perf_counter() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be stopped"
    latency, stderr = _stop(process, signal.SIGTERM)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr, stderr
    assert "interrupted by SIGTERM" in stderr.splitlines()[-1], stderr
    assert latency < LATENCY
    _assert_final_record(out)


def test_an_xla_flag_xla_does_not_know_is_refused_in_one_line(tmp_path):
    """XLA's own fatal error ("Unknown flag in XLA_FLAGS", exit status 1 as a numerical failure's) replaced by
    flowsim's refusal of invalid input, before JAX starts."""
    process = _start(tmp_path / "run", XLA_FLAGS="--xla_bogus")
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr
    assert stderr.startswith("flowsim: error: XLA cannot read XLA_FLAGS='--xla_bogus': Unknown flag"), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "run").exists()
