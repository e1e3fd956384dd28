"""The command line, run as a user would, and the results it writes (docs/results.md).

Compilation dominates on 2 CPU cores, and a subprocess pays its imports and compiles every program
again. So the runs that exercise JAX are few and tiny and run in this process (`main`), sized so
that they share compiled programs with the demo's: `flow`, `compare`, `verify` and `portrait`
integrate as many starts at the same d, L and saved times as the demo's comparison and check. What
only a separate process shows (exit status, stderr, no traceback, the same numbers from two
processes, derive) runs in subprocesses, started one after the other in the background when this
module starts, sharing a persistent compilation cache.
"""

import contextlib
import csv
import errno
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import results, slr
from flowsim.cli import _parser, main
from flowsim.derivations.build import GENERATED_FILES
from flowsim.integrate import evaluate
from flowsim.tasks.slr import _generated as generated
from tests.shared import command_in_this_process

REPOSITORY = Path(__file__).resolve().parent.parent
#: The sizes the runs in this process share: dimension, tokens, starts (or seeds), saved (or logged) times.
D, L, N, SAVES = 10, 4, 2, 61
#: An SGD run on the overlaps with the demo's sizes: in this process it reuses the demo's compiled chain.
SGD = f"sgd --d {D} --L {L} --steps {SAVES - 1} --log-every 1 --seeds {N} --seed 3 --decay 1e-3"
#: Subprocess runs: name: arguments (--out is added).
PROCESSES = {"sgd": SGD, "derive": "derive"}
#: Bad inputs run in subprocesses (the whole process says one line and exits with 2): (arguments,
#: the start of the one line on stderr). Every other bad input is in tests/test_bad_inputs.py.
BAD_INPUTS = [
    ("nonsense", "flowsim: error: argument command: invalid choice: 'nonsense'"),
    (
        "sgd --d -3",
        "flowsim sgd: error: --d must be an integer in [5, 2**53] (every command: SGD on the overlaps needs",
    ),
    ("flow --out {file}/results", "flowsim flow: error: cannot write results into"),
]
IN_SUBPROCESSES = len(BAD_INPUTS)
DEMO = f"demo --d {D} --L {L} --bayes-samples 200 --sgd-d {D} --sgd-steps {SAVES - 1} --sgd-seeds {N}"
DEMO += f" --verify-d {D} --verify-n {N}"


def _flowsim(arguments: str, env=None, module: str = "flowsim.cli") -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", module, *arguments.split()]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=REPOSITORY)


@pytest.fixture(scope="module", autouse=True)
def processes(tmp_path_factory):
    """{name: future of (completed process, output folder)}: every subprocess run, queued at once."""
    base = tmp_path_factory.mktemp("processes")
    env = dict(os.environ)  # with the session's compilation cache (tests/conftest.py)
    # One JAX device, as the runs in this process: their files are compared byte for byte (and the other
    # test worker keeps its core). Several devices are checked against one in tests/test_devices.py.
    env["FLOWSIM_HOST_DEVICES"] = "1"
    regular_file = base / "a-file"
    regular_file.write_text("")

    def run(name, arguments, variables=None):
        out = base / name
        return _flowsim(f"{arguments} --out {out}", {**env, **(variables or {})}), out

    # One at a time: the runs in this process are the critical path.
    with ThreadPoolExecutor(max_workers=1) as pool:
        futures = {name: pool.submit(run, name, arguments) for name, arguments in PROCESSES.items()}
        for i, (arguments, _) in enumerate(BAD_INPUTS[:IN_SUBPROCESSES]):
            futures[f"bad {i}"] = pool.submit(_flowsim, arguments.format(file=regular_file))
        futures["python -m flowsim"] = pool.submit(_flowsim, BAD_INPUTS[0][0], None, "flowsim")
        # A platform this machine lacks (a GPU's, without the GPU or JAX's plugin for it).
        futures["no platform"] = pool.submit(run, "no-platform", SGD, {"JAX_PLATFORMS": "cuda"})
        # Without a standard error, and with a backend matplotlib does not know (a desktop's would start its
        # toolkit): two conditions a user's shell may set, each checked by its own test on this one run.
        unknown_backend = {**env, "MPLBACKEND": "no-such-backend"}
        futures["no stderr"] = pool.submit(_without_stderr, f"{SGD} --out {base / 'no-stderr'}", unknown_backend)
        yield futures


#: The executable's entry in a process started without a standard error (`flowsim ... 2>&-`, a daemon's start:
#: Python's sys.stderr is None), then whether descriptor 2 is os.devnull after the run.
_WITHOUT_STDERR = """
import os, sys
os.close(2)
sys.stderr = sys.__stderr__ = None
from flowsim.cli import command
sys.argv = ["flowsim", *sys.argv[1:]]
status = command()
devnull, now = os.stat(os.devnull), os.fstat(2)
print("descriptor 2 is os.devnull:", (now.st_dev, now.st_ino) == (devnull.st_dev, devnull.st_ino))
sys.exit(status)
"""


def _without_stderr(arguments: str, env) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", _WITHOUT_STDERR, *arguments.split()]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=REPOSITORY)


def _run(capsys, arguments: str) -> tuple[int, str, str]:
    """`flowsim ARGUMENTS` in this process: (exit status, stdout, stderr)."""
    status = main(arguments.split())
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _succeeded(processes, name):
    result, out = processes[name].result()
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result, out


def _table(path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def _column(rows, name) -> np.ndarray:
    return np.array([float(row[name]) for row in rows])


def _overlaps(rows) -> np.ndarray:
    return np.array([[float(row[name]) for name in slr.OVERLAP_NAMES] for row in rows])


def _record(out) -> dict:
    return json.loads((out / "run.json").read_text())


def _assert_files(out, expected):
    """The files promised are there and nothing else (no temporary file left), figures are valid,
    run.json lists them."""
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != "run.json")
    assert written == sorted(expected)
    assert sorted(_record(out)["files"]) == sorted(expected)
    for name in expected:
        content = (out / name).read_bytes()
        magic = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-"}.get(Path(name).suffix, b"")
        assert len(content) > (1000 if magic else 0) and content.startswith(magic), name


def _assert_record(out, command, **parameters) -> dict:
    """run.json: the command, the parameters given, start time, timings and the environment."""
    record = _record(out)
    assert record["command"] == f"flowsim {command}"
    for name, value in parameters.items():
        assert record["parameters"][name] == value, name
    assert record["parameters"]["out"] == str(out)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["started"])
    assert record["durations_s"]["total"] >= sum(record["durations_s"]["phases"].values()) > 0
    environment = record["environment"]
    assert environment["packages"]["jax"] == jax.__version__ and environment["jax_devices"]
    assert environment["python"] == ".".join(map(str, sys.version_info[:3]))
    assert environment["platform"] and environment["cpu_count"] >= 1
    return record


def _assert_fixed_points(path):
    """The fixed points on M: sinks +-(1, 1), sources (1, -1) and (-1, 1), the saddle (0, 0)."""
    points = {(round(float(row["kappa"])), round(float(row["nu"]))): row for row in _table(path)}
    kinds = {corner: row["kind"] for corner, row in points.items()}
    assert kinds == {(1, 1): "sink", (-1, -1): "sink", (1, -1): "source", (-1, 1): "source", (0, 0): "saddle"}
    assert float(points[(1, 1)]["eigenvalue_1_real"]) < 0 and float(points[(1, 1)]["eigenvalue_2_real"]) < 0


# ---------------------------------------------------------------------------------------------
# Each command's quick path, in this process


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(exit status, stdout, stderr, output folder) of the demo at the sizes of DEMO."""
    out = tmp_path_factory.mktemp("demo")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = main([*DEMO.split(), "--out", str(out)])
    return status, stdout.getvalue(), stderr.getvalue(), out


def test_demo_writes_every_part(demo):
    status, _, stderr, out = demo
    assert status == 0 and stderr == ""
    _assert_files(
        out,
        ["risks.csv"]
        + [f"portrait/{name}" for name in ("fixed_points.csv", "portrait_trajectories.csv")]
        + [f"portrait/phase_portrait.{suffix}" for suffix in ("png", "pdf")]
        + [f"compare/{name}" for name in ("trajectories.csv", "deviations.csv", "compare.png", "compare.pdf")]
        + [f"verify/{name}" for name in ("verify.csv", "verify_attractors.csv")],
    )
    record = _assert_record(out, "demo", d=D, L=L, sgd_d=D, sgd_steps=SAVES - 1, verify_n=N, seed=0)
    assert record["status"] == "ok" and record["summary"] == {"claim_holds": True}
    assert set(record["durations_s"]["phases"]) == {"risks", "portrait", "sgd", "compare", "verify"}
    problem = slr.Problem(D, L, 0.1)
    risks = _table(out / "risks.csv")
    assert risks[0]["predictor"] == "oracle (k, v) = (k*, v*)"
    assert float(risks[0]["risk"]) == float(slr.oracle_risk(problem))  # repr: the same float64
    assert float(risks[1]["risk"]) == slr.linear_risk(problem)
    _assert_fixed_points(out / "portrait" / "fixed_points.csv")
    # The paper's SGD run: lam = 2 / (1 + 1e-4 step) at lr = 1e-3, logged at every step.
    rows = [row for row in _table(out / "compare" / "trajectories.csv") if row["source"] == "sgd"]
    step = _column(rows, "step")
    np.testing.assert_array_equal(step, np.tile(np.arange(SAVES), N))
    np.testing.assert_allclose(_column(rows, "lam"), 2.0 / (1 + 1e-4 * step), rtol=1e-15)
    checks = _table(out / "verify" / "verify.csv")
    assert [row["init"] for row in checks] == ["manifold", "sphere"] * 3
    assert all(float(row["target_share"]) == 1.0 for row in checks if row["init"] == "manifold")


def test_demo_prints_the_risks_the_portrait_the_comparison_and_the_check(demo):
    _, stdout, _, out = demo
    line = next(line for line in stdout.splitlines() if line.startswith("oracle"))
    oracle = float(slr.oracle_risk(slr.Problem(D, L, 0.1)))
    assert float(re.split(r"\s{2,}", line)[1]) == pytest.approx(oracle, abs=5e-7)
    for text in ("best linear predictor", "Bayes predictor", "Fixed points of the flow on M", "SGD vs gradient flow"):
        assert text in stdout
    assert "Claim 'almost every start on M converges to +-(k*, v*)' (share >= 99%): HOLDS" in stdout
    assert f"Results in {out}/" in stdout and str(out / "compare" / "compare.png") in stdout


def test_flow_writes_trajectories_from_the_drawn_starts(tmp_path, capsys):
    arguments = f"flow --d {D} --L {L} --n {N} --t-max 2 --saves {SAVES} --decay 1e-3 --out {tmp_path}"
    status, stdout, _ = _run(capsys, arguments)
    assert status == 0 and "trajectory  status" in stdout
    _assert_files(tmp_path, ["trajectories.csv", "endpoints.csv", "trajectories.png", "trajectories.pdf"])
    _assert_record(tmp_path, "flow", d=D, L=L, n=N, t_max=2.0, saves=SAVES, decay=1e-3, init="sphere", seed=0)
    rows = _table(tmp_path / "trajectories.csv")
    assert [row["trajectory"] for row in rows] == [str(i) for i in range(N) for _ in range(SAVES)]
    t = _column(rows, "t")
    np.testing.assert_array_equal(t[:SAVES], np.linspace(0.0, 2.0, SAVES))
    # lam(t) = lam / (1 + decay * step) on the clock t = alpha * step.
    np.testing.assert_allclose(_column(rows, "lam"), 0.1 / (1 + 1e-3 * t / 4e-3), rtol=1e-15)
    starts = _overlaps(rows[::SAVES])
    np.testing.assert_array_equal(starts, slr.initial_overlaps(jax.random.key(0), D, N, "sphere"))
    risk = slr.population_risk(slr.Problem(D, L, 0.1), starts)
    np.testing.assert_allclose(_column(rows[::SAVES], "risk"), risk, rtol=1e-12)
    ends = _table(tmp_path / "endpoints.csv")
    assert [row["status"] for row in ends] == ["success"] * N
    np.testing.assert_allclose(_overlaps(ends), _overlaps(rows[SAVES - 1 :: SAVES]), rtol=1e-12)


def test_verify_exits_1_when_the_claim_fails(tmp_path, capsys):
    """With a horizon far too short to converge, the claim fails: exit status 1, results written."""
    arguments = f"verify --d {D} --L {L} --n {N} --saves {SAVES} --t-max 0.5 --out {tmp_path}"
    status, stdout, stderr = _run(capsys, arguments)
    assert status == 1
    assert "FAILS" in stdout and "lam = 0.1" in stdout and "lam = 0.9" in stdout
    assert stderr.strip() == "flowsim verify: the claim failed: not almost every start on M converges to +-(k*, v*)"
    # Each (setting, init) row is a finished unit of the run (--resume), stored as it finishes.
    units = [f"units/setting-{i}-{init}.npz" for i in range(3) for init in ("manifold", "sphere")]
    _assert_files(tmp_path, ["verify.csv", "verify_attractors.csv", *units])
    record = _assert_record(tmp_path, "verify", d=D, L=L, n=N, t_max=0.5, saves=SAVES, min_share=0.99)
    assert record["status"] == "ok" and record["summary"] == {"claim_holds": False}
    rows = _table(tmp_path / "verify.csv")
    assert [(row["setting"], row["init"]) for row in rows[:2]] == [("lam = 0.1", "manifold"), ("lam = 0.1", "sphere")]
    assert all(row["n"] == str(N) for row in rows) and float(rows[0]["target_share"]) < 0.99


def test_compare_writes_deviations_that_match_its_trajectories(tmp_path, capsys):
    arguments = f"compare --d {D} --L {L} --steps {SAVES - 1} --log-every 1 --seeds {N} --decay 1e-4 --out {tmp_path}"
    status, stdout, _ = _run(capsys, arguments)
    assert status == 0
    assert "SGD vs gradient flow" in stdout and str(tmp_path / "compare.png") in stdout
    _assert_files(tmp_path, ["trajectories.csv", "deviations.csv", "compare.png", "compare.pdf"])
    _assert_record(tmp_path, "compare", engine="overlaps", reference="flow", seeds=N, decay=1e-4, lr=1e-3)
    rows = _table(tmp_path / "trajectories.csv")
    sgd, flow = ([row for row in rows if row["source"] == source] for source in ("sgd", "flow"))
    assert len(sgd) == len(flow) == N * SAVES
    deviations = _table(tmp_path / "deviations.csv")
    for name in (*slr.OVERLAP_NAMES, "risk"):
        gap = np.abs(_column(sgd, name) - _column(flow, name)).reshape(N, SAVES).max(axis=1)
        np.testing.assert_array_equal(_column(deviations, f"max_dev_{name}"), gap)
    assert [row["kappa"] for row in sgd[::SAVES]] == [row["kappa"] for row in flow[::SAVES]]  # the same starts


def test_portrait_writes_fixed_points_and_basins(tmp_path, capsys):
    arguments = f"portrait --d {D} --L {L} --basins --basin-n {N} --basin-t-max 20 --out {tmp_path}"
    status, stdout, _ = _run(capsys, arguments)
    assert status == 0 and "Fixed points of the flow on M" in stdout
    figures = [f"{stem}.{suffix}" for stem in ("phase_portrait", "basins") for suffix in ("png", "pdf")]
    tables = ["fixed_points.csv", "portrait_trajectories.csv", "basins.csv", "attractors.csv"]
    _assert_files(tmp_path, figures + tables)
    _assert_record(tmp_path, "portrait", d=D, L=L, lam=0.1, basins=True, basin_n=N, trajectories=8, grid=41)
    _assert_fixed_points(tmp_path / "fixed_points.csv")
    attractors = _table(tmp_path / "attractors.csv")
    labels = [int(row["attractor"]) for row in _table(tmp_path / "basins.csv")]
    assert len(labels) == N and set(labels) <= {-1, *range(len(attractors))}
    assert [int(row["count"]) for row in attractors] == [labels.count(i) for i in range(len(attractors))]
    trajectories = _table(tmp_path / "portrait_trajectories.csv")
    assert {row["trajectory"] for row in trajectories} == {str(i) for i in range(8)}
    assert list(trajectories[0]) == ["trajectory", "t", "lam", "kappa", "nu", "risk"]


def test_reproduce_writes_the_summary_and_every_logged_step(tmp_path, capsys):
    arguments = f"reproduce --quick --seeds {N} --only init_manifold --out {tmp_path}"
    status, stdout, _ = _run(capsys, arguments)
    assert status == 0 and "init_manifold" in stdout
    figures = ["init_manifold.png", "init_manifold.pdf"]
    _assert_files(tmp_path, ["summary.csv", "attractors.csv", "trajectories.csv", *figures, "units/init_manifold.npz"])
    _assert_record(tmp_path, "reproduce", quick=True, seeds=N, only=["init_manifold"], engine="overlaps", seed=0)
    (summary,) = _table(tmp_path / "summary.csv")
    assert (summary["experiment"], summary["steps"], summary["seeds"]) == ("init_manifold", "6000", str(N))
    assert int(summary["reached"]) + int(summary["approaching"]) == N  # docs/science.md section 5, on M
    rows = _table(tmp_path / "trajectories.csv")
    assert len(rows) == N * (6000 // 30 + 1)
    np.testing.assert_allclose(_column(rows, "t"), 4e-3 * _column(rows, "step"), rtol=1e-15)
    np.testing.assert_array_equal(_column(rows, "theta"), 0.0)  # M is invariant under the map


def test_help_gives_every_option_its_default_and_range(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["sgd", "--help"])
    assert exit.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "--d D token dimension d; an integer in [5, 2**53] (every command: SGD on the overlaps needs d >= 5) "
        "(default: 80)" in text
    )
    assert "--engine {overlaps,rd}" in text and "(default: overlaps)" in text
    assert "(default: 200000)" in text and "(default: 0.001)" in text


def test_a_list_of_names_is_space_or_comma_separated():
    """--maps, --learners and --only take names as the number lists take numbers (comma-separated) or as argparse
    does (space-separated), in the order given, a repeated name once; the defaults as documented."""
    parser = _parser()

    def parsed(line: str):
        return parser.parse_args(line.split())

    assert parsed("advantage --maps erf,softmax linear softmax").maps == ("erf", "softmax", "linear")
    assert parsed("advantage").maps == tuple(slr.ATTENTION_MAPS)
    assert parsed("sparse sweep --learners head,l1").learners == ("head", "l1")
    assert parsed("sparse sweep").learners == ("l1", "head")
    assert parsed("reproduce --only sgd_sphere_schedule,init_manifold").only == ("sgd_sphere_schedule", "init_manifold")
    assert parsed("reproduce").only is None


# ---------------------------------------------------------------------------------------------
# In subprocesses: the same numbers from two processes, a numerical failure, derive, bad input


def test_sgd_writes_the_same_numbers_for_the_same_seed(processes, tmp_path):
    """The same arguments and seed in another process (a subprocess, then this one) write the same bytes."""
    _, out = _succeeded(processes, "sgd")
    assert main([*SGD.split(), "--out", str(tmp_path), "--no-progress"]) == 0
    _assert_files(out, ["trajectories.csv", "sgd.png", "sgd.pdf"])
    _assert_record(out, "sgd", d=D, L=L, steps=SAVES - 1, log_every=1, seeds=N, engine="overlaps", seed=3, decay=1e-3)
    assert (out / "trajectories.csv").read_bytes() == (tmp_path / "trajectories.csv").read_bytes()
    rows = _table(out / "trajectories.csv")
    assert list(rows[0]) == ["seed", "step", "t", "lam", *slr.OVERLAP_NAMES, "risk"]
    step = _column(rows, "step")
    np.testing.assert_array_equal(step, np.tile(np.arange(SAVES), N))
    np.testing.assert_array_equal(_column(rows, "t"), 1e-3 * step)
    np.testing.assert_allclose(_column(rows, "lam"), 2.0 / (1 + 1e-3 * step), rtol=1e-15)
    risk = evaluate(generated.risk, *_overlaps(rows).T, D, L, _column(rows, "lam"), math.sqrt(0.5), 0.1)
    np.testing.assert_allclose(_column(rows, "risk"), risk, rtol=1e-12)


def _command(monkeypatch, stdout, out: Path) -> int:
    """`command()`, the executable's entry, in this process: the SGD run of `SGD` into `out`, printing into `stdout`."""
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setenv("FLOWSIM_HOST_DEVICES", "1")  # nothing to split: JAX has started here
    monkeypatch.setattr(sys, "argv", ["flowsim", *SGD.split(), "--out", str(out), "--no-progress"])
    return command_in_this_process(monkeypatch)


def test_a_name_the_console_cannot_show_is_escaped(tmp_path, monkeypatch):
    """An ASCII console (PYTHONIOENCODING=ascii) and a folder named "résultats": exit 0 and the name printed escaped,
    not a finished run ended as an internal error by its list of files."""
    console = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    assert _command(monkeypatch, console, tmp_path / "résultats") == 0
    console.flush()
    assert f"{tmp_path}/r\\xe9sultats/run.json" in console.buffer.getvalue().decode("ascii")
    assert _record(tmp_path / "résultats")["status"] == "ok"


def test_a_researchers_map_file_is_loaded_once_and_what_it_raises_is_said(tmp_path, monkeypatch):
    """--attention FILE.py:NAME: a file runs once per process however many of its maps are named (the same map
    each time, so the same compiled programs), and again once edited; one of the same name in another folder is
    another module; a file that raises, even SystemExit, is invalid input saying what it raised, and leaves no module
    behind."""
    from flowsim.tasks.slr._own_maps import loaded_digest, own_map

    monkeypatch.chdir(tmp_path)
    maps = (
        "import jax.numpy as jnp\nfrom flowsim import slr\nopen('runs.txt', 'a').write('run\\n')\n"
        'tempered = slr.AttentionMap("tempered softmax", log_f=lambda x: x / {t}, normalisation="tokens")\n'
        'capped = slr.AttentionMap("capped softmax", log_f=lambda x: jnp.minimum(x, 1.0), normalisation="tokens")\n'
    )
    Path("maps.py").write_text(maps.format(t=2))
    Path("other").mkdir()
    Path("other/maps.py").write_text(maps.format(t=4))
    Path("broken.py").write_text("raise RuntimeError('a bug of mine')\n")
    Path("exits.py").write_text("import sys\nsys.exit(2)\n")
    tempered = own_map("maps.py:tempered")
    assert own_map("maps.py:capped").name == "capped softmax" and own_map(f"{tmp_path}/maps.py:tempered") is tempered
    assert Path("runs.txt").read_text() == "run\n"
    np.testing.assert_allclose(tempered.weights(jnp.array([2.0, 0.0])), [np.e / (np.e + 1), 1 / (np.e + 1)])
    other = own_map("other/maps.py:tempered")
    assert other is not tempered and float(other.weights(jnp.array([4.0, 0.0]))[0]) == pytest.approx(np.e / (np.e + 1))
    loaded = set(sys.modules)
    with pytest.raises(ValueError, match=r"^broken.py:x: loading broken.py raised RuntimeError: a bug of mine$"):
        own_map("broken.py:x")
    with pytest.raises(ValueError, match=r"^exits.py:x: loading exits.py raised SystemExit: 2$"):
        own_map("exits.py:x")
    assert set(sys.modules) == loaded
    # Edited between two runs in one process (a notebook calling `main`): the new contents run, and the digest
    # recorded is theirs, so that --resume compares what each run computed with.
    before = loaded_digest("maps.py:tempered")
    Path("maps.py").write_text(maps.format(t=8))
    edited = own_map("maps.py:tempered")
    assert edited is not tempered and float(edited.weights(jnp.array([8.0, 0.0]))[0]) == pytest.approx(
        np.e / (np.e + 1)
    )
    assert before == hashlib.sha256(maps.format(t=2).encode()).hexdigest() != loaded_digest("maps.py:tempered")
    assert loaded_digest("maps.py:tempered") == hashlib.sha256(maps.format(t=8).encode()).hexdigest()
    assert Path("runs.txt").read_text() == "run\nrun\nrun\n"  # maps.py twice, other/maps.py once


def test_the_executable_keeps_jaxs_standard_promotion(tmp_path, monkeypatch):
    """JAX_NUMPY_DTYPE_PROMOTION=strict and JAX_NUMPY_RANK_PROMOTION=raise, set for a user's own code, used to end
    `flowsim sgd` as an internal error (TypePromotionError); the executable's process keeps JAX's defaults."""
    settings = {"jax_numpy_dtype_promotion": "strict", "jax_numpy_rank_promotion": "raise"}
    before = {name: getattr(jax.config, name) for name in settings}
    try:
        for name, value in settings.items():
            jax.config.update(name, value)
        assert _command(monkeypatch, io.StringIO(), tmp_path) == 0
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
    assert _record(tmp_path)["status"] == "ok"


class _Ended(Exception):
    """Raised by `os._exit` in the tests of `executable` (`ending`), with the process's status."""


@pytest.fixture
def ending(monkeypatch):
    """`os._exit` raising `_Ended(status)` instead of ending the test's process."""

    def end(status):
        raise _Ended(status)

    monkeypatch.setattr(os, "_exit", end)


def test_the_executable_flushes_its_streams_and_ends_with_the_commands_status(monkeypatch, ending):
    """`executable` ends the process without tearing the interpreter down (`os._exit`): what the command printed into
    buffered streams is flushed first, and the process's status is the command's."""
    import flowsim.cli

    streams = {name: io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for name in ("stdout", "stderr")}
    for name, stream in streams.items():
        monkeypatch.setattr(sys, name, stream)

    def run() -> int:
        print("the last table", end="")
        print("a note", end="", file=sys.stderr)
        return 7

    monkeypatch.setattr(flowsim.cli, "command", run)
    with pytest.raises(_Ended) as ended:
        flowsim.cli.executable()
    assert ended.value.args == (7,)
    assert [streams[name].buffer.getvalue() for name in ("stdout", "stderr")] == [b"the last table", b"a note"]


@pytest.mark.parametrize(("code", "status", "said"), [(None, 0, ""), (2, 2, ""), ("a message", 1, "a message\n")])
def test_the_executable_ends_an_exit_of_argparse_with_pythons_status(monkeypatch, capsys, ending, code, status, said):
    """`--help` and a usage error (argparse's SystemExit) end the process as a run does, without the teardown, with
    the status Python would give: no code 0, a number itself, anything else printed on stderr with 1."""
    import flowsim.cli

    def exits():
        raise SystemExit(code)

    monkeypatch.setattr(flowsim.cli, "command", exits)
    with pytest.raises(_Ended) as ended:
        flowsim.cli.executable()
    assert ended.value.args == (status,)
    assert capsys.readouterr().err == said


def test_a_reader_that_stops_early_does_not_end_the_run(tmp_path, monkeypatch):
    """`flowsim sgd | head -1`: the pipe's reader is gone before the run prints; the run goes on to exit 0, every file
    written (a print into the closed pipe used to end it as an internal error, its figures unwritten)."""
    reader, writer = os.pipe()
    os.close(reader)
    pipe = io.TextIOWrapper(io.FileIO(writer, "w"), encoding="utf-8", line_buffering=True)
    try:
        assert _command(monkeypatch, pipe, tmp_path) == 0
    finally:
        pipe.close()  # into os.devnull by then
    _assert_files(tmp_path, ["trajectories.csv", "sgd.png", "sgd.pdf"])
    assert _record(tmp_path)["status"] == "ok"


def test_a_cache_folder_that_cannot_be_made_is_said_and_skipped(tmp_path, monkeypatch, capsys):
    """A compilation cache under a regular file (as a read-only home would refuse it): one note on stderr, the cache
    off for the run, instead of JAX's warnings at every compile."""
    from flowsim.cli import _compilation_cache

    folder = tmp_path / "a-file" / "jax"
    folder.parent.write_text("")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(folder))
    enabled, before = jax.config.jax_enable_compilation_cache, jax.config.jax_compilation_cache_dir
    try:
        _compilation_cache()
        assert jax.config.jax_enable_compilation_cache is False
        assert jax.config.jax_compilation_cache_dir == before
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
    assert capsys.readouterr().err == (
        f"flowsim: note: compiled programs are not kept for the next run: {folder} cannot be written (Not a "
        "directory); JAX_COMPILATION_CACHE_DIR=FOLDER names another, FLOWSIM_COMPILATION_CACHE=0 none\n"
    )


def test_a_diverging_sgd_run_exits_1_and_keeps_its_results(tmp_path, capsys):
    """In this process, on the overlaps with the demo's sizes (its compiled chain serves)."""
    arguments = f"sgd --d {D} --L {L} --steps {SAVES - 1} --log-every 1 --seeds {N} --lr 1e300 --out {tmp_path}"
    assert main([*arguments.split(), "--no-progress"]) == 1
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert stderr.splitlines() == [
        f"flowsim sgd: numerical failure: seed {seed} diverged at step 1 (t = 1e+300): the iterate became non-finite"
        for seed in range(N)
    ]
    _assert_files(tmp_path, ["trajectories.csv", "sgd.png", "sgd.pdf"])
    record = _assert_record(tmp_path, "sgd", lr=1e300, engine="overlaps")
    assert record["status"] == "numerical failure"
    assert [(f["seed"], f["step"], f["t"]) for f in record["failures"]] == [(seed, 1, 1e300) for seed in range(N)]
    rows = _table(tmp_path / "trajectories.csv")
    kappa, step = _column(rows, "kappa"), _column(rows, "step")
    assert np.isfinite(kappa[step == 0]).all() and np.isnan(kappa[step > 0]).all()


def test_sgd_and_compare_say_the_same_of_a_run_whose_risk_rose(tmp_path, capsys):
    """At lr = 0.3 the chain stays finite (each step is renormalised) but a seed's risk may end far above where it
    started (with these keys seed 1's: 4.97 to 7.51; which seeds rise is the draws' chance): `sgd` and `compare`,
    given the same run (the demo's sizes: its compiled chain and flow serve), both report those seeds as diverged
    and exit 1. `compare` said nothing of it before."""
    said = {}
    for name in ("sgd", "compare"):
        arguments = f"{name} --d {D} --L {L} --steps {SAVES - 1} --log-every 1 --seeds {N} --decay 1e-4 --lr 0.3"
        assert main([*arguments.split(), "--out", str(tmp_path / name), "--no-progress"]) == 1
        said[name] = [line.removeprefix(f"flowsim {name}: ") for line in capsys.readouterr().err.splitlines()]
    assert said["sgd"] == said["compare"]
    assert [line.split(": its risk rose")[0] for line in said["sgd"]] == ["numerical failure: seed 1 diverged"]


def test_derive_regenerates_the_equations_outside_the_package(processes):
    """Also the staleness check of the generated files: a fresh derivation equals them byte for byte."""
    result, out = _succeeded(processes, "derive")
    generated_files = list(GENERATED_FILES)  # every task's
    assert {"flowsim/tasks/slr/_generated.py", "docs/equations.md"} <= set(generated_files)
    _assert_files(out, generated_files)
    for name in generated_files:
        assert (out / name).read_text() == (REPOSITORY / name).read_text(), f"{name} is stale: python -m derivations"
        assert f"{name}: identical to" in result.stdout
    assert "Projected gradient flow on the overlaps" in result.stdout and r"\dot{\kappa}" in result.stdout
    assert _record(out)["summary"] == {"same_as_installed": dict.fromkeys(generated_files, True)}


@pytest.mark.parametrize(
    "case", range(IN_SUBPROCESSES), ids=[arguments for arguments, _ in BAD_INPUTS[:IN_SUBPROCESSES]]
)
def test_bad_input_is_one_line_with_status_2(processes, case):
    result, message = processes[f"bad {case}"].result(), BAD_INPUTS[case][1]
    assert result.returncode == 2
    assert result.stderr.startswith(message)
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1


def test_python_dash_m_flowsim_is_the_command_line(processes):
    result = processes["python -m flowsim"].result()
    assert result.returncode == 2 and result.stderr.startswith(BAD_INPUTS[0][1])


def test_a_platform_jax_cannot_start_is_invalid_input(processes):
    """JAX_PLATFORMS=cuda on a machine without it: one line, exit status 2, no folder (JAX's own error, an assertion
    here, used to end the run as flowsim's internal error, from its first memory estimate)."""
    if any(importlib.util.find_spec(f"jax_cuda{major}_plugin") for major in (12, 13)):
        pytest.skip("JAX's CUDA plugin is installed: JAX_PLATFORMS=cuda may start here")
    result, out = processes["no platform"].result()
    assert result.returncode == 2
    assert result.stderr.startswith("flowsim sgd: error: JAX could not start its devices (JAX_PLATFORMS=cuda): ")
    assert result.stderr.endswith(
        "unset JAX_PLATFORMS for the devices there are, or install the platform's JAX (docs/devices.md)\n"
    )
    assert len(result.stderr.splitlines()) == 1 and not out.exists()


def test_the_executable_draws_on_agg_whatever_mplbackend_says(processes):
    """MPLBACKEND=no-such-backend (the run without stderr has it) used to stop matplotlib's import at the run's first
    figure (exit status 3); the executable only writes files, so it draws on Agg: the same bytes as the run without
    MPLBACKEND."""
    assert processes["no stderr"].result().returncode == 0
    _, plain = _succeeded(processes, "sgd")
    out = plain.parent / "no-stderr"
    for name in ("trajectories.csv", "sgd.png"):
        assert (out / name).read_bytes() == (plain / name).read_bytes(), name


def test_a_process_started_without_stderr_runs_to_its_end(processes):
    """`flowsim sgd ... 2>&-` (MPLBACKEND unknown too: the test above): sys.stderr None used to end the run as an
    internal error (exit status 3), and the next file opened would have taken descriptor 2, where C code's logging
    goes; os.devnull takes it now."""
    result = processes["no stderr"].result()
    assert result.returncode == 0
    assert result.stdout.endswith("descriptor 2 is os.devnull: True\n")
    _, plain = _succeeded(processes, "sgd")
    out = plain.parent / "no-stderr"
    assert (out / "trajectories.csv").read_bytes() == (plain / "trajectories.csv").read_bytes()


# ---------------------------------------------------------------------------------------------
# flowsim.results


def test_an_interrupted_write_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "table.csv"
    results.write_csv(path, {"x": [0.1, 1 / 3]})
    assert path.read_text() == "x\n0.1\n0.3333333333333333\n"

    def interrupted(source, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        results.write_csv(path, {"x": [2.0]})
    assert path.read_text() == "x\n0.1\n0.3333333333333333\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_a_full_disk_names_the_file_and_leaves_no_part(tmp_path, monkeypatch):
    """The OSError of a write refused by the file system names the file (a write into an open file names none), and
    the temporary part is removed."""

    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results.os, "fsync", full)
    with pytest.raises(results.NotWritten) as raised:
        results.write_text(tmp_path / "table.csv", "x\n")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(tmp_path / "table.csv"))
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_is_one_line_with_status_2(tmp_path, capsys, monkeypatch):
    """A disk that fills during a run: exit status 2 and one line naming the file (not an internal error with a
    traceback), the files written before it kept, run.json saying why the run ended."""
    write_bytes = results.write_bytes

    def full_at_the_figure(path, data):
        if Path(path).name == "sgd.png":
            raise results.NotWritten(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_bytes(path, data)

    monkeypatch.setattr(results, "write_bytes", full_at_the_figure)
    assert main([*SGD.split(), "--out", str(tmp_path), "--no-progress"]) == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == (
        f"flowsim sgd: error: cannot write {tmp_path}/sgd.png: No space left on device (the files written before it "
        "are kept; free some space or give another --out)"
    )
    record = _record(tmp_path)
    assert record["status"] == "error"
    assert record["reason"] == f"cannot write {tmp_path}/sgd.png: No space left on device"
    assert record["files"] == ["trajectories.csv"]


@jax.tree_util.register_pytree_node_class
class _Compared:
    """A pytree whose static part (`aux`) JAX compares with the cached program's when the jitted function is called."""

    def __init__(self, x, aux):
        self.x, self.aux = x, aux

    def tree_flatten(self):
        return (self.x,), self.aux

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(children[0], aux)


class _InterruptedWhenCompared:
    """A static value whose comparison is where a Ctrl-C lands (its KeyboardInterrupt raised inside JAX's check)."""

    def __eq__(self, other):
        raise KeyboardInterrupt

    def __hash__(self):
        return 0


def test_a_ctrl_c_inside_jaxs_checks_is_still_a_ctrl_c():
    """JAX turns a KeyboardInterrupt raised while it compares a cached program's static fields into a ValueError
    (seen in a full-suite run: `flowsim sparse sweep` stopped there ended as an internal error, exit status 3);
    `ctrl_c_in` finds the Ctrl-C in it, and in no ordinary error."""
    from flowsim._interrupt import ctrl_c_in

    compared = jax.jit(lambda tree: tree.x + 1)
    compared(_Compared(1.0, _InterruptedWhenCompared()))
    with pytest.raises(ValueError, match="equality of metadata fields") as raised:
        compared(_Compared(1.0, _InterruptedWhenCompared()))
    assert ctrl_c_in(raised.value)
    assert not ctrl_c_in(ValueError("an ordinary error"))


def test_a_ctrl_c_turned_into_another_error_ends_the_run_as_interrupted(tmp_path, capsys, monkeypatch):
    """A Ctrl-C that a library turned into another exception ends the run as a Ctrl-C does (exit status 130, one line,
    run.json "interrupted"), not as flowsim's internal error."""
    write_bytes = results.write_bytes

    def converted_at_the_figure(path, data):
        if Path(path).name == "sgd.png":
            raise ValueError("Exception raised while checking equality") from KeyboardInterrupt()
        return write_bytes(path, data)

    monkeypatch.setattr(results, "write_bytes", converted_at_the_figure)
    assert main([*SGD.split(), "--out", str(tmp_path), "--no-progress"]) == 130
    stderr = capsys.readouterr().err
    assert "internal error" not in stderr and "Traceback" not in stderr
    assert stderr.splitlines()[-1].startswith("flowsim sgd: interrupted by the user (Ctrl-C)")
    assert _record(tmp_path)["status"] == "interrupted"


def test_csv_floats_read_back_exactly_and_tables_are_long(tmp_path):
    values = np.array([[math.pi, -0.0, 1e-300], [np.nan, np.inf, 2.0 / 3.0]])
    table = results.long_table([{"seed": [0, 1]}, {"step": [0, 5, 10], "ok": [True, False, True]}], {"x": values})
    rows = _table(results.write_csv(tmp_path / "t.csv", table))
    assert [(row["seed"], row["step"], row["ok"]) for row in rows[:4]] == [
        ("0", "0", "true"),
        ("0", "5", "false"),
        ("0", "10", "true"),
        ("1", "0", "true"),
    ]
    np.testing.assert_array_equal(_column(rows, "x"), values.ravel())


def test_a_growing_table_is_its_header_and_its_parts_rows():
    """`csv_text(part, header=False)` is the text of the part's rows: a table written again as it grows (the
    reproduction's trajectories.csv) keeps its earlier rows' text, and the file is the one written at once."""
    first = {"name": ["a", "b"], "x": [0.1, 1 / 3]}
    second = {"name": ["c"], "x": [-0.0]}
    whole = {name: [*first[name], *second[name]] for name in first}
    grown = results.csv_text(first) + results.csv_text(second, header=False)
    assert grown == results.csv_text(whole) == "name,x\na,0.1\nb,0.3333333333333333\nc,-0.0\n"


def test_prepare_folder_rejects_what_cannot_be_written(tmp_path):
    regular_file = tmp_path / "file"
    regular_file.write_text("")
    for folder in (regular_file, regular_file / "below"):
        with pytest.raises(ValueError, match=f"cannot write results into {re.escape(str(folder))}"):
            results.prepare_folder(folder)
    assert results.prepare_folder(tmp_path / "new" / "deep").is_dir()
