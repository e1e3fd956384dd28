"""The `flowsim` command line, generic over the registered tasks (`flowsim.tasks.TASKS`).

Each task package declares its commands in its `cli` module (`COMMANDS`, a tuple of `Command`, and
`DESCRIPTION`): they are reached as `flowsim TASK COMMAND`, and the first task's also as
`flowsim COMMAND`. `flowsim derive` regenerates every task's equations.

Every computing command writes into its --out folder: the numbers as tidy CSV tables, figures as
PNG and PDF, and run.json (parameters, seed, versions, timings, files, status); docs/results.md
describes every file. Exit status: 0 when the run succeeded; 1 on a numerical failure (the
results computed until then are written, run.json says where it happened) or when `verify`'s
claim fails; 2 on invalid input (one line on stderr, nothing computed); 3 on an internal error of
flowsim (a bug: the traceback is printed, the files written so far are kept); 130 on Ctrl-C (the
finished work is kept, and `--resume` continues a long command from it); 143 on SIGTERM and 129 on SIGHUP (a closed
terminal), which stop a run as Ctrl-C does.

Option values are checked before anything is compiled; JAX, matplotlib and SymPy work happens
inside the commands.
"""

import argparse
import contextlib
import difflib
import errno
import functools
import importlib
import os
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from flowsim._checks import InvalidInput
from flowsim._interrupt import checking, ctrl_c_in, ctrl_c_kept, interruption
from flowsim._memory import announcing, long_runs_allowed
from flowsim._startup import command_ended
from flowsim.cli._console import keep_printing_harmless
from flowsim.commands import parts
from flowsim.commands.options import Command, Parser, check, choose_folder, output_options
from flowsim.results import NotWritten
from flowsim.tasks import TASKS

__all__ = ["command", "executable", "main"]


def _derive(args) -> int:
    import tempfile

    import flowsim

    installed = Path(flowsim.__file__).resolve().parent
    if (Path(args.out) / "flowsim").resolve() == installed:
        raise InvalidInput(
            f"--out {args.out} would overwrite the installed package's {installed}: give another folder "
            "(`python -m derivations` regenerates a checkout)"
        )
    record = parts.record(args)
    from flowsim.derivations.build import generate

    with record.phase("derive", "SymPy derives every task's risk, flow, Jacobians and maps (about 10 s)"):
        # generate() writes in place: into a scratch folder first, then each file atomically into --out.
        with tempfile.TemporaryDirectory(dir=record.folder, prefix=".derive-") as scratch:
            for path in generate(Path(scratch)):
                record.write_text(path.relative_to(scratch).as_posix(), path.read_text(encoding="utf-8"))
    checkout = installed.parent
    same = {}
    for name in record.files:
        reference = checkout / name
        written = (record.folder / name).read_text(encoding="utf-8")
        same[name] = reference.read_text(encoding="utf-8") == written if reference.exists() else None
    record.summary["same_as_installed"] = same
    for name in record.files:
        if name.endswith(".md"):
            print(_equation_listing((record.folder / name).read_text(encoding="utf-8")))
            print()
    for name, equal in same.items():
        verdict = {True: "identical to", False: "DIFFERS from", None: "no counterpart at"}[equal]
        print(f"{name}: {verdict} {checkout / name}")
    return parts.finish(record)


def _equation_listing(markdown: str, width: int = 160) -> str:
    """The headings and equations of equations.md; equations longer than `width` characters are cut."""
    lines, in_equation = [], False
    for line in markdown.splitlines():
        if line == "$$":
            in_equation = not in_equation
        elif in_equation:
            lines.append(f"    {line if len(line) <= width else f'{line[:width]} ... ({len(line)} characters)'}")
        elif line.startswith("#") or (line.startswith("**") and line.endswith("**")):
            lines.append(line.strip("*"))
    return "\n".join(lines)


def _derive_options(parser) -> None:
    output_options(parser, "derive", seed=None)


#: The commands that belong to no task.
GENERIC = (
    Command(
        "derive",
        "derive every equation with SymPy (about 10 s) into --out, print them and compare them with the "
        "installed package's",
        _derive,
        _derive_options,
    ),
)


def _add_commands(commands, listed, parsers: dict, prefix: str = "") -> None:
    for command in listed:
        parser = parsers[prefix + command.name] = commands.add_parser(
            command.name,
            help=command.help,
            description=command.help,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        parser.set_defaults(run=command.run, checks={})
        command.add_options(parser)


def _task_cli(name: str):
    """The `cli` module of a registered task: its `COMMANDS` and `DESCRIPTION`."""
    return importlib.import_module(f"{TASKS[name].__name__}.cli")


def _parser() -> argparse.ArgumentParser:
    default = next(iter(TASKS))
    parser = Parser(
        prog="flowsim",
        description="Training dynamics of simplified attention layers. Commands without a task name run "
        f"the first task ({default}: {_task_cli(default).DESCRIPTION}); `flowsim TASK --help` lists a task's.",
        epilog="Exit status: 0 ok, 1 numerical failure (results kept) or a failed claim, 2 invalid input, "
        "3 an internal error of flowsim (results kept; please report it), 130 interrupted (results kept), 143 "
        "stopped by SIGTERM, 129 by SIGHUP (results kept). "
        "Compiled programs are kept between runs in ~/.cache/flowsim/jax (JAX_COMPILATION_CACHE_DIR: another "
        "folder; FLOWSIM_COMPILATION_CACHE=0: none); the CPU is split into one JAX device per core "
        "(FLOWSIM_HOST_DEVICES=N: N devices; docs/devices.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    parser.commands = {}  # each command's parser, by its name as run.json gives it ("flow", "latent error")
    _add_commands(commands, (*_task_cli(default).COMMANDS, *GENERIC), parser.commands)
    for name in TASKS:
        task_parser = commands.add_parser(
            name, help=_task_cli(name).DESCRIPTION, description=_task_cli(name).DESCRIPTION
        )
        listed = _task_cli(name).COMMANDS
        # Named by its choices (as in the usage line), so that an error says "argument {error,risk,...}", not
        # the internal "task_command".
        choices = "{" + ",".join(command.name for command in listed) + "}"
        task_commands = task_parser.add_subparsers(
            dest="task_command", metavar=choices, required=True, parser_class=Parser
        )
        _add_commands(task_commands, listed, parser.commands, f"{name} ")
    return parser


def _refuse_unrecognized(command_parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> None:
    """Exit 2, saying the arguments `command` does not know and the nearest option to each misspelt one (argparse's
    own message comes from the top-level parser, which names no command and suggests nothing)."""
    known = [option.lstrip("-") for action in command_parser._actions for option in action.option_strings]
    near = [
        f"--{match}"  # the one nearest name, if near enough (0.7: "setps", "t-maks" find steps, t-max; "t-end" none)
        for word in unknown
        if word.startswith("-")
        for match in difflib.get_close_matches(word.lstrip("-"), known, n=1, cutoff=0.7)
    ]
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    command_parser.error(f"unrecognized arguments: {' '.join(unknown)} ({hint}see flowsim {command} --help)")


def command() -> int:
    """What the `flowsim` executable runs (`executable`): `main` in a process of its own; returns the exit status.

    The process owns its devices, so its CPU is first split into one JAX device per core
    (`flowsim.devices.use_host_cores`; FLOWSIM_HOST_DEVICES=N for N): every batch then uses every core.
    Same seed, same numbers on a machine; across machines with different core counts, results differ
    only in the last bits (a row's last bit can depend on where it sits in a device's batch), except an
    adaptive solve whose step sizes that bit changes, which agrees to about its tolerance (docs/devices.md,
    "The numbers").
    """
    from flowsim.devices import check_xla_flags, use_host_cores

    keep_printing_harmless()
    _figures_into_files()
    _standard_promotion()
    try:
        check_xla_flags()
        use_host_cores()
    except ValueError as error:  # a bad XLA_FLAGS or FLOWSIM_HOST_DEVICES: invalid input, said in one line
        print(f"flowsim: error: {error}", file=sys.stderr)
        return 2
    return main(own_process=True)


def executable() -> NoReturn:
    """The `flowsim` executable (and `python -m flowsim.cli`): `command()`, then the process ends at once.

    When `command` returns, every file of the run is written and closed. What is left of an ordinary exit is
    tearing the interpreter down: freeing its objects, JAX's backends and every compiled program, 0.7-1 s after a
    run of many programs (BENCHMARKS.md), which the operating system does at once. So the process ends without
    it (as mypy does), after what must still happen: a cluster's processes leave it together
    (`jax.distributed.shutdown`, which JAX's own exit handler would call), and the standard streams are flushed.
    argparse's exit (`--help`, a usage error) ends the process so too, with the status Python would give it; any
    other exception out of `command` exits as Python does.
    """
    try:
        status = command()
    except SystemExit as stop:  # as Python exits: no code is 0, a number is the status, anything else is said, with 1
        status = 0 if stop.code is None else stop.code
        if not isinstance(status, int):
            print(status, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        # A second Ctrl-C while a stopped run writes what it had (the first one is said by `_run`): its files and
        # run.json are what they are; a traceback would add nothing.
        print(f"flowsim: interrupted by {_by()}", file=sys.stderr)
        status = _stop_status()
    command_ended()
    import jax  # imported with flowsim already

    jax.distributed.shutdown()  # a cluster's processes leave it together; a no-op outside a cluster
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()  # the executable's streams (`keep_printing_harmless`) outlive a reader gone
    os._exit(status)


def _figures_into_files() -> None:
    """Draw the executable's figures on matplotlib's Agg backend, whatever MPLBACKEND says.

    The command line only writes figures to files: a desktop's backend (TkAgg, QtAgg, macosx) would start
    its toolkit for nothing, and a misspelt one stops matplotlib's import, mid-run, at the first figure.
    """
    os.environ["MPLBACKEND"] = "agg"
    if "matplotlib" in sys.modules:  # imported before flowsim's entry point (a sitecustomize, say)
        sys.modules["matplotlib"].use("agg")


def _standard_promotion() -> None:
    """JAX's default rules for mixing dtypes and ranks, whatever the environment asks for a user's own code.

    JAX_NUMPY_DTYPE_PROMOTION=strict (or JAX_NUMPY_RANK_PROMOTION=raise), set for one's own programs, would
    otherwise stop flowsim's, which mix integer steps with float times and broadcast scalars over batches.
    """
    import jax

    jax.config.update("jax_numpy_dtype_promotion", "standard")
    jax.config.update("jax_numpy_rank_promotion", "allow")


def main(argv: list[str] | None = None, *, own_process: bool = False) -> int:
    """Run the `flowsim` command line in this process, on the devices JAX already has; returns the exit status.

    `own_process`: whether the process is the command's alone (the executable, `command`): then SIGTERM and SIGHUP stop
    the run as Ctrl-C does (exit status 143, 129); a program calling `main` keeps its own handling of them.
    """
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if getattr(args, "task_command", None):
        args.command = f"{args.command} {args.task_command}"
    if unknown:
        _refuse_unrecognized(parser.commands[args.command], args.command, unknown)
    # Over the error handling too: a repeated SIGTERM or SIGHUP (a terminal's hangup can send two) is ignored while
    # a stopped run writes what it had.
    # The executable's process ends for a signal its main thread cannot take up in time (`_end_unheard`).
    unheard = functools.partial(_end_unheard, args) if own_process else None
    with ctrl_c_kept(terminate=own_process, on_unheard=unheard):
        return _run(args)


def _end_unheard(args, signum: int) -> NoReturn:
    """End the executable's process for a signal its main thread has not taken up (it waits in compiled code: a
    compilation, a computation that looks for no signal), from the thread that saw it: the files written so far
    kept and run.json's status final, as for any stop, but for the computation under way."""
    by = _by()
    _close(args, "interrupted", f"interrupted by {by} (during a computation that could not stop at once)")
    _say_interrupted(args)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(_stop_status())


def _run(args) -> int:
    """The command of `args` (parsed): its exit status, each kind of failure said as the module says."""
    try:
        check(args)
        choose_folder(args)
        if args.progress is None:
            args.progress = sys.stderr.isatty()
        # Under srun (or given a coordinator) the processes join one set of devices (docs/devices.md);
        # every solve is interruptible (in segments): Ctrl-C keeps what was computed.
        _compilation_cache()
        # The estimate of every run longer than a minute is said before it starts; one longer than
        # TIME_LIMIT is refused unless --yes asks for it.
        with (
            _cluster_member(args),
            checking(),
            long_runs_allowed(getattr(args, "yes", False)),
            announcing(lambda line: print(f"flowsim {args.command}: estimate: {line}", file=sys.stderr, flush=True)),
        ):
            if args.command != "derive":  # SymPy's work alone: no device to start
                _start_devices()
            return args.run(args)
    except InvalidInput as error:
        # Invalid input found once the run's folder was made (e.g. by a memory estimate): a run that wrote
        # nothing leaves nothing; one that did keeps its files, with run.json saying why it ended.
        record = getattr(args, "record", None)
        if record is not None and not record.closed and not record.files:
            record.discard()
        _close(args, "error", str(error))
        print(f"flowsim {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        return _interrupted(args, stop)
    except NotWritten as error:
        # The file system refused a result (a full disk, a quota): said in one line, the files written before kept.
        _close(args, "error", f"cannot write {error.filename}: {error.strerror}")
        full = error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
        print(
            f"flowsim {args.command}: error: cannot write {error.filename}: {error.strerror} (the files written "
            f"before it are kept{'; free some space or give another --out' if full else ''})",
            file=sys.stderr,
        )
        return 2
    except Exception as error:
        if ctrl_c_in(error):  # the user's Ctrl-C, turned into another exception by a library it interrupted
            return _interrupted(args, KeyboardInterrupt())
        return _internal_error(args, error)


def _interrupted(args, stop: KeyboardInterrupt) -> int:
    """A run stopped by Ctrl-C or a terminating signal: run.json says so and where, the exit status says by what."""
    # Interrupted says where ("interrupted at t = ..."); a plain KeyboardInterrupt says nothing.
    _close(args, "interrupted", f"{str(stop) or 'interrupted'} by {_by()}", stop)
    _say_interrupted(args)
    return _stop_status()


def _by() -> str:
    """What stopped the run, as its messages say it."""
    return "the user (Ctrl-C)" if interruption() == "Ctrl-C" else interruption()


def _say_interrupted(args) -> None:
    resume = " (run the same command with --resume to continue it)" if hasattr(args, "resume") else ""
    print(
        f"flowsim {args.command}: interrupted by {_by()}: the files written so far are complete{resume}",
        file=sys.stderr,
    )


def _stop_status() -> int:
    """The exit status of a run stopped by `interruption()`: 130 for Ctrl-C, 128 + the signal's number otherwise."""
    return 130 if interruption() == "Ctrl-C" else 128 + signal.Signals[interruption()]


def _internal_error(args, error: Exception) -> int:
    """Not the user's input: flowsim's own failure. The files written so far stay; the traceback is for a report."""
    _close(args, "error", f"{type(error).__name__}: {error}")
    traceback.print_exception(error, file=sys.stderr)
    print(
        f"flowsim {args.command}: internal error: {type(error).__name__}: {error} (a failure of flowsim itself, "
        "not of your input: please report it with the traceback above)",
        file=sys.stderr,
    )
    return 3


def _start_devices() -> None:
    """Start JAX's devices before the run (after a cluster's processes joined): a platform JAX cannot start, as
    JAX_PLATFORMS=cuda without a GPU or without its plugin, is invalid input said in one line (exit status 2), not
    an internal error in the middle of the run."""
    import jax

    try:
        jax.devices()
    except (RuntimeError, AssertionError) as error:  # JAX asserts where no platform it was told of exists
        asked = os.environ.get("JAX_PLATFORMS")
        raise InvalidInput(
            f"JAX could not start its devices{f' (JAX_PLATFORMS={asked})' if asked else ''}: "
            f"{str(error) or 'no platform it was asked for is installed'}; unset JAX_PLATFORMS for the devices "
            "there are, or install the platform's JAX (docs/devices.md)"
        ) from None


def _compilation_cache() -> None:
    """Keep compiled programs between runs (JAX's persistent cache): a second run of a command skips compiling.

    In JAX_COMPILATION_CACHE_DIR if set, else in the user's cache folder; FLOWSIM_COMPILATION_CACHE=0 turns
    it off. The cache is keyed by the program, JAX's version and the device, so it is never stale. A folder
    that cannot be made or written (a read-only home, as on some clusters' compute nodes) is said in one
    line, and the run goes on without the cache.
    """
    import jax

    if os.environ.get("FLOWSIM_COMPILATION_CACHE", "1") == "0":
        return
    folder = Path(
        os.environ.get("JAX_COMPILATION_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowsim" / "jax"
    )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable")
    except OSError as error:
        print(
            f"flowsim: note: compiled programs are not kept for the next run: {folder} cannot be written "
            f"({error.strerror}); JAX_COMPILATION_CACHE_DIR=FOLDER names another, FLOWSIM_COMPILATION_CACHE=0 none",
            file=sys.stderr,
        )
        jax.config.update("jax_enable_compilation_cache", False)
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # Every program: most of flowsim's compile in a second or two, and a run compiles dozens.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


@contextlib.contextmanager
def _cluster_member(args) -> Iterator[None]:
    """The command as one process of a cluster (`flowsim.devices.initialize_cluster`), if it is one.

    Every process runs the whole command on the same inputs: the batches are split over every
    process's devices and the results gathered back to each. Process 0 writes --out and prints;
    the others write into a scratch folder, deleted at the end, and print nothing on stdout.
    What native libraries write on stdout goes to stderr in every process (`_native_stdout_on_stderr`).
    Alone (no cluster), the command runs as it is.
    """
    from flowsim.devices import initialize_cluster

    if not initialize_cluster():
        yield
        return
    import jax

    with _native_stdout_on_stderr():
        if jax.process_index() == 0:
            yield
            return
        with (
            tempfile.TemporaryDirectory(prefix=f"flowsim-process-{jax.process_index()}-") as scratch,
            open(os.devnull, "w") as quiet,
            contextlib.redirect_stdout(quiet),
        ):
            args.out, args.replace, args.progress = os.path.join(scratch, "out"), False, False
            yield


@contextlib.contextmanager
def _native_stdout_on_stderr() -> Iterator[None]:
    """File descriptor 1 made stderr's for the native libraries, Python's `sys.stdout` kept on the stdout it had.

    Gloo, JAX's collectives between the CPUs of a cluster, says each connection ("[Gloo] Rank 1 is connected to 3
    peer ranks") with C++'s std::cout, into stdout's results. Only where `sys.stdout` writes into descriptor 1 (a
    program calling `main` with its own `sys.stdout` keeps it as it is).
    """
    try:
        own = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (io.StringIO, pytest's capture)
        own = False
    if not own:
        yield
        return
    sys.stdout.flush()
    kept = os.dup(1)
    stdout = open(kept, "w", encoding=sys.stdout.encoding, errors=sys.stdout.errors, closefd=True)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(stdout):
            yield
    finally:
        stdout.flush()
        os.dup2(kept, 1)
        stdout.close()


_CLOSING = threading.Lock()


def _close(args, status: str, reason: str, interruption: KeyboardInterrupt | None = None) -> None:
    """The run's record (if it was made) written with how it ended, what was computed, and its files listed (once:
    the main thread and `_end_unheard`'s may both come to it)."""
    record = getattr(args, "record", None)
    with _CLOSING:
        if record is None or record.closed:
            return
        try:
            if interruption is not None:
                parts.write_interrupted(record, interruption)
            record.finish(status, reason)
        except NotWritten as error:  # a full disk: what ended the run is still said, by the caller
            record.closed = True
            print(f"flowsim {args.command}: cannot write {error.filename}: {error.strerror}", file=sys.stderr)
        parts.list_files(record, sys.stderr)
