"""Ctrl-C during a compiled computation: honoured at the computation's next check, nothing computed lost.

A compiled solve or SGD scan runs in XLA, where Python's KeyboardInterrupt cannot reach it: it
would take effect only when the whole computation ends. So, within `ctrl_c_stops`, Ctrl-C only
sets a flag, and the computation runs in a worker thread while the main thread waits in short
slices (so that the handler runs at once). A computation is cut into compiled segments and the host
reads the flag between them (`stopped`): an SGD run every thousand steps or so, a solve every few
percent of its time span. Either stops there with the states it reached, and the caller raises `Interrupted`, which
carries that partial result. A second Ctrl-C raises KeyboardInterrupt at once.

The `flowsim` executable (`ctrl_c_kept(terminate=True)`, in a process of its own) treats SIGTERM, what a batch
scheduler sends at a job's time limit and `kill` by default, and SIGHUP, what a closed terminal or a dropped SSH
session sends, as it treats Ctrl-C: the run stops within a second or so and keeps what it computed, where their
default action would end the process at once (`TERMINATING`).
"""

import _thread
import concurrent.futures
import contextlib
import contextvars
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator

import jax
from jax._src import config as _jax_config  # JAX's per-thread settings (`THREAD_SETTINGS`)

from flowsim._startup import TERMINATING

__all__ = [
    "TERMINATING",
    "Interrupted",
    "checking",
    "checking_enabled",
    "ctrl_c_kept",
    "ctrl_c_stops",
    "interruption",
    "raise_if_ctrl_c",
    "run_interruptibly",
    "stopped",
]

_STOP = threading.Event()
#: Set once a computation has reported the Ctrl-C (`run_interruptibly` returned interrupted), whose caller then
#: raises `Interrupted` with what it computed; a Ctrl-C left unreported is raised by `ctrl_c_stops` itself.
_REPORTED = threading.Event()
#: Set by `ctrl_c_kept`'s handler: a Ctrl-C whose KeyboardInterrupt may have been dropped (raised inside a garbage
#: collector's callback, which Python reports as "Exception ignored" and drops: JAX registers one); raised again
#: milliseconds later (`_REDELIVERING`), and by `raise_if_ctrl_c` while it is still pending.
_PENDING = threading.Event()
#: Set while a dropped KeyboardInterrupt is delivered again: the handler raises it, a repeated SIGTERM or not.
_REDELIVERING = threading.Event()
#: The signals that stop a computation: SIGINT (Ctrl-C), and `TERMINATING` within the command line's `ctrl_c_kept`.
_SIGNALS = contextvars.ContextVar("flowsim_stop_signals", default=(signal.SIGINT,))
#: The last of them received (SIGINT until one is): what `interruption` names.
_RECEIVED = [signal.SIGINT]
#: Whether solves are interruptible by default (`checking`): SGD scans always are, at no measurable
#: cost, but a solve cut into segments takes a few percent longer (BENCHMARKS.md).
_CHECKING = contextvars.ContextVar("flowsim_checking", default=False)


@contextlib.contextmanager
def checking(enabled: bool = True) -> Iterator[None]:
    """Within this block, solves are interruptible (in segments) unless told otherwise (the command line)."""
    token = _CHECKING.set(enabled)
    try:
        yield
    finally:
        _CHECKING.reset(token)


def checking_enabled() -> bool:
    """Whether solves are interruptible by default here (see `checking`)."""
    return _CHECKING.get()


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a computation: `result` holds what it computed until then (a `Trajectories` or an
    `SGDRun` whose status is INTERRUPTED where it was cut), `task` the task it ran (None if unknown)."""

    def __init__(self, result, where: str):
        super().__init__(f"interrupted {where}")
        self.result = result
        self.task = getattr(result, "task", None)


def interruption() -> str:
    """What stopped the last interrupted computation: "Ctrl-C" (SIGINT), or the name of a `TERMINATING` signal."""
    return "Ctrl-C" if _RECEIVED[0] == signal.SIGINT else signal.Signals(_RECEIVED[0]).name


@contextlib.contextmanager
def _handling(signals, handler) -> Iterator[None]:
    """Within: `handler` for each of `signals`. A signal other than SIGINT that its process ignores (SIG_IGN, as
    `nohup` makes SIGHUP) stays ignored, and one handled outside Python (`getsignal` None: an embedding program's,
    which could not be put back) stays its own."""
    previous = {}
    for signum in signals:
        if signum != signal.SIGINT and signal.getsignal(signum) in (signal.SIG_IGN, None):
            continue
        previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, handler_before in previous.items():
            signal.signal(signum, handler_before)


#: How long the main thread has to take a signal up in `ctrl_c_kept(on_unheard=...)`: Python runs a handler between
#: two of its instructions, so not while the main thread waits in compiled code (an XLA compilation, a computation
#: not run by `run_interruptibly`), which can last seconds or minutes.
UNHEARD_SECONDS = 1.0
#: Set by the handlers of `ctrl_c_kept` and `ctrl_c_stops` as they run: a signal taken up by the main thread.
_HEARD = threading.Event()


@contextlib.contextmanager
def _unheard(signals, on_unheard) -> Iterator[None]:
    """Within (in the main thread): a thread learns of each of `signals` at once (Python's wakeup descriptor, written
    as the signal arrives, whatever the main thread does) and, if no handler has taken it up `UNHEARD_SECONDS` later,
    calls `on_unheard(signum)`, which must end the process."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    done = threading.Event()

    def watch():
        while not done.is_set():
            if not select.select([reader], [], [], 0.2)[0]:
                continue
            received = [signum for signum in reader.recv(64) if signum in signals]
            if received and not _HEARD.wait(UNHEARD_SECONDS) and not done.is_set():
                _RECEIVED[0] = received[0]
                on_unheard(received[0])
            _HEARD.clear()

    _HEARD.clear()
    watcher = threading.Thread(target=watch, name="flowsim-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        watcher.join()
        reader.close()
        writer.close()


@contextlib.contextmanager
def ctrl_c_kept(terminate: bool = False, on_unheard=None) -> Iterator[None]:
    """Within (a command's run, in the main thread): Ctrl-C raises KeyboardInterrupt as usual and is also
    remembered, so that one raised where Python drops exceptions (a garbage collector's callback) is not lost: the
    signal is delivered again `REDELIVERY_SECONDS` later, and `raise_if_ctrl_c` (before each unit of work of a run)
    raises one still pending. (Raised only there, a SIGTERM took seconds while eager operations compiled.)

    The KeyboardInterrupt Python drops is not printed either ("Exception ignored in ... Traceback"): it is not lost,
    and a user who pressed Ctrl-C should read that the run stopped, not a traceback. Other dropped exceptions are
    reported as before.

    **Arguments:**

    - `terminate`: whether the `TERMINATING` signals are handled as Ctrl-C within, by this block and the
      computations' `ctrl_c_stops` (the `flowsim` executable, which owns its process; a program calling flowsim
      keeps its own).
    - `on_unheard`: if given, called with the signal's number, from another thread, where the main thread has not
      taken a signal up within `UNHEARD_SECONDS` (it waits in compiled code): it must end the process (the
      executable's, which keeps what it had computed and ends), which would otherwise stop only when that code
      returns.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _HEARD.set()
        redelivered = _REDELIVERING.is_set()
        _REDELIVERING.clear()
        if signum != signal.SIGINT and _RECEIVED[0] != signal.SIGINT and not redelivered:
            return  # a repeated SIGTERM or SIGHUP (a hangup can send two): the run is stopping, writing what it had
        _RECEIVED[0] = signum
        _PENDING.set()
        signal.default_int_handler(signum, frame)

    previous_hook = sys.unraisablehook

    def unraisable(report):
        if not (isinstance(report.exc_value, KeyboardInterrupt) and _PENDING.is_set()):
            previous_hook(report)
        elif threading.current_thread() is threading.main_thread():
            # Dropped: the signal is delivered again, so that its handler raises once the main thread has left the
            # callback. Not from here, nor from a thread this hook waits for: its handler would run, and its
            # KeyboardInterrupt be dropped, in this hook. One dropped again is delivered again.
            _REDELIVERING.set()
            _thread.start_new_thread(_deliver_again, (_RECEIVED[0],))

    _PENDING.clear()
    _REDELIVERING.clear()
    _RECEIVED[0] = signal.SIGINT
    signals = (signal.SIGINT, *TERMINATING) if terminate else (signal.SIGINT,)
    token = _SIGNALS.set(signals)
    sys.unraisablehook = unraisable
    try:
        with _handling(signals, handler), _unheard(signals, on_unheard) if on_unheard else contextlib.nullcontext():
            yield
    finally:
        sys.unraisablehook = previous_hook
        _SIGNALS.reset(token)
        _PENDING.clear()
        _REDELIVERING.clear()


#: How long `ctrl_c_kept` waits before delivering again a signal whose KeyboardInterrupt was dropped: time for the
#: main thread to leave the garbage collector's callback it was raised in (microseconds), and nothing to a user.
REDELIVERY_SECONDS = 0.01


def _deliver_again(signum: int) -> None:
    """In a thread of its own: `signum` to the main thread's handler again, `REDELIVERY_SECONDS` from now, unless a
    handler took a signal up meanwhile or `ctrl_c_kept`'s block has ended (a program's own handler would get it)."""
    time.sleep(REDELIVERY_SECONDS)
    if _REDELIVERING.is_set():
        _thread.interrupt_main(signum)


def raise_if_ctrl_c() -> None:
    """KeyboardInterrupt if `ctrl_c_kept` saw a Ctrl-C since it began (one whose KeyboardInterrupt was dropped)."""
    if _PENDING.is_set():
        _PENDING.clear()
        raise KeyboardInterrupt


def ctrl_c_in(error: BaseException) -> bool:
    """Whether `error`, an exception other than KeyboardInterrupt, is a Ctrl-C that a library turned into another:
    one is pending (`ctrl_c_kept` saw it and raised its KeyboardInterrupt) or a KeyboardInterrupt is among its causes.

    Python raises a KeyboardInterrupt wherever the main thread is, also inside a library's own checks: JAX's cache of
    compiled programs compares the static fields of its arguments in C++, and an exception raised there (a Ctrl-C
    while it compares) comes out as a ValueError about "equality of metadata fields of pytree".
    """
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return _PENDING.is_set()


@contextlib.contextmanager
def ctrl_c_stops() -> Iterator[None]:
    """Within: Ctrl-C asks the running computation to stop (the flag `stopped` reads) instead of
    raising KeyboardInterrupt wherever Python happens to be; a second Ctrl-C raises it at once.

    In the main thread only (where Python runs signal handlers); elsewhere Ctrl-C is left as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _HEARD.set()
        _REDELIVERING.clear()  # a dropped KeyboardInterrupt delivered again (`ctrl_c_kept`) is this stop
        if _STOP.is_set():
            if signum == signal.SIGINT:
                signal.default_int_handler(signum, frame)  # the second Ctrl-C: KeyboardInterrupt
            return  # a repeated SIGTERM or SIGHUP (a hangup can send two): the first one's stop goes on
        _RECEIVED[0] = signum
        _STOP.set()

    # A Ctrl-C that `ctrl_c_kept` saw dropped (in a garbage collector's callback) since the last look is honoured
    # before the computation starts: it would otherwise be lost where no unit of work follows (`raise_if_ctrl_c`).
    raise_if_ctrl_c()
    _STOP.clear()
    _REPORTED.clear()
    # Abandoned (a second Ctrl-C, an error), the block leaves the flag set, so that a computation still
    # running in a worker thread stops at its next check instead of holding up the exit.
    with _handling(_SIGNALS.get(), handler):
        yield
    unreported = _STOP.is_set() and not _REPORTED.is_set()
    _STOP.clear()
    _REPORTED.clear()
    if unreported:
        # Ctrl-C came when no computation could report it (between two, or after the last one's check):
        # it is honoured here, once the work of the block is complete, instead of being lost.
        raise KeyboardInterrupt


def stopped() -> bool:
    """Whether Ctrl-C asked the computation to stop (within `ctrl_c_stops`)."""
    return _STOP.is_set()


#: JAX's settings a caller makes for its thread (`with jax.default_device(...)`, `jax.numpy_dtype_promotion(...)`,
#: `jax.disable_jit()`, ...) that a computation run in a worker thread takes as its own. A list, not every setting:
#: some are not the thread's alone (`jax.thread_guard` sets one owner thread for the process).
THREAD_SETTINGS = (
    "jax_default_device",
    "jax_numpy_dtype_promotion",
    "jax_numpy_rank_promotion",
    "jax_disable_jit",
    "jax_default_matmul_precision",
    "jax_debug_nans",
    "jax_debug_infs",
)


def _as_called_here(function):
    """`function`, to be called in another thread as if in this one: with this thread's context variables and its
    `THREAD_SETTINGS`, which JAX keeps per thread, so that a worker thread would not see them."""
    context = contextvars.copy_context()
    settings = [(setting, setting.get_local()) for setting in _thread_settings()]
    settings = [(setting, value) for setting, value in settings if value is not _jax_config.config_ext.unset]

    def as_called(*args):
        with contextlib.ExitStack() as stack:
            for setting, value in settings:
                stack.enter_context(_set_here(setting, value))
            return context.run(function, *args)

    return as_called


def _thread_settings() -> list:
    """JAX's objects for `THREAD_SETTINGS`, those this JAX has (none where its private config API differs)."""
    if not hasattr(getattr(_jax_config, "config_ext", None), "unset"):
        return []
    states = getattr(_jax_config, "config_states", {})
    found = [states[name] for name in THREAD_SETTINGS if name in states]
    return [state for state in found if all(hasattr(state, name) for name in ("get_local", "swap_local", "set_local"))]


@contextlib.contextmanager
def _set_here(setting, value) -> Iterator[None]:
    """`setting` at `value` in this thread, as JAX's own context managers set it (their hooks included)."""
    hook = getattr(setting, "_update_thread_local_hook", None)
    previous = setting.swap_local(value)
    if hook:
        hook(value)
    try:
        yield
    finally:
        setting.set_local(previous)
        if hook:
            hook(None if previous is _jax_config.config_ext.unset else previous)


def run_interruptibly(function, *args, patience: float | None = None):
    """Run `function(*args)` to completion (its outputs ready) in a worker thread, within `ctrl_c_stops`.

    The main thread waits in short slices, so that Python runs the Ctrl-C handler at once and the
    computation sees the flag at its next check (`stopped`, between two of its compiled segments).

    **Arguments:** `patience`, if given: how many seconds after Ctrl-C the computation may take to end; one still
    running then (compiling its program, which nothing interrupts, for seconds or minutes) is abandoned, its outputs
    None. For a computation whose caller keeps what came before it (a solve's call), not one that holds its own
    partial results (an SGD run's segments).

    **Returns:** (outputs, interrupted): whether Ctrl-C asked the computation to stop early.
    """
    # Not `with`: leaving the pool's block would wait for a computation abandoned by a second Ctrl-C.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="flowsim")
    try:
        computation = _as_called_here(function)
        future = pool.submit(lambda: jax.block_until_ready(computation(*args)))
        asked = None  # when the computation was first seen asked to stop
        while True:
            try:
                outputs = future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if patience is not None and _STOP.is_set():
                    asked = time.monotonic() if asked is None else asked
                    if time.monotonic() - asked > patience:
                        _REPORTED.set()  # the caller raises `Interrupted` with what it had before
                        return None, True
                continue
            interrupted = stopped()
            if interrupted:
                _REPORTED.set()  # the caller raises `Interrupted` with these outputs
            return outputs, interrupted
    finally:
        pool.shutdown(wait=False)
