"""Interrupted and repeated runs: Ctrl-C honoured within seconds with what was computed kept, run.json
current while a run goes, and an output folder that never mixes two runs.

Ctrl-C is a real SIGINT to this process, sent by a timer while a long computation runs (the toy
task of test_engine_generic compiles in about a second): the computation must stop at its next
check, raise `flowsim.Interrupted` and hand back the states it reached.
"""

import contextlib
import contextvars
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowsim
from flowsim import _interrupt, _memory, results
from flowsim._checks import InvalidInput
from flowsim._interrupt import ctrl_c_kept, interruption, run_interruptibly
from flowsim.cli import main
from flowsim.results import RunRecord
from tests.shared import default_ctrl_c, interrupted_then_resumed
from tests.test_engine_generic import TASK, Y0

#: The longest wait allowed from the SIGINT to the exception: the issue asks for a second or two. The SIGINT is
#: sent once the computation has run a first segment (compiled and running: on a loaded machine the compilation
#: alone can take seconds, and Ctrl-C during it is not what is timed here).
LATENCY = 2.5


class _Stopwatch:
    """A SIGINT (or `signum`, `times` times 10 ms apart) to this process once `module`'s computation has looked for
    Ctrl-C `checks` times (it calls `stopped()` between its segments); `latency` once the interruption was caught."""

    def __init__(self, monkeypatch, module, checks: int, signum: int = signal.SIGINT, times: int = 1):
        self.signum, self.times = signum, times
        self.running = threading.Event()
        looked, original = [], module.stopped

        def stopped():
            looked.append(None)
            if len(looked) >= checks:
                self.running.set()
            return original()

        monkeypatch.setattr(module, "stopped", stopped)

    def __enter__(self):
        self.sent = None
        self.cancelled = threading.Event()
        self.timer = threading.Thread(target=self._send, daemon=True)
        self.timer.start()
        return self

    def _send(self):
        # Not once the block is left: its handler is gone by then, and a SIGTERM would end the test's worker.
        if self.running.wait(timeout=300) and not self.cancelled.is_set():
            self.sent = time.perf_counter()
            for _ in range(self.times):
                if not self.cancelled.is_set():
                    os.kill(os.getpid(), self.signum)
                    time.sleep(0.01)

    def __exit__(self, *exc):
        self.cancelled.set()
        self.running.set()
        self.timer.join()
        self.latency = time.perf_counter() - self.sent if self.sent is not None else None
        return False


def test_ctrl_c_stops_sgd_within_seconds_keeping_its_logs(monkeypatch):
    # run_logged looks before each segment but the first: its first look comes after a first segment ran.
    with _Stopwatch(monkeypatch, sys.modules["flowsim.sgd"], 1) as watch, pytest.raises(flowsim.Interrupted) as raised:
        flowsim.run_sgd(TASK, 0, init=Y0, lr=1e-6, steps=10**9, log_every=10**5, seeds=2)
    assert watch.latency < LATENCY
    run = raised.value.result
    stopped = np.asarray(run.stopped_at)
    assert (stopped > 0).all() and (np.asarray(run.status) == flowsim.Status.INTERRUPTED).all()
    logged = np.isfinite(np.asarray(run.ys)).all(axis=-1)
    kept = run.steps <= stopped[0]
    assert logged[:, kept].all() and not logged[:, ~kept].any()  # everything computed, nothing invented
    failure = run.failures()[0]
    assert failure.status is flowsim.Status.INTERRUPTED and failure.reason == f"stopped by Ctrl-C at step {stopped[0]}"


def _oscillator(t, y, args):
    return jnp.stack([y[1], -y[0]])


@pytest.mark.parametrize("compacted", [False, True], ids=["segments", "compacted"])
def test_ctrl_c_stops_a_solve_within_seconds_keeping_its_saved_states(monkeypatch, compacted):
    """A harmonic oscillator keeps a constant step size: to t = 2e5 a solve takes about a minute, its first
    segment 1/400 of it, the later ones about a second each (an interruptible solve stops at the end of the
    current one); compacted, it stops after the current round of `ROUND_STEPS` steps."""
    monkeypatch.setattr(sys.modules["flowsim.integrate"], "SEGMENTS", 400)
    ts = np.linspace(0.0, 2e5, 401)
    y0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    # It looks after each segment; compacted, after the starts and each round (the first round compiles).
    watch = _Stopwatch(monkeypatch, sys.modules["flowsim._interrupt"], 2 if compacted else 1)
    with watch, pytest.raises(flowsim.Interrupted) as raised:
        flowsim.integrate(
            _oscillator, y0, ts, interruptible=True, compacted=compacted, max_steps=10**9, rtol=1e-13, atol=1e-13
        )
    assert watch.latency < LATENCY
    solved = raised.value.result
    assert (np.asarray(solved.status) == flowsim.Status.INTERRUPTED).all()
    t_final = np.asarray(solved.t_final)
    saved = np.isfinite(np.asarray(solved.ys)).all(axis=-1)
    assert (t_final > 0).all() and (t_final < ts[-1]).all()
    assert (saved == (ts[None, :] <= t_final[:, None])).all()  # everything computed, nothing invented
    kept = np.asarray(solved.ys)[0, saved[0]]
    np.testing.assert_allclose(kept[:, 0], np.cos(ts[saved[0]]), atol=1e-6)  # the states are the solution's
    assert solved.failures()[0].reason == "stopped by Ctrl-C"


_MARKER = contextvars.ContextVar("flowsim_test_marker", default="not set")


def test_a_computation_has_its_callers_jax_settings_and_context():
    """An interruptible computation runs in a worker thread, where JAX's per-thread settings and Python's context
    variables used to be lost: `with jax.numpy_dtype_promotion("standard"): slr.run_sgd(...)`, in a program that
    sets "strict" for its own code, raised TypePromotionError. The worker has them now, and only while it runs."""
    seen = {}

    def look():
        seen.update(
            thread=threading.current_thread(),
            promotion=str(jax.config.jax_numpy_dtype_promotion),
            device=jax.config.jax_default_device,
            no_jit=jax.config.jax_disable_jit,
            marker=_MARKER.get(),
        )
        return jnp.zeros(())

    device = jax.devices()[-1]
    token = _MARKER.set("set by the caller")
    try:
        with jax.numpy_dtype_promotion("strict"), jax.default_device(device), jax.disable_jit():
            run_interruptibly(look)
    finally:
        _MARKER.reset(token)
    assert seen.pop("thread") is not threading.current_thread()
    assert seen == {"promotion": "strict", "device": device, "no_jit": True, "marker": "set by the caller"}
    assert str(jax.config.jax_numpy_dtype_promotion) == "standard" and not jax.config.jax_disable_jit


#: SIGHUP where the platform has it (not on Windows).
SIGHUP = getattr(signal, "SIGHUP", None)
_NO_SIGHUP = pytest.mark.skipif(SIGHUP is None, reason="no SIGHUP on this platform")


@contextlib.contextmanager
def _default_action(signum):
    """`signum` at its default action within (a suite started under `nohup` inherits SIGHUP ignored)."""
    before = signal.signal(signum, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signum, before)


@pytest.mark.parametrize(
    ("signum", "by", "exit_status"),
    [
        (signal.SIGINT, "the user (Ctrl-C)", 130),
        (signal.SIGTERM, "SIGTERM", 143),
        pytest.param(SIGHUP, "SIGHUP", 129, marks=_NO_SIGHUP),
    ],
    ids=["SIGINT", "SIGTERM", "SIGHUP"],
)
def test_the_command_line_writes_what_it_had_when_interrupted(tmp_path, capsys, monkeypatch, signum, by, exit_status):
    """Ctrl-C, SIGTERM (a batch scheduler's time limit, `kill`) and SIGHUP (a closed terminal), which would otherwise
    end the process at once. The last two are sent twice, 10 ms apart, as a terminal's hangup can send SIGHUP (its
    shell's, then the kernel's): the second used to stop the run as a second Ctrl-C does, losing what it had."""
    out = tmp_path / "sgd"
    # --yes: a billion steps are estimated at more than an hour, which only a run asked for may take.
    arguments = f"sgd --d 10 --L 4 --steps 1000000000 --log-every 100000 --seeds 2 --yes --out {out}"
    times = 1 if signum == signal.SIGINT else 2
    with _default_action(signum):
        with _Stopwatch(monkeypatch, sys.modules["flowsim.sgd"], 2, signum, times):
            status = main(arguments.split(), own_process=True)  # as the executable runs it
        assert signal.getsignal(signum) == signal.SIG_DFL  # the command line's handler is gone after the run
    stderr = capsys.readouterr().err
    assert status == exit_status and f"flowsim sgd: interrupted by {by}: the files written so far" in stderr
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "interrupted" and record["reason"].startswith("interrupted at step")
    assert record["reason"].endswith(f"by {by}")
    assert interruption() == ("Ctrl-C" if signum == signal.SIGINT else by)  # what failures' reasons name
    assert record["files"] == ["interrupted_sgd.csv"]
    assert (out / "interrupted_sgd.csv").read_text().startswith("seed,step,t,lam,kappa,nu,theta,eta,rho,risk\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(SIGHUP, marks=_NO_SIGHUP)], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_is_the_command_lines_only(signum):
    """SIGTERM and SIGHUP are handled only within the command line's block (a process of its own): a library call's
    computation leaves a program's handler as it was, and a signal the process ignores (`nohup`) stays ignored."""
    from flowsim._interrupt import ctrl_c_stops

    with _default_action(signum):
        _only_the_command_lines(signum, ctrl_c_stops)


def _only_the_command_lines(signum, ctrl_c_stops):
    before = signal.getsignal(signum)
    with ctrl_c_stops():
        assert signal.getsignal(signum) == before
    with ctrl_c_kept(terminate=True):
        assert signal.getsignal(signum) not in (before, signal.SIG_IGN)
        with ctrl_c_stops():
            assert signal.getsignal(signum) == signal.getsignal(signal.SIGINT)
    assert signal.getsignal(signum) == before
    signal.signal(signum, signal.SIG_IGN)
    try:
        with ctrl_c_kept(terminate=True), ctrl_c_stops():
            assert signal.getsignal(signum) == signal.SIG_IGN
    finally:
        signal.signal(signum, before)


def test_a_sigterm_handled_outside_python_is_left_to_it(monkeypatch):
    """A SIGTERM handler an embedding program installed in C (`getsignal` None, which `signal.signal` cannot put
    back): left in place, not replaced and then unrestorable at the block's end."""
    getsignal = signal.getsignal
    monkeypatch.setattr(signal, "getsignal", lambda signum: None if signum == signal.SIGTERM else getsignal(signum))
    installed = []
    monkeypatch.setattr(signal, "signal", lambda signum, handler: installed.append(signum) or signal.SIG_DFL)
    with ctrl_c_kept(terminate=True):
        pass
    assert signal.SIGTERM not in installed and signal.SIGINT in installed


def test_run_json_is_current_while_the_run_goes(tmp_path):
    record = results.RunRecord(tmp_path / "run", "flowsim test", {"n": 1}, seed=0, log=None)

    def read():
        return json.loads((tmp_path / "run" / "run.json").read_text())

    assert read()["status"] == "running" and read()["files"] == []
    record.write_csv("a.csv", {"x": [1.0]})
    with record.phase("solve"):
        pass
    assert read()["files"] == ["a.csv"] and "solve" in read()["durations_s"]["phases"]
    record.finish("interrupted", "stopped by the user")
    assert (read()["status"], read()["reason"]) == ("interrupted", "stopped by the user")


def test_a_windows_process_is_asked_of_its_kernel_not_signalled():
    """On Windows os.kill(pid, 0) ends the process: whether an earlier run still runs is asked of kernel32 there
    (OpenProcess, GetExitCodeProcess), here with a stand-in for it."""
    import ctypes

    class Kernel32:
        def __init__(self, exit_code=None, error=0):
            self.exit_code, self.error, self.closed = exit_code, error, []

        def OpenProcess(self, access, inherit, pid):
            return 0 if self.exit_code is None else 7

        def GetExitCodeProcess(self, handle, code):
            code._obj.value = self.exit_code
            return 1

        def CloseHandle(self, handle):
            self.closed.append(handle)

    def exists(kernel32):
        stand_in = types.SimpleNamespace(c_ulong=ctypes.c_ulong, byref=ctypes.byref)
        stand_in.get_last_error = lambda: kernel32.error
        return results._windows_process_exists(1234, kernel32, stand_in)

    running, ended = Kernel32(exit_code=259), Kernel32(exit_code=0)
    assert exists(running) and running.closed == [7]
    assert not exists(ended) and ended.closed == [7]
    assert not exists(Kernel32(error=87))  # ERROR_INVALID_PARAMETER: no such process
    assert exists(Kernel32(error=5))  # ERROR_ACCESS_DENIED: another user's


def test_a_resumed_run_reads_its_inputs_as_they_were(tmp_path):
    """A run's inputs (a researcher's map) are kept as their SHA-256: the same resume; a changed one, and one the
    earlier run did not record, are refused by name."""
    folder, digest, edited = tmp_path / "run", "2723be97048c" + "0" * 52, "65aa4a2fe7e7" + "0" * 52

    def run(inputs):
        return results.RunRecord(folder, "flowsim test", {"n": 1}, seed=0, log=None, resume=True, inputs=inputs)

    run({"maps.py": digest, "module": None}).finish("interrupted")
    assert json.loads((folder / "run.json").read_text())["inputs"] == {"maps.py": digest, "module": None}
    run({"maps.py": digest, "module": None}).finish("interrupted")
    with pytest.raises(InvalidInput, match=r"that run did not record the contents of other.py"):
        run({"maps.py": digest, "module": None, "other.py": digest})
    with pytest.raises(
        InvalidInput, match=r"maps.py has changed since \(SHA-256 2723be97048c\.\.\. then, 65aa4a2fe7e7"
    ):
        run({"maps.py": edited, "module": None})


def test_a_run_is_resumed_only_by_the_software_that_began_it(tmp_path, monkeypatch):
    """run.json keeps flowsim's source as its SHA-256 and the versions of the packages that compute: a resume by
    the same ones goes on; by an edited flowsim, another jax, or a flowsim that recorded no source, it is refused by
    name (the units read back would mix two codes' numbers)."""
    folder = tmp_path / "run"

    def run():
        return results.RunRecord(folder, "flowsim test", {"n": 1}, seed=0, log=None, resume=True)

    run().finish("interrupted")
    record = json.loads((folder / "run.json").read_text())
    assert record["environment"]["flowsim_source"] == results.flowsim_source() and len(results.flowsim_source()) == 64
    run().finish("interrupted")
    with monkeypatch.context() as patched:
        patched.setattr(results, "flowsim_source", lambda: "0123456789ab" + "0" * 52)
        with pytest.raises(
            InvalidInput,
            match=r"flowsim's source has changed since \(SHA-256 [0-9a-f]{12}\.\.\. then, 0123456789ab\.\.\. now\)",
        ):
            run()
    another_jax = {**record["environment"], "packages": {**record["environment"]["packages"], "jax": "0.0.1"}}
    no_source = {name: value for name, value in record["environment"].items() if name != "flowsim_source"}
    for environment, message in (
        (another_jax, r"the packages that compute it have changed \(jax 0\.0\.1 then, [0-9.]+ now\)"),
        (no_source, "that run did not record flowsim's source"),
    ):
        (folder / "run.json").write_text(json.dumps({**record, "environment": environment}))
        with pytest.raises(InvalidInput, match=message):
            run()


def test_the_installed_flowsim_has_the_checkouts_source(tmp_path):
    """A run begun by the `flowsim` executable (the installed package) and resumed from this checkout, or the other
    way round, finds one source digest: the install's modules are the checkout's (its derivations aside)."""
    command = [sys.executable, "-c", "from flowsim import results; print(results.flowsim_source())"]
    installed = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    stale = "the installed flowsim is not this checkout's: install it again (pip install .)"
    assert installed.returncode == 0, f"{stale}\n{installed.stderr}"
    assert installed.stdout.strip() == results.flowsim_source(), stale


def test_a_units_name_is_safe_in_every_file_system(tmp_path):
    """A unit is refused a name its file could not have everywhere (a space, a non-ASCII letter, a hidden file's dot);
    `unit_name` makes one of any text, and that name is taken."""
    record = results.RunRecord(tmp_path / "run", "flowsim test", {}, log=None)
    for name in ("capped softmax", "ε-softmax", ".hidden", "a/b", ""):
        with pytest.raises(InvalidInput, match="a unit's name must be ASCII letters, digits"):
            record.unit(name, lambda: 1.0)
    made = [results.unit_name(name) for name in ("capped softmax", "ε-softmax", ".hidden", "a/b")]
    assert made == ["capped_softmax", "_-softmax", "hidden", "a_b"]
    assert [record.unit(name, lambda: 1.0) for name in made] == [1.0] * 4


def test_a_replacement_that_cannot_delete_names_the_file(tmp_path, monkeypatch):
    """A file of the earlier run that the file system will not delete: invalid input naming it, not an internal
    error (nor the "cannot write results" of a folder that cannot be looked into)."""
    record = results.RunRecord(tmp_path, "flowsim flow", {}, log=None)
    for name in ("a.csv", "b.csv"):
        record.write_text(name, "x\n1\n")
    record.finish()

    def refused(path, missing_ok=False):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Path, "unlink", refused)
    with pytest.raises(ValueError, match=r"cannot replace the earlier run in .*: deleting .* failed \(Permission"):
        results.prepare_folder(tmp_path, replace=True)


def test_a_folder_never_mixes_two_runs(tmp_path, capsys):
    """A second run into a folder is refused; with --replace it deletes the first run, whose files
    (more of them: --basins) must not survive next to the second's."""
    out = tmp_path / "portrait"
    first = f"portrait --d 10 --L 4 --trajectories 0 --grid 5 --basins --basin-n 2 --basin-t-max 1 --out {out}"
    assert main(first.split()) == 0
    assert (out / "basins.csv").exists()
    second = f"portrait --d 10 --L 4 --trajectories 0 --grid 5 --seed 1 --out {out}"
    assert main(second.split()) == 2
    assert "holds an earlier run (flowsim portrait" in capsys.readouterr().err
    assert main([*second.split(), "--replace"]) == 0
    record = json.loads((out / "run.json").read_text())
    on_disk = sorted(path.relative_to(out).as_posix() for path in out.rglob("*") if path.name != "run.json")
    assert record["seed"] == 1 and sorted(record["files"]) == on_disk and "basins.csv" not in on_disk


def test_a_refused_run_leaves_no_folder(tmp_path, capsys):
    """Refused by the estimate before work: no folder is made, and nothing is left."""
    out = tmp_path / "new" / "refused"
    assert main(f"sgd --steps 1000000000000 --log-every 1 --seeds 1 --out {out}".split()) == 2
    assert "this run would need about" in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_a_memory_estimate_uses_the_devices_or_the_hosts_memory():
    free, source = _memory.available_bytes()
    assert 0 < free < 2**50 and source
    assert _memory.format_bytes(3 * 2**30) == "3 GiB" and _memory.format_bytes(512) == "512 B"
    shapes = jax.eval_shape(lambda key: TASK.sgd_noise(key, 4), jax.random.key(0))
    assert _memory.tree_bytes(shapes) == 9 * 8


def test_the_hosts_memory_without_linuxs_account(monkeypatch):
    """Without /proc/meminfo: the free pages, else the installed memory (macOS has no count of free pages), else
    (Windows, no sysconf) unknown, which refuses nothing: a missing account is not an internal error."""
    monkeypatch.setattr(_memory, "_MEMINFO", "/nonexistent/meminfo")
    free, source = _memory.available_bytes()
    assert (free, source) == (os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "free on this machine")
    monkeypatch.setattr(os, "sysconf_names", {k: v for k, v in os.sysconf_names.items() if k != "SC_AVPHYS_PAGES"})
    free, source = _memory.available_bytes()
    assert (free, source) == (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "installed on this machine")
    monkeypatch.delattr(os, "sysconf_names")
    assert _memory.available_bytes() == (None, "unknown: this system does not report it")
    _memory.check_fits("run_sgd", [_memory.Need("the states", 2**80, "fewer seeds")])  # refuses nothing


#: Interrupted, resumed and uninterrupted in this process: name: (arguments, the tables to compare, units of the
#: whole run). Two experiments of one kind (one compiled map and flow serve both). `flowsim advantage` beside its
#: fixture's run, whose compiled programs it reuses: tests/test_advantage.py. The installed executable, its device
#: split and a SIGINT from outside: tests/test_default_devices.py.
RESUMED = {
    "reproduce": (
        "reproduce --quick --seeds 2 --only sphere_small_lambda sphere_schedule",
        ("summary.csv", "attractors.csv", "trajectories.csv"),
        2,
    ),
}


def _ctrl_c_in_a_gc_callback() -> None:
    """A real SIGINT whose KeyboardInterrupt is raised inside a garbage collector's callback, where Python drops it."""

    def interrupting(phase, info):
        gc.callbacks.remove(interrupting)  # once
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at once: inside this callback

    gc.callbacks.append(interrupting)
    try:
        gc.collect()
    finally:
        if interrupting in gc.callbacks:
            gc.callbacks.remove(interrupting)


def test_a_ctrl_c_dropped_in_a_gc_callback_is_raised_again_at_once():
    """Python drops an exception raised in a garbage collector's callback ("Exception ignored in": JAX registers
    one), so a Ctrl-C whose KeyboardInterrupt landed there was lost (a full-suite run finished an interrupted sweep
    with exit 0), and then honoured only before the run's next unit or computation (a SIGTERM took 2.4 s to end
    `flowsim flow` while the starts' eager operations compiled). Within the command line's `ctrl_c_kept` the signal is
    delivered again: its KeyboardInterrupt comes within milliseconds (`REDELIVERY_SECONDS`), in the work that follows.
    Nor is the dropped KeyboardInterrupt reported as "Exception ignored" with a traceback (CI saw one in an interrupted
    sweep's stderr); another exception dropped there still is."""
    reported = []  # what reaches the hook that prints "Exception ignored in ..."
    hook, sys.unraisablehook = sys.unraisablehook, lambda report: reported.append(report.exc_type)
    try:
        with default_ctrl_c(), ctrl_c_kept():
            collected = []  # when the collection ended (a full one takes a second in a long test process)
            with pytest.raises(KeyboardInterrupt):
                _ctrl_c_in_a_gc_callback()
                collected.append(time.monotonic())
                while time.monotonic() - collected[0] < 2.0:  # Python's work after the collection: 2 s unless stopped
                    pass
            waited = time.monotonic() - collected[0] if collected else 0.0
            error = ValueError("not a Ctrl-C")
            sys.unraisablehook(types.SimpleNamespace(exc_type=ValueError, exc_value=error, exc_traceback=None))
    finally:
        sys.unraisablehook = hook
    assert waited < 0.5, waited  # 0.01 s here alone
    assert reported == [ValueError]


def test_a_ctrl_c_dropped_and_not_yet_delivered_again_stops_the_next_unit(tmp_path, monkeypatch):
    """Until it is delivered again (`REDELIVERY_SECONDS`, postponed here past the test), the dropped Ctrl-C is pending:
    the run's next unit of work raises it instead of starting (`raise_if_ctrl_c`)."""
    monkeypatch.setattr(_interrupt, "REDELIVERY_SECONDS", 5.0)  # after the block: nothing is delivered then
    record = RunRecord(tmp_path / "run", "test", {}, seed=0)
    with default_ctrl_c(), ctrl_c_kept():
        _ctrl_c_in_a_gc_callback()
        with pytest.raises(KeyboardInterrupt):
            record.unit("next", lambda: 1.0)
    assert record.units == []


@pytest.mark.parametrize("name", RESUMED)
def test_an_interrupted_command_resumes_to_the_uninterrupted_tables(name, tmp_path, capsys, monkeypatch):
    """A real SIGINT to this process as the first unit of work is stored, then --resume
    (`tests.shared.interrupted_then_resumed`): the tables of an uninterrupted run, byte for byte. The interrupted
    run goes first: the later ones reuse its compiled programs."""
    arguments, tables, units = RESUMED[name]
    resumed = tmp_path / "resumed"
    interrupted_then_resumed(arguments, resumed, capsys, monkeypatch, units)
    assert main([*arguments.split(), "--out", str(tmp_path / "whole")]) == 0
    for table in tables:
        assert (resumed / table).read_bytes() == (tmp_path / "whole" / table).read_bytes(), table
    # Every file the interrupted and the resumed runs wrote is listed: the folder is replaced whole, not refused.
    results.prepare_folder(resumed, replace=True)
    assert list(resumed.iterdir()) == []
