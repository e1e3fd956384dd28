"""Every table of BENCHMARKS.md measured again, or a stated subset, in one command.

`TABLES` names, for each section of BENCHMARKS.md whose figures a script measures, the commands that produce them
(the section's own command first, as the section writes it) and the minutes they take on the 2-core CPU with no
other job. The command runs them one after the other from the repository's root, never two at once (they time
themselves), and writes each one's output, tables included, to a log in a new folder; then a summary of what ran,
its exit status, wall seconds and the load beside it. Copying a new figure into BENCHMARKS.md (and README's table,
`python benchmarks/readme_figures.py --write`) stays a person's step: a figure is worth quoting only once someone
has read the conditions it was measured in.

A command that compares the code with an earlier commit names that checkout BEFORE: the command makes a git
worktree of the section's commit for it and removes it afterwards. The GPU's section (`benchmarks/device_checks.sh`)
runs only when named (`--only gpu`, on a lent device machine).

Usage: python benchmarks/regenerate.py [--list] [--only NAME ...] [--skip NAME ...] [--out FOLDER]
"""

import argparse
import contextlib
import datetime
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Table:
    """A section of BENCHMARKS.md and the commands that measure its figures.

    - `name`: what `--only` and `--skip` call it.
    - `section`: the section's heading in BENCHMARKS.md.
    - `commands`: shell words run from the repository's root; the first is the one the section quotes.
    - `minutes`: all of its commands' wall time on the 2-core CPU with no other job, rounded up: measured by this
      driver (2026-12-06: stiffness, rules, family-flow, heads-flow, reproduce, latent) or, for the others, from the
      sizes and figures of their sections.
    - `before`: the commit the placeholder BEFORE checks out, for commands that compare the code with it.
    - `gpu`: runs only where named, on a machine with a GPU.
    """

    name: str
    section: str
    commands: tuple[str, ...]
    minutes: float
    before: str | None = None
    gpu: bool = False


#: The section's further flow_throughput.py runs (its first command is written out, as BENCHMARKS.md quotes it).
THROUGHPUT = "python benchmarks/flow_throughput.py --solvers auto,rodas5-one-call --ivp-trajectories 4"

TABLES = (
    Table(
        "flow",
        "Flow throughput",
        (
            "python benchmarks/flow_throughput.py --batches 10000 --solvers auto,rodas5-one-call --ivp-trajectories 4",
            f"{THROUGHPUT} --batches 100000",
            f"{THROUGHPUT} --batches 10000 --devices 2",
            "python benchmarks/flow_step_profile.py --batches 2000",
            "python benchmarks/flow_step_profile.py --adaptive --batches 2000",
            "python benchmarks/flow_step_profile.py --kernels --batches 1000",
        ),
        minutes=25,
    ),
    Table(
        "stiffness",
        "Stiffness: steps against d",
        (
            "python benchmarks/flow_stiffness.py --dims 400,4000 --batches 64 --solvers Tsit5,Rosenbrock4 --no-map",
            "python benchmarks/flow_stiffness.py --dims 400,40000 --batches 8 --solvers Rosenbrock4 --no-map",
        ),
        minutes=2,
    ),
    Table(
        "rules",
        "Rule-based flows",
        ("python benchmarks/maps_flow.py --maps softmax linear softplus --batch 64 --trees BEFORE . --rounds 1",),
        minutes=20,
        before="08ef89f",
    ),
    Table("family-flow", "The SLR family's flow", ("python benchmarks/family_flow_speed.py",), minutes=2),
    Table("figure-2", "The follow-up's Figure 2", ("python benchmarks/family_sweep.py --parts sweep",), minutes=5),
    Table("heads-flow", "The two-head flow", ("python benchmarks/heads_flow_speed.py",), minutes=3),
    Table("heads-sgd", "The authors' two-head experiment", ("python benchmarks/heads_reproduction.py",), minutes=6),
    Table("sgd-cost", "Online SGD in R^d against drawing its samples", ("python benchmarks/sgd_cost.py",), minutes=5),
    Table(
        "chain",
        "SGD on the overlaps",
        (
            "python benchmarks/overlap_sgd.py --skip-reproduce",
            "python benchmarks/chain_devices.py",
            "python benchmarks/chain_floor.py --seeds 30,300 --steps 10000 --repeats 1",
        ),
        minutes=12,
    ),
    Table(
        "reproduce",
        "The reproduction",
        ("python benchmarks/reproduce_speed.py", "python benchmarks/reproduce_speed.py --breakdown"),
        minutes=3,
    ),
    Table(
        "d-sweep",
        "A sweep over d",
        ("python benchmarks/d_sweep.py --trees BEFORE . --rounds 2",),
        minutes=8,
        before="79265c7",
    ),
    Table(
        "sparse",
        "Sparse variable creation",
        (
            "python benchmarks/sparse_training.py --Ts --step-Ts 64 1024 4096 --loop-steps 100",
            "python benchmarks/sparse_training.py --step-Ts",
            "python benchmarks/sparse_budgets.py",
            "python benchmarks/sparse_control.py",
        ),
        minutes=20,
    ),
    Table("latent", "Latent-posterior attention", ("python benchmarks/latent_error.py",), minutes=2),
    Table("portrait", "The portrait's memory against its estimate", ("python benchmarks/portrait_memory.py",), 3),
    Table(
        "full-size",
        "Checks at full size",
        (
            "python benchmarks/overlap_sgd_law.py --dimensions 8 80 400 --seeds 2000",
            "python benchmarks/latent_limits.py --sequences 20000",
            "python benchmarks/sparse_critical.py --Ts 16 32 64",
            "python benchmarks/maps_rule_error.py",
        ),
        minutes=40,
    ),
    Table(
        "settings",
        "Settings the code keeps, and the measurements behind them",
        ("python benchmarks/threefry_lowering.py --rounds 2", "python benchmarks/compile_options.py --rounds 2"),
        minutes=15,
    ),
    Table("suite", "The suite, the demo and the site", ("python benchmarks/fresh_install.py --profile",), minutes=15),
    Table("gpu", "On a GPU", ("bash benchmarks/device_checks.sh",), minutes=10, gpu=True),
)
NAMES = tuple(table.name for table in TABLES)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the plan and its estimated time, run nothing")
    parser.add_argument("--only", nargs="+", metavar="NAME", help=f"these tables only, of {', '.join(NAMES)}")
    parser.add_argument("--skip", nargs="+", metavar="NAME", default=[], help="every table but these")
    parser.add_argument("--out", type=Path, help="a new or empty folder for the logs (default: ./benchmark-run-TIME)")
    args = parser.parse_args(argv)
    for option in ("only", "skip"):
        unknown = [name for name in getattr(args, option) or [] if name not in NAMES]
        if unknown:
            parser.error(f"--{option}: unknown table {', '.join(unknown)}; the tables are {', '.join(NAMES)}")
    if args.only and args.skip:
        parser.error("--only and --skip: give one of them")
    return args


def plan(only=None, skip=()) -> list[Table]:
    """The tables to measure: those named by `only`, else every CPU table but those in `skip`."""
    if only:
        return [table for table in TABLES if table.name in only]
    return [table for table in TABLES if not table.gpu and table.name not in skip]


def format_minutes(minutes: float) -> str:
    hours, rest = divmod(round(minutes), 60)
    return f"{hours} h {rest} min" if hours else f"{rest} min"


def describe(tables: list[Table]) -> str:
    """The plan as text: each table's commands and estimate, then the total."""
    lines = []
    for table in tables:
        where = " (GPU)" if table.gpu else ""
        before = f", BEFORE = a worktree of {table.before}" if table.before else ""
        estimate = format_minutes(table.minutes)
        lines.append(f"{table.name}: BENCHMARKS.md '{table.section}'{where}, about {estimate}{before}")
        lines += [f"    {command}" for command in table.commands]
    commands, total = sum(len(table.commands) for table in tables), sum(table.minutes for table in tables)
    lines.append(f"{len(tables)} tables, {commands} commands: about {format_minutes(total)}")
    return "\n".join(lines)


@contextlib.contextmanager
def worktree(commit: str, folder: Path):
    """A detached git worktree of `commit` in a new folder under `folder`, removed on leaving."""
    path = folder / f"before-{commit}"
    made = subprocess.run(
        ["git", "-C", str(REPOSITORY), "worktree", "add", "--detach", str(path), commit],
        capture_output=True,
        text=True,
    )
    if made.returncode:
        raise RuntimeError(
            f"could not check out commit {commit} for BEFORE ({made.stderr.strip()}): this clone needs the "
            "repository's history (git fetch --unshallow), or skip the table with --skip"
        )
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPOSITORY), "worktree", "remove", "--force", str(path)], check=False)


def argv(command: str, before: Path | None) -> list[str]:
    """The command's words, with this interpreter for `python` and the worktree for BEFORE."""
    words = shlex.split(command)
    if words[0] == "python":
        words[0] = sys.executable
    return [str(before) if word == "BEFORE" and before else word for word in words]


def run_command(command: str, log: Path, before: Path | None) -> dict:
    """Run one command from the repository's root, its output to `log`; what it took."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        out.write(f"$ {command}\n")
        out.flush()
        environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
        returncode = subprocess.run(
            argv(command, before), cwd=REPOSITORY, stdout=out, stderr=subprocess.STDOUT, env=environment
        ).returncode
    return dict(
        command=command,
        returncode=returncode,
        seconds=round(time.perf_counter() - start, 1),
        load_before=round(load, 2),
        load_after=round(os.getloadavg()[0], 2),
        log=log.name,
    )


def run(tables: list[Table], out: Path) -> list[dict]:
    """Run every table's commands in turn; the summary is rewritten after each, so an interrupted run keeps it."""
    done = []
    summary = out / "summary.json"
    for table in tables:
        with contextlib.ExitStack() as stack:
            before = stack.enter_context(worktree(table.before, out)) if table.before else None
            for index, command in enumerate(table.commands, 1):
                step = f"{table.name} {index}/{len(table.commands)}"
                print(f"[{time.strftime('%H:%M:%S')}] {step}: {command}", flush=True)
                record = run_command(command, out / f"{table.name}-{index}.txt", before)
                record.update(table=table.name, section=table.section, estimate_minutes=table.minutes)
                done.append(record)
                summary.write_text(json.dumps(done, indent=1) + "\n", encoding="utf-8")
                status = "ok" if record["returncode"] == 0 else f"exit {record['returncode']}"
                load = f"load {record['load_before']} -> {record['load_after']}"
                print(f"    {status}, {record['seconds']:.0f} s, {load}", flush=True)
    return done


def new_folder(out: Path | None) -> Path:
    """The logs' folder: a new one, or an existing empty one (never one with files flowsim did not write)."""
    if out is None:
        out = Path.cwd() / f"benchmark-run-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SystemExit(f"--out: {out} exists and is not an empty folder; name a new one")
    out.mkdir(parents=True, exist_ok=True)
    return out


def main(argv_=None) -> int:
    args = parse_args(argv_)
    tables = plan(args.only, args.skip)
    print(describe(tables))
    if args.list:
        return 0
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: the load average is {load:.2f}: the figures are worth quoting only on a machine alone")
    out = new_folder(args.out)
    print(f"logs and summary.json in {out}", flush=True)
    try:
        done = run(tables, out)
    except KeyboardInterrupt:
        print(f"interrupted: the commands that finished are in {out / 'summary.json'}")
        return 130
    failed = [record["command"] for record in done if record["returncode"]]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"done: {len(done)} commands, {sum(r['seconds'] for r in done) / 60:.1f} min, largest peak {peak:.0f} MiB")
    for command in failed:
        print(f"failed: {command}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
