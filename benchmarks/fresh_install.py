"""README's two quickstart commands as a new user runs them, timed: the demo's time and the test suite's budget.

A clean clone of this repository (HEAD, or --commit), a new virtual environment, a new HOME and TMPDIR (so JAX's
compilation cache starts empty, as on CI), none of the variables `CLEARED` names (JAX_*, XLA_*, FLOWSIM_*, PYTHON*
such as PYTHONUNBUFFERED, ...): then the two commands README.md's quickstart holds, read from it and run part by part
(`A && B`: A, then B if A succeeded), each part timed. What it reports: each part's wall seconds and exit status,
the demo's own record (its time and whether the claim holds), and the suite's counts (passed, skipped, failed) and
time against its 8-minute budget.

With --profile, the suite also says where its time goes: a pytest plugin (given by PYTEST_ADDOPTS, so the command
stays README's) records each test file's seconds in its worker and the seconds JAX spent tracing, lowering and
compiling programs there (jax.monitoring's events), and the table lists the longest files. Measure with nothing
else running: the two workers take both cores.

Usage: python benchmarks/fresh_install.py [--commit REV] [--profile] [--files N] [--keep] [--out FOLDER]

Writes FOLDER/fresh_install.json and each part's log (default FOLDER: a new folder fresh-install-TIME here); the
clone and the environment (about 1.5 GiB, in FOLDER/work) are removed at the end unless --keep.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
#: The suite's budget on the 2-core CPU (README, "The two commands").
BUDGET_SECONDS = 8 * 60
#: Variables a new user's shell does not have: they would pin devices, caches or compiler flags.
CLEARED = ("JAX_", "XLA_", "FLOWSIM_", "PYTHON", "VIRTUAL_ENV", "PYTEST_", "MPLBACKEND", "CUDA_")
#: What one run needs, said before it starts: the two commands on the 2-core CPU, and the clone and venv on disk.
MINUTES, DISK_GIB = 12, 1.5

#: The plugin --profile adds: per test file, its seconds in the worker and JAX's compile events' seconds.
PLUGIN = """
import collections, json, os, time
import jax.monitoring
import pytest

_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace", "/jax/core/compile/jaxpr_to_mlir_module_duration":
           "lower", "/jax/core/compile/backend_compile_duration": "compile"}
_current = ["(collection)"]
_seconds = collections.defaultdict(collections.Counter)


def _listener(event, duration, **_):
    if event in _EVENTS:
        _seconds[_current[0]][_EVENTS[event]] += duration


jax.monitoring.register_event_duration_secs_listener(_listener)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.path.name
    start = time.perf_counter()
    yield
    _seconds[item.path.name]["wall"] += time.perf_counter() - start


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.environ["FRESH_INSTALL_PROFILE"], f"{worker}.json"), "w") as file:
        json.dump({name: dict(counts) for name, counts in _seconds.items()}, file)
"""


def quickstart_commands(readme: str) -> list[str]:
    """The two one-line commands of README's quickstart (its first two bash blocks after "## Quickstart")."""
    section = readme[readme.index("## Quickstart") :]
    blocks = re.findall(r"```bash\n(.*?)\n```", section, flags=re.DOTALL)[:2]
    if len(blocks) != 2 or any("\n" in block for block in blocks):
        raise SystemExit("README.md's quickstart should hold two one-line bash blocks")
    return blocks


def new_user_environment(folder: Path, venv: Path) -> dict[str, str]:
    """This environment without what would pin devices, caches or flags; HOME, TMPDIR and the venv new."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith(CLEARED)}
    environment.update(
        HOME=str(folder / "home"),
        TMPDIR=str(folder / "tmp"),
        VIRTUAL_ENV=str(venv),
        PATH=f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}",
    )
    for name in ("home", "tmp"):
        (folder / name).mkdir()
    return environment


def run_part(part: str, cwd: Path, environment: dict, log: Path) -> dict:
    """One part of a command, its output to `log`: {command, status, seconds}."""
    start = time.perf_counter()
    with open(log, "w") as file:
        status = subprocess.run(["bash", "-c", part], cwd=cwd, env=environment, stdout=file, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    print(f"  {part}: exit {status.returncode} in {seconds:.1f} s", flush=True)
    return {"command": part, "status": status.returncode, "seconds": round(seconds, 1), "log": log.name}


def demo_record(repository: Path) -> dict:
    """The demo's own record: its time and whether the claim holds (None where it wrote none)."""
    path = repository / "flowsim-out" / "demo" / "run.json"
    if not path.exists():
        return {}
    record = json.loads(path.read_text())
    return {
        "status": record["status"],
        "seconds": round(record["durations_s"]["total"], 1),
        "claim_holds": record["summary"].get("claim_holds"),
        "devices": len(record["environment"].get("jax_devices", [])),
    }


def suite_counts(log: Path) -> dict:
    """pytest's last line (passed, skipped, failed, errors, its own seconds) and the reasons of its skips (`-ra`'s
    "SKIPPED [N] file:line: reason" lines): a run without Chromium skips the site's browser checks, and its time is
    not the full suite's."""
    lines = log.read_text(errors="replace").splitlines()
    last = next((line for line in reversed(lines) if re.search(r"\bin [\d.]+s\b", line)), "")
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (passed|skipped|failed|errors?)", last)}
    seconds = re.search(r"\bin ([\d.]+)s\b", last)
    skips = [
        f"{count} in {where}: {why}"
        for count, where, why in re.findall(
            r"^SKIPPED \[(\d+)\] (\S+?):\d+: (.*)$", "\n".join(lines), flags=re.MULTILINE
        )
    ]
    return {**counts, "pytest_seconds": float(seconds.group(1)) if seconds else None, "skipped_because": skips}


def profile_table(folder: Path, files: int) -> tuple[dict, list[str]]:
    """The workers' records summed per test file: (totals, the longest `files` as table rows)."""
    per_file: dict[str, dict[str, float]] = {}
    for path in folder.glob("*.json"):
        for name, counts in json.loads(path.read_text()).items():
            total = per_file.setdefault(name, {})
            for kind, seconds in counts.items():
                total[kind] = total.get(kind, 0.0) + seconds
    jax_seconds = {name: sum(v for k, v in c.items() if k != "wall") for name, c in per_file.items()}
    totals = {
        kind: round(sum(c.get(kind, 0.0) for c in per_file.values()), 1)
        for kind in ("wall", "trace", "lower", "compile")
    }
    rows = [
        "| test file | seconds in its worker | JAX tracing + lowering + compiling | share |",
        "| --- | ---: | ---: | ---: |",
    ]
    longest = sorted(per_file, key=lambda name: -per_file[name].get("wall", 0.0))[:files]
    for name in longest:
        wall = per_file[name].get("wall", 0.0)
        share = jax_seconds[name] / wall if wall else 0.0
        rows.append(f"| {name} | {wall:.1f} | {jax_seconds[name]:.1f} | {share:.0%} |")
    tested = sum(1 for counts in per_file.values() if counts.get("wall"))  # not "(collection)": imports' compiles
    compiled = totals["trace"] + totals["lower"] + totals["compile"]
    share = f"{compiled / totals['wall']:.0%}" if totals["wall"] else "–"  # no record: the plugin did not load
    rows.append(f"| all {tested} files | {totals['wall']:.1f} | {compiled:.1f} | {share} |")
    return totals, rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--commit", default="HEAD", help="the commit to clone (default: HEAD; uncommitted work is not run)"
    )
    parser.add_argument("--profile", action="store_true", help="record where the suite's time goes, per test file")
    parser.add_argument("--files", type=int, default=15, help="the longest test files the profile lists (default 15)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and the environment")
    parser.add_argument("--out", type=Path, help="a new folder for the record and the logs")
    arguments = parser.parse_args(argv)
    if arguments.files < 1:
        parser.error(f"--files must be at least 1, got {arguments.files}")
    if arguments.out is not None and arguments.out.exists():
        parser.error(f"--out must be a new folder: {arguments.out} exists")
    known = subprocess.run(
        ["git", "-C", str(REPOSITORY), "rev-parse", "--verify", "--quiet", f"{arguments.commit}^{{commit}}"],
        capture_output=True,
    )
    if known.returncode:
        parser.error(f"--commit: {arguments.commit!r} is not a commit of {REPOSITORY}")
    return arguments


def fresh_checkout(commit: str, work: Path) -> tuple[str, Path, Path]:
    """A clone of this repository at `commit` and a new venv, in `work`: (short commit, clone, venv)."""
    short = subprocess.run(
        ["git", "-C", str(REPOSITORY), "rev-parse", "--short", commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    repository, venv = work / "repository", work / "venv"
    subprocess.run(["git", "clone", "--quiet", str(REPOSITORY), str(repository)], check=True)
    subprocess.run(["git", "-C", str(repository), "checkout", "--quiet", "--detach", short], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return short, repository, venv


def profiled(environment: dict, work: Path) -> tuple[dict, Path]:
    """`environment` with the profile's plugin loaded by pytest (PYTEST_ADDOPTS): (it, the folder of its records)."""
    plugins = work / "plugins"
    (plugins / "profile").mkdir(parents=True)
    (plugins / "fresh_install_profile.py").write_text(PLUGIN)
    variables = {"PYTHONPATH": str(plugins), "PYTEST_ADDOPTS": "-p fresh_install_profile"}
    return {**environment, **variables, "FRESH_INSTALL_PROFILE": str(plugins / "profile")}, plugins / "profile"


def is_suite(part: str) -> bool:
    """Whether a command's part runs the test suite (the profile's plugin goes there, its counts come from it)."""
    return "pytest" in part.split()


def run_commands(commands: list[str], repository: Path, environment: dict, suite_environment: dict, out: Path):
    """Each command part by part, stopping at the first that fails (as `&&` does): the parts' records."""
    parts = []
    for index, command in enumerate(commands, start=1):
        for number, part in enumerate(command.split(" && "), start=1):
            uses = suite_environment if is_suite(part) else environment
            parts.append(run_part(part, repository, uses, out / f"command{index}-part{number}.log"))
            if parts[-1]["status"]:
                return parts
    return parts


def summary(record: dict) -> list[str]:
    """The record's lines for the terminal: the demo's, then the suite's against its budget."""
    lines = []
    if demo := record["demo"]:
        lines.append(f"demo: {demo['status']}, its record {demo['seconds']} s, claim holds: {demo['claim_holds']}")
    if suite := record["suite"]:
        minutes, seconds = divmod(round(suite["seconds"]), 60)
        within = "within" if suite["seconds"] <= BUDGET_SECONDS else "over"
        counts = ", ".join(
            f"{n} {w}" for w, n in suite.items() if w in ("passed", "skipped", "failed", "error", "errors")
        )
        lines.append(
            f"suite: exit {suite['status']}, {counts or 'no counts'} in {minutes} min {seconds:02d} s, {within} its "
            f"{BUDGET_SECONDS // 60}-minute budget"
        )
        lines += [f"  skipped: {reason}" for reason in suite.get("skipped_because", [])]
    return lines


def main(argv=None) -> int:
    arguments = parse_args(argv)
    out = arguments.out or Path.cwd() / datetime.datetime.now().strftime("fresh-install-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=False)
    free = shutil.disk_usage(out).free / 2**30
    if free < 2 * DISK_GIB:
        raise SystemExit(
            f"{out} has {free:.1f} GiB free: a fresh install needs about {DISK_GIB} GiB (twice that asked)"
        )
    print(f"about {MINUTES} min on 2 cores and {DISK_GIB} GiB in {out / 'work'} (removed at the end unless --keep)")
    load = os.getloadavg()[0]
    work = out / "work"  # made here, removed here: the clone, the venv, HOME and TMPDIR; the logs stay in `out`
    work.mkdir()
    try:
        commit, repository, venv = fresh_checkout(arguments.commit, work)
        environment = new_user_environment(work, venv)
        commands = quickstart_commands((repository / "README.md").read_text(encoding="utf-8"))
        print(f"fresh install of {commit} in {work}", flush=True)
        suite_environment, profile = profiled(environment, work) if arguments.profile else (environment, None)
        parts = run_commands(commands, repository, environment, suite_environment, out)
        suite = next((part for part in parts if is_suite(part["command"])), None)
        record = {
            "commit": commit,
            "date": datetime.date.today().isoformat(),
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "load_at_start": load,
            "commands": commands,
            "parts": parts,
            "demo": demo_record(repository),
            "suite": {
                **suite_counts(out / suite["log"]),
                "status": suite["status"],
                "seconds": suite["seconds"],
                "budget": BUDGET_SECONDS,
            }
            if suite
            else {},
        }
        if profile is not None and suite:
            record["profile"], rows = profile_table(profile, arguments.files)
            print("\n".join(rows))
    finally:
        if not arguments.keep:
            shutil.rmtree(work)
    (out / "fresh_install.json").write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join([*summary(record), f"record: {out / 'fresh_install.json'}"]))
    return 1 if any(part["status"] for part in parts) else 0  # a failed part was the last run: none failed, all ran


if __name__ == "__main__":
    sys.exit(main())
