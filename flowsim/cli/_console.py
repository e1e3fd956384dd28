"""The executable's standard streams: what it prints never ends a run that is computing or writing its files.

Three things would otherwise turn a successful run into an internal error, its later files unwritten:
- a standard stream the process was started without (`flowsim ... 2>&-`, a daemon's start): Python leaves
  sys.stderr None, and the next file opened takes its descriptor, so that what C code writes to stderr (XLA's
  logging) would land in a results file. os.devnull is opened there, as daemons do;
- a character the console's encoding lacks (a folder named "résultats", a "±", on an ASCII console such as
  PYTHONIOENCODING=ascii): it is printed as a Python escape ("\\xe9");
- a reader that went away: `flowsim verify | head` closes the pipe after ten lines; the terminal of a run that
  outlives it (`disown`, so that no SIGHUP ends the run) hangs up. The rest of the printing then goes to
  os.devnull, and the run goes on to its end (its exit status is the run's own); its files hold every result.
"""

import errno
import io
import os
import sys

__all__ = ["keep_printing_harmless"]

#: The errors of a write whose reader is gone: a closed pipe, a terminal that hung up; on Windows a closed pipe is
#: EINVAL with one of these Windows errors (ERROR_BROKEN_PIPE, ERROR_NO_DATA).
_READER_GONE = (errno.EPIPE, errno.EIO)
_WINDOWS_READER_GONE = (109, 232)


class _Stream:
    """A text stream that writes into `stream` until its reader goes, then into os.devnull (the same file descriptor,
    so that the interpreter's own flush at exit succeeds too). Everything else (isatty, encoding, fileno) is the
    stream's own: not an io.TextIOBase, whose defaults (isatty() False) would hide them."""

    def __init__(self, stream: io.TextIOWrapper):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guarded(self._stream.write, text) or len(text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def _guarded(self, operation, *arguments):
        try:
            return operation(*arguments)
        except OSError as error:
            if error.errno not in _READER_GONE and getattr(error, "winerror", None) not in _WINDOWS_READER_GONE:
                raise
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
            return None

    def __getattr__(self, name: str):  # encoding, fileno, isatty, ...: the stream's own
        return getattr(self._stream, name)


def _open_missing_streams() -> None:
    """os.devnull on each of the descriptors 0, 1, 2 that is closed, and as its sys stream where that is None."""
    for descriptor, name, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY), (2, "stderr", os.O_WRONLY)):
        try:
            os.fstat(descriptor)
        except OSError:  # closed: the lowest free descriptor, which os.open takes, is this one (the lower are open)
            opened = os.open(os.devnull, flags)
            if opened != descriptor:
                os.dup2(opened, descriptor)
                os.close(opened)
            os.set_inheritable(descriptor, True)  # a standard stream, for child processes too
        if getattr(sys, name) is None:
            mode = "r" if descriptor == 0 else "w"
            setattr(sys, name, open(descriptor, mode, encoding="utf-8", errors="backslashreplace", closefd=False))


def keep_printing_harmless() -> None:
    """Give the process its three standard streams, make sys.stdout and sys.stderr escape what their encoding lacks
    and outlive their readers (see the module).

    For the `flowsim` executable only, which owns its process; a program calling `flowsim.cli.main` keeps its streams.
    """
    _open_missing_streams()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, io.TextIOWrapper):  # None (a closed descriptor), or already replaced by a caller
            continue
        if stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
        setattr(sys, name, _Stream(stream))
