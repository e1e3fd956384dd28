"""The `flowsim` executable's first second: a signal while Python imports flowsim, JAX and the commands ends the
process at once, with one line on stderr and the exit status of a stopped run (130 for Ctrl-C, 128 + the signal's
number for SIGTERM and SIGHUP).

Without it, a Ctrl-C then is Python's KeyboardInterrupt raised wherever the imports are: a traceback from inside
them, or, raised in a garbage collector's callback (JAX registers one), dropped with "Exception ignored", and the
run goes on as if nothing had been pressed. Nothing has been computed or written yet (the run folder is made by
the command), so there is nothing to keep: the process ends without tearing the interpreter down.

`flowsim/__init__.py` imports this module first, before JAX, so it holds only the standard library. It acts only in
the executable's process (the `flowsim` script, `python -m flowsim`, `python -m flowsim.cli`), never in a program
that imports flowsim: that program keeps its own handling. Once the command starts, `flowsim._interrupt.ctrl_c_kept`
takes the signals over (a stop then keeps what was computed, and run.json says so); once it has ended,
`command_ended` lets the process end with the command's own status.
"""

import os
import signal
import sys

__all__ = ["TERMINATING", "command_ended", "is_executable"]

#: The signals that end a process by default and that the executable handles as Ctrl-C (where the platform has them):
#: SIGTERM, what a batch scheduler sends at a job's time limit and `kill` by default, and SIGHUP, what a closed
#: terminal or a dropped SSH session sends.
TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
#: The names under which the executable runs: the console script (as pip writes it on each platform), and the
#: modules `python -m` runs.
_SCRIPTS = ("flowsim", "flowsim.exe", "flowsim-script.py")
_MODULES = ("flowsim", "flowsim.cli")


def is_executable() -> bool:
    """Whether this process is the `flowsim` executable's (the console script, or `python -m flowsim[.cli]`)."""
    if os.path.basename(sys.argv[0]) in _SCRIPTS:
        return True
    # `python -m`: while the module's package is imported, sys.argv[0] is "-m"; the module is in the command line.
    argv = getattr(sys, "orig_argv", [])
    return sys.argv[0] == "-m" and "-m" in argv[:-1] and argv[argv.index("-m") + 1] in _MODULES


def _stop(signum, frame) -> None:
    by = "the user (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name
    try:
        sys.stderr.write(f"flowsim: interrupted by {by} while starting: nothing was run\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed or gone: the status still says it
        pass
    os._exit(130 if signum == signal.SIGINT else 128 + signum)


def _install() -> None:
    """`_stop` for SIGINT and `TERMINATING`, where each still has Python's default handling: a signal its process
    ignores (SIG_IGN, as `nohup` makes SIGHUP, or a shell SIGINT for a background job) stays ignored."""
    for signum in (signal.SIGINT, *TERMINATING):
        default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        if signal.getsignal(signum) is default:
            signal.signal(signum, _stop)


def command_ended() -> None:
    """The command has returned its status (every file written and closed): a signal from now on, while the process
    ends, is ignored instead of ending it with the status of a stopped run."""
    for signum in (signal.SIGINT, *TERMINATING):
        if signal.getsignal(signum) is _stop:
            signal.signal(signum, signal.SIG_IGN)


if is_executable():
    _install()
