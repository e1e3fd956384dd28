"""Options of the command line: one way to declare an option with its allowed values, shared by every task."""

import argparse
import functools
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from flowsim._checks import NON_NEGATIVE, SEED, Allowed, subnormal_note
from flowsim._memory import check_work, held_announcements
from flowsim._runfolder import earlier_run

__all__ = [
    "Command",
    "OneOf",
    "Parser",
    "check",
    "choose_folder",
    "comma_separated",
    "default_folder",
    "estimated",
    "follows",
    "init_option",
    "names_option",
    "option",
    "output_options",
    "parameter_options",
    "parse_init",
    "quick_option",
    "read_only",
    "read_with",
]


@dataclass(frozen=True)
class Command:
    """A command of the command line: its name, what it does (its --help), how it runs, its options.

    **Fields:** `name`; `help`; `run(args) -> exit status`; `add_options(parser)`.
    """

    name: str
    help: str
    run: Callable
    add_options: Callable


class Parser(argparse.ArgumentParser):
    """argparse with errors as one line and exit status 2, without the usage block.

    A value that starts with a minus and reads as numbers ("-1,2", "-1e-3") is a value, not an option, so that
    a list option refuses it for its range instead of argparse's "expected one argument". Options declared by
    `quick_option` take the --quick value where they are not given; those declared by `read_only` (or `read_with`)
    are refused where given but not read; those declared by `follows` take, where not given, the default that the
    value of the option they follow names.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d[\d.,eE+-]*$")
        #: {dest: (flag, when it is read, the remedy, whether it is read given the parsed options)} of `read_only`.
        self.read_when = {}
        #: {dest: (the dest it follows, {that option's value: this option's default})} of `follows`, in their order.
        self.following = {}

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        quick = self._defaults.get("quick_values") or {}
        read_when, following = self.read_when, self.following
        if not quick and not read_when and not following:
            return super().parse_known_args(args, namespace)
        # Which options were given: those whose value is no longer the marker put in their default's place.
        marked = {*quick, *read_when, *following}
        actions = {action.dest: action for action in self._actions if action.dest in marked}
        defaults = {dest: action.default for dest, action in actions.items()}
        for action in actions.values():
            action.default = _NotGiven(action.default)
        try:
            namespace, extras = super().parse_known_args(args, namespace)
        finally:
            for dest, action in actions.items():
                action.default = defaults[dest]
        given = {dest for dest in actions if not isinstance(getattr(namespace, dest), _NotGiven)}
        for dest, action in actions.items():
            if dest not in given:
                value = quick[dest] if dest in quick and namespace.quick else defaults[dest]
                setattr(namespace, dest, self._get_value(action, value) if isinstance(value, str) else value)
        for dest, (leader, defaults_by_value) in following.items():  # in order: one may follow another follower
            if dest not in given:
                value = defaults_by_value[getattr(namespace, leader)]
                setattr(namespace, dest, self._get_value(actions[dest], value) if isinstance(value, str) else value)
        for dest, (flag, when, remedy, read) in read_when.items():
            if dest in given and not read(namespace):
                # A value the run would not read: said, instead of a run without the part it was given for.
                self.error(f"{flag} is read only {when}: {remedy}, or leave {flag} out")
        return namespace, extras


class _NotGiven:
    """An option's default while the arguments are parsed: still it after parsing, the option was not given
    (shown as the default it holds, in --help)."""

    def __init__(self, default):
        self.default = default

    def __str__(self) -> str:
        return str(self.default)


def option(parser, flag: str, kind, default, text: str, allowed: Allowed | None = None, **kwargs) -> None:
    """Add `flag`; its allowed values are appended to its help and checked by `check` (None is not checked).

    A list option (`kind` from `comma_separated`) states its values' range and rule in its help.
    """
    if isinstance(kind, _CommaSeparated):
        text = f"{text}; each {kind.allowed.text} (taken sorted, a repeated value once)"
    parser.add_argument(flag, type=kind, default=default, help=f"{text}; {allowed.text}" if allowed else text, **kwargs)
    if allowed is not None:
        parser.get_default("checks")[flag[2:].replace("-", "_")] = (flag, allowed)


def names_option(
    parser, flag: str, choices, default: str | None, text: str, others: tuple[str, Callable] | None = None
) -> None:
    """Add `flag`: one or more of `choices`, space- or comma-separated (`--maps erf softmax`, `--maps erf,softmax`, as
    the number lists are given), kept in the order given, a repeated name once, as a tuple.

    **Arguments:** `default`: the names as typed, comma-separated ("l1,head"), or None for all of them; `others`:
    (how they are written, a check raising ValueError) for names outside `choices` that are taken too.
    """
    text = (
        f"{text}: one or more of {', '.join(choices)}{f' or {others[0]}' if others else ''}, space- or comma-separated"
    )
    if default is None:
        # "%(default).0s" prints nothing, and keeps argparse from adding "(default: None)" after "all".
        text += " (default: all)%(default).0s"
    parser.add_argument(
        flag,
        nargs="+",
        type=_Names(OneOf(tuple(choices), others[1] if others else None)),
        action=_Flattened,
        default=default,
        metavar="NAME",
        help=text,
    )


@dataclass(frozen=True)
class OneOf:
    """An option's type: one of `choices`, or, given `other` (a check raising ValueError), a name it accepts."""

    choices: tuple[str, ...]
    other: Callable | None = None

    def __call__(self, name: str) -> str:
        if name in self.choices:
            return name
        if self.other is None:
            raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from {', '.join(self.choices)})")
        try:
            self.other(name)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return name


@dataclass(frozen=True)
class _Names:
    """The type of one value of a `names_option`: comma-separated names, each taken by `one`."""

    one: OneOf

    def __call__(self, text: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.one(name.strip()) for name in text.split(",")))


class _Flattened(argparse.Action):
    """The names of every value of a `names_option` given, in order, a repeated one once."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, tuple(dict.fromkeys(name for value in values for name in value)))


def parameter_options(parser, parameters, defaults: dict, allowed: dict | None = None) -> None:
    """Add an option per task `Parameter` named in `defaults` (with those defaults), in the task's order.

    `allowed` replaces a parameter's allowed values on the command line (say why in its text: e.g. a
    larger minimum of d that every command of the task shares).
    """
    for parameter in parameters:
        if parameter.name in defaults:
            accepted = allowed[parameter.name] if allowed and parameter.name in allowed else parameter.allowed
            option(parser, f"--{parameter.name}", parameter.kind, defaults[parameter.name], parameter.meaning, accepted)


def _folder(text: str) -> str:
    """The type of --out: a non-empty path (an empty one would write into the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must name a folder, got {text!r}")
    return text


#: The folder under which a run given no --out writes, in a new folder per run (`default_folder`).
DEFAULT_ROOT = "flowsim-out"


def default_folder(command: str, latest: bool = False, root: str = DEFAULT_ROOT) -> str:
    """The folder of a run given no --out: `root`/COMMAND, then `root`/COMMAND-2, COMMAND-3, ...: the first that does
    not exist or is empty, so that a command run twice keeps both runs (the numbered folders of a browser's downloads).

    **Arguments:** `command`: the command as typed ("sparse sweep"); `latest`: for --resume and --replace, the one of
    these folders whose flowsim run started last (run.json's "started", the higher number on a tie), if any holds one.

    **Returns:** the folder, as a path relative to the current folder.
    """
    base = Path(root) / command.replace(" ", "-")
    # Every name of the sequence that exists (a folder, or a file that takes its name), by its number.
    numbered = re.compile(re.escape(base.name) + r"(?:-([2-9]|[1-9][0-9]+))?")
    found = {}
    if base.parent.is_dir():
        for path in base.parent.iterdir():
            if match := numbered.fullmatch(path.name):
                found[int(match.group(1) or 1)] = path
    if latest:
        runs = [(str(run.get("started")), number) for number, path in found.items() if (run := earlier_run(path))]
        if runs:
            return str(found[max(runs)[1]])
    number = 1
    while number in found and not (found[number].is_dir() and not any(found[number].iterdir())):
        number += 1
    return str(base if number == 1 else base.with_name(f"{base.name}-{number}"))


def choose_folder(args) -> None:
    """`args.out`, where --out was not given, set to the run's folder (`default_folder`); said on stderr where a
    --resume or --replace takes the latest run's."""
    if getattr(args, "out", "") is not None:
        return
    latest = args.replace or getattr(args, "resume", False)
    args.out = default_folder(args.command, latest=latest)
    if args.replace and earlier_run(args.out) is not None:
        print(f"flowsim {args.command}: replacing the latest run, in {args.out}", file=sys.stderr)


def output_options(parser, command: str, seed: int | None = 0, resumable: bool = False) -> None:
    """--seed (unless None), --out, --replace, --progress and --yes, which every computing command has, and
    --resume for a command whose work is stored in units as they finish (`resumable`)."""
    if seed is not None:
        text = "PRNG seed: the same seed and options give the same numbers"
        option(parser, "--seed", int, seed, text, SEED)
    base = f"{DEFAULT_ROOT}/{command.replace(' ', '-')}"
    parser.add_argument(
        "--out",
        type=_folder,
        default=None,
        help="folder of the results, created if needed (docs/results.md); it must be new, empty, or an earlier "
        f"run's folder with --replace{' or --resume' if resumable else ''} (default: a new folder per run, {base}, "
        f"then {base}-2, {base}-3, ...: the first that does not exist or is empty; with "
        f"{'--resume or ' if resumable else ''}--replace, the one of these whose run started last)%(default).0s",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="delete the earlier flowsim run found in --out (exactly the files it recorded) before this one; refused "
        "if the folder holds anything else; without --out, the folder of the latest run",
    )
    if resumable:
        parser.add_argument(
            "--resume",
            action="store_true",
            help="continue the interrupted run in --out (the same arguments): its finished units are read back, "
            "not computed again; without --out, the folder of the latest run",
        )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="run even if the estimate before work says it takes longer than an hour",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="phase timings and progress bars on stderr; if neither is given (default: %(default)s), "
        "only when stderr is a terminal",
    )


def schedule_option(parser, clock: str, default: float) -> None:
    """--decay: the paper's schedule value / (1 + decay * step) of the task's scheduled parameter."""
    option(
        parser,
        "--decay",
        float,
        default,
        f"lambda schedule lam / (1 + decay * step), step = t / {clock}; 0 keeps lambda fixed",
        NON_NEGATIVE,
    )


def parse_init(names: tuple[str, ...], state_names: tuple[str, ...]):
    """The type of --init: a name of an initialisation, or the state as comma-separated numbers."""

    def parse(text: str):
        if text in names:
            return text
        try:
            values = tuple(float(x) for x in text.split(","))
        except ValueError:
            values = ()
        if len(values) != len(state_names):
            raise argparse.ArgumentTypeError(
                f"must be {', '.join(names[:-1])} or {names[-1]} or {len(state_names)} comma-separated values "
                f"{','.join(state_names)}, got {text!r}"
            )
        return values

    return parse


@dataclass(frozen=True)
class _CommaSeparated:
    """The type of a list option: comma-separated values, each one of `allowed`; sorted, each value once."""

    allowed: Allowed

    def __call__(self, text: str) -> tuple:
        kind = int if self.allowed.integer else float
        try:
            values = tuple(kind(part) for part in text.split(","))
        except ValueError:
            values = ()
        refused = [value for value in values if not self.allowed.admits(value)]
        if not values or refused:
            # A value refused only for being subnormal is said so, as a single value is (`Allowed.check`).
            why = subnormal_note(refused[0]) if refused and self.allowed.accepts(refused[0]) else ""
            raise argparse.ArgumentTypeError(
                f"must be comma-separated values, each {self.allowed.text}, got {text!r}"
                + (f": {refused[0]!r} is {why}" if why else "")
            )
        # One row per value in every table: a repeated value would be computed twice and listed twice.
        return tuple(sorted(set(values)))


def comma_separated(allowed: Allowed) -> _CommaSeparated:
    """The type of an option holding comma-separated values, each one of `allowed` (int or float by its kind),
    taken sorted, a repeated value once (as `option` says in its help)."""
    return _CommaSeparated(allowed)


def quick_option(parser, what: str, **values) -> None:
    """--quick: a smaller run, setting the options named in `values` (dest=value, a value as typed) where they
    are not given: an option given explicitly keeps its value (`Parser.parse_known_args`)."""
    said = ", ".join(f"--{dest.replace('_', '-')} {value}" for dest, value in values.items())
    parser.add_argument("--quick", action="store_true", help=f"{what}: {said}, except where given explicitly")
    parser.set_defaults(quick_values=values)


def follows(parser, flag: str, leader: str, defaults: dict) -> None:
    """The default of `flag` (added before) follows the value of the option `leader`: `defaults` maps each of its
    values to this option's default (a value as typed, or as taken). Said in `flag`'s help, instead of one default;
    an option may follow one that follows another (declared in that order)."""
    action = next(action for action in parser._actions if flag in action.option_strings)
    leader_dest = leader[2:].replace("-", "_")
    grouped = {}
    for name, value in defaults.items():
        grouped.setdefault(value, []).append(str(name))
    said = "; ".join(f"{value} with {leader} {' or '.join(names)}" for value, names in grouped.items())
    # "%(default).0s" prints nothing, and keeps argparse from adding its own "(default: ...)".
    action.help = f"{action.help} (default: {said})%(default).0s"
    action.default = None
    parser.following[action.dest] = (leader_dest, dict(defaults))


def read_with(parser, switch: str, *flags: str) -> None:
    """The options `flags` are read only when the store-true option `switch` is given: given without it, refused."""
    dest = switch[2:].replace("-", "_")
    read_only(parser, flags, f"with {switch}", f"add {switch}", lambda args: getattr(args, dest))


def read_only(parser, flags: Sequence[str], when: str, remedy: str, read: Callable) -> None:
    """The options `flags` are read only where `read(args)` (the parsed options) holds: given where it does not,
    refused in one line, "FLAG is read only WHEN: REMEDY, or leave FLAG out"."""
    for flag in flags:
        parser.read_when[flag[2:].replace("-", "_")] = (flag, when, remedy, read)


def estimated(run: Callable, estimate: Callable) -> Callable:
    """A command's `run` preceded by the one estimate before work: `estimate(args) -> (needs, costs)` (lists of
    `flowsim._memory.Need` and `Cost`) is checked against the memory available and the time limit (`--yes`
    lifts it) before the run's folder is made, and said when it is made (after the run's own checks)."""

    @functools.wraps(run)
    def checked(args) -> int:
        with held_announcements():  # said when the run makes its folder (`flowsim.commands.parts.record`)
            check_work("this run", *estimate(args))
            return run(args)

    return checked


def init_option(parser, task_type, what: str, described: str) -> None:
    """--init: a name of the task's initialisations (described in `described`) or a given state."""
    parser.add_argument(
        "--init",
        type=parse_init(task_type.initialisations, task_type.state_names),
        default=task_type.initialisations[0],
        help=f"{what}: {described}",
    )


def check(args) -> None:
    """Every option with allowed values (`option`) within them; ValueError naming the first that is not."""
    for name, (flag, allowed) in args.checks.items():
        value = getattr(args, name)
        if value is not None:
            allowed.check(flag, value)
