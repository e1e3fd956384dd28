"""What several test files share: one definition each, so that they also share compiled programs."""

import contextlib
import json
import logging
import os
import signal
import sys

import jax
import jax.numpy as jnp
import pytest

from flowsim import slr

#: A researcher's own map, made here with the public API only: softmax capped at C = e,
#: w_l = min(e^{x_l}, C) / sum_j min(e^{x_j}, C), given by its log (min(x, 1)) so that large scores do not overflow.
CAPPED = slr.AttentionMap("capped softmax", log_f=lambda x: jnp.minimum(x, 1.0), normalisation="tokens")


def command_in_this_process(monkeypatch) -> int:
    """`flowsim.cli.command()`, the executable's entry, run in this process, and what it changes of the process for
    the executable put back after the test: the standard streams it wraps, MPLBACKEND (Agg), JAX's promotion rules.
    A MPLBACKEND left behind reached the notebooks' kernels started later by this worker, and drew their figures
    on Agg, into no output (a fresh venv's suite, 2026-12-06).

    **Returns:** the exit status."""
    from flowsim.cli import command

    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    monkeypatch.setenv("MPLBACKEND", "agg")  # what `command` sets: removed after
    promotion = {name: getattr(jax.config, name) for name in ("jax_numpy_dtype_promotion", "jax_numpy_rank_promotion")}
    try:
        return command()
    finally:
        for name, value in promotion.items():
            jax.config.update(name, value)


@contextlib.contextmanager
def default_ctrl_c():
    """Within: SIGINT as a user's shell gives it (Python's default handler here, the default action in a child
    process), whatever the test process had: the Ctrl-C tests send real SIGINTs and must not depend on what an
    earlier test or the worker left. (The losses seen in full-suite runs had another cause, a KeyboardInterrupt
    dropped in JAX's gc callback, which the command line now handles: `flowsim._interrupt.ctrl_c_kept`.)"""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # A blocked SIGINT would stay pending (and a child inherits the mask): unblocked in this thread, as in a shell.
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def compiles_nothing(caplog):
    """Within: JAX logs its compilations; after: asserts that the block compiled no XLA program (every program it
    ran was compiled before). `caplog`: the test's pytest fixture."""
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        yield
    assert [record.getMessage() for record in caplog.records if "compil" in record.getMessage()] == []


def check_command_line(parser, arguments: list[str], where: str, capsys) -> None:
    """`flowsim ARGUMENTS` parsed by `parser` (`flowsim.cli._parser()`) and checked as the executable does before any
    work (`flowsim.commands.options.check`); a refusal, or an option the command lacks, fails the test naming
    `where` (a documentation page and its line)."""
    from flowsim.commands.options import check

    try:
        args, unknown = parser.parse_known_args(arguments)
    except SystemExit:
        pytest.fail(f"{where} is refused: {capsys.readouterr().err.strip()}")
    assert not unknown, f"{where}: its command has no {' '.join(unknown)}"
    check(args)


def interrupted_then_resumed(arguments: str, out, capsys, monkeypatch, units: int) -> None:
    """`flowsim ARGUMENTS --out OUT` in this process, stopped by a real SIGINT as its first unit of work is stored:
    exit 130, run.json "interrupted" with that unit kept; then with --resume: exit 0, the unit read back, and the
    run.json of a whole run of `units` units. Comparing its tables with an uninterrupted run's is the caller's."""
    from flowsim.cli import main
    from flowsim.results import RunRecord

    store = RunRecord.unit

    def unit_then_ctrl_c(record, unit, compute):
        value = store(record, unit, compute)
        if len(record.units) == 1 and record.resumed is None:
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs at once, in this (the main) thread
        return value

    with monkeypatch.context() as patched:
        patched.setattr(RunRecord, "unit", unit_then_ctrl_c)
        with default_ctrl_c():
            assert main([*arguments.split(), "--out", str(out)]) == 130
        assert "--resume" in capsys.readouterr().err
        record = json.loads((out / "run.json").read_text())
        assert record["status"] == "interrupted" and len(record["units"]) == 1
        assert main([*arguments.split(), "--out", str(out), "--resume"]) == 0
    assert "1 finished units read back" in capsys.readouterr().err
    record = json.loads((out / "run.json").read_text())
    assert record["status"] == "ok" and record["resumed_units"] == 1 and len(record["units"]) == units
