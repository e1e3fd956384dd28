"""The statistical-advantage experiment (docs/science.md section 7), reduced: run through the command line
in this process, its table and figure checked, its numbers against the task's own references; and a
researcher's map through the library's function, with the same sizes (the Bayes risk's and the oracle's
programs compiled once)."""

import csv
import hashlib
import json
import math
from pathlib import Path

import pytest

from flowsim import results, slr
from flowsim._checks import InvalidInput
from flowsim.cli import main
from tests import shared
from tests.shared import CAPPED

#: d = 20, L = 3 (the default rule: Gauss-Hermite of order 16), two values of lam (0.5 and the Bayes
#: temperature s = sqrt(10)), 4 starts and seeds, t = 20 (SGD: 400 steps of 0.05), softmax against linear
#: attention (each map compiles its flow and its chain: the four maps are compared in notebook 5).
D, L, LAMS, MAPS = 20, 3, (0.5, math.sqrt(10)), ("softmax", "linear")
ARGUMENTS = f"advantage --d {D} --L {L} --lams {','.join(map(str, LAMS))} --starts 4 --t-max 20 --lr 0.05"
ARGUMENTS += f" --bayes-samples 20000 --maps {' '.join(MAPS)}"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("advantage") / "out"
    status = main([*ARGUMENTS.split(), "--out", str(folder)])
    with open(folder / "advantage.csv") as file:
        rows = list(csv.DictReader(file))
    return status, folder, rows


def test_the_command_writes_the_table_and_the_figure(run):
    status, folder, rows = run
    assert status == 0
    assert [(row["attention"], float(row["lam"])) for row in rows] == [(a, lam) for a in MAPS for lam in LAMS]
    for stem in ("advantage.png", "advantage.pdf", "run.json"):
        assert (folder / stem).stat().st_size > 1000


def test_an_interrupted_run_resumes_to_the_fixtures_table(run, tmp_path, capsys, monkeypatch):
    """The fixture's command stopped by a real SIGINT as its first unit (a map at a lam) is stored, then resumed
    (`tests.shared.interrupted_then_resumed`): the fixture's table, byte for byte, from the same compiled programs;
    and every file the two runs wrote is listed (--replace empties the folder, refusing nothing)."""
    _, folder, _ = run
    resumed = tmp_path / "resumed"
    units = json.loads((folder / "run.json").read_text())["units"]  # each (map, lam) and the Bayes risk
    assert len(units) == len(MAPS) * len(LAMS) + 1
    shared.interrupted_then_resumed(ARGUMENTS, resumed, capsys, monkeypatch, units=len(units))
    assert (resumed / "advantage.csv").read_bytes() == (folder / "advantage.csv").read_bytes()
    results.prepare_folder(resumed, replace=True)
    assert list(resumed.iterdir()) == []


def test_softmax_reaches_the_bayes_risk_at_the_bayes_temperature(run):
    """What the experiment shows, on its reduced version: at every lam softmax ends below linear attention;
    at lam = s its flow ends within 5 % of its oracle risk, which is the Bayes risk (within 4 standard
    errors of the Monte Carlo estimate: gamma = 1), and linear attention ends above 10 times higher."""
    _, _, rows = run
    table = {
        (row["attention"], float(row["lam"])): {k: float(v) for k, v in row.items() if k != "attention"} for row in rows
    }
    for lam in LAMS:
        softmax = table["softmax", lam]["flow_median"]
        assert softmax < table["linear", lam]["flow_median"]
    at_s = table["softmax", LAMS[1]]
    assert at_s["flow_median"] == pytest.approx(at_s["oracle"], rel=0.05)
    assert table["linear", LAMS[1]]["flow_median"] > 10 * at_s["flow_median"]
    bayes = slr.bayes_risk(slr.Problem(D, L, 1.0, 1.0, 0.1), slr.ground_truth(0, D), 1, 20_000)
    assert abs(at_s["oracle"] - bayes.mean) < 4 * bayes.stderr


def test_a_researchers_map_through_the_statistical_advantage(run, tmp_path):
    """The capped softmax in `statistical_advantage` (d = 20, L = 3, gamma = 1, eps = 0.1, at the Bayes temperature
    lam = s, 4 sphere starts, t = 20): the cap loses softmax's advantage. Its oracle's risk (0.435) is about 9.6
    times softmax's (0.0455, the Bayes risk; the command's table's); its flow ends at its oracle's risk (measured
    0.8 % above: still converging), and online SGD (the chain, lr 0.05, batch 5) a little above its flow
    (measured median 0.513)."""
    lam = LAMS[1]
    result = slr.statistical_advantage(
        0, d=D, L=L, lams=(lam,), attention=(CAPPED,), starts=4, t_max=20, lr=0.05, bayes_samples=20_000
    )
    assert not result.failures() and result.attention == ("capped softmax",) and result.maps == (CAPPED,)
    table = result.table()
    _, _, rows = run
    (softmax,) = [float(row["oracle"]) for row in rows if row["attention"] == "softmax" and float(row["lam"]) == lam]
    assert softmax == float(slr.oracle_risk(slr.Problem(D, L, lam, 1.0, 0.1, "softmax")))
    assert table["oracle"][0] > 5 * softmax
    assert table["flow_median"][0] == pytest.approx(table["oracle"][0], rel=0.02)
    assert table["flow_median"][0] < table["sgd_median"][0] < 1.5 * table["flow_median"][0]
    # The same map through the command line, named as MODULE:NAME (the module already imported here: the same object,
    # so the same compiled programs): the same numbers, its stored unit named by the map's name made a file's.
    folder = tmp_path / "own-map"
    own = f"advantage --d {D} --L {L} --lams {lam!r} --starts 4 --t-max 20 --lr 0.05 --bayes-samples 20000"
    assert main([*own.split(), "--maps", "tests.shared:CAPPED", "--out", str(folder)]) == 0
    with open(folder / "advantage.csv") as file:
        (row,) = list(csv.DictReader(file))
    assert row["attention"] == "capped softmax"
    assert [float(row[name]) for name in ("flow_median", "sgd_median", "oracle")] == [
        table[name][0] for name in ("flow_median", "sgd_median", "oracle")
    ]
    assert (folder / "units" / f"capped_softmax-lam={lam!r}.npz").exists()
    # run.json keeps the module file's SHA-256: resumed with it unchanged, every finished unit is read back (an edited
    # file is refused: tests/test_bad_inputs.py).
    record = json.loads((folder / "run.json").read_text())
    assert record["inputs"] == {"tests.shared": hashlib.sha256(Path(shared.__file__).read_bytes()).hexdigest()}
    assert main([*own.split(), "--maps", "tests.shared:CAPPED", "--out", str(folder), "--resume"]) == 0
    assert json.loads((folder / "run.json").read_text())["resumed_units"] == len(record["units"])


def test_verify_takes_a_researchers_map(tmp_path, monkeypatch, capsys):
    """`flowsim verify --attention MODULE:NAME` checks the claim in the paper's three settings with that map
    (`default_settings(d, L, map)`). The flows themselves are the engine's,
    tested for every map elsewhere; compiling them here would cost half a minute, so the call is stopped at the
    engine (measured by hand: the command's table equals the API's, 2026-11-30)."""
    called = {}

    def stop(settings, **options):
        called.update(settings=settings, **options)
        raise InvalidInput("stopped at the engine")

    monkeypatch.setattr(slr, "verify_convergence", stop)
    folder = tmp_path / "verify"
    arguments = f"verify --d {D} --L {L} --n 4 --t-max 20 --attention tests.shared:CAPPED --out {folder}"
    assert main(arguments.split()) == 2
    assert capsys.readouterr().err == "flowsim verify: error: stopped at the engine\n"
    expected = slr.default_settings(D, L, CAPPED)
    assert [setting.name for setting in called["settings"]] == [setting.name for setting in expected]
    assert [setting.task for setting in called["settings"]] == [setting.task for setting in expected]
    assert all(setting.task.attention is CAPPED for setting in called["settings"])
    assert (called["n"], called["t_max"]) == (4, 20.0)
    assert slr.default_settings(D, L)[0].task.attention == slr.ATTENTION_MAPS["erf"]


def test_a_rule_flows_time_estimate_is_its_maps_own():
    """The estimate before work counts each built-in map's measured cost per rule point (`RULE_FLOW_SECONDS`), a
    researcher's map as the slowest (ReLU's): `flowsim verify` at its defaults (384 flows to t = 1000, L = 10) is
    estimated at about 37 minutes with softmax and refused (over an hour) with ReLU or an unknown map."""
    from flowsim.cli import _parser
    from flowsim.tasks.slr import _estimates

    parser = _parser()

    def seconds(*arguments):
        args, _ = parser.parse_known_args(["verify", *arguments])
        return sum(cost.seconds for cost in _estimates.COMMANDS["verify"](args)[1])

    # Every built-in map taken by a rule has its own figure (one added later must be measured).
    assert set(_estimates.RULE_FLOW_SECONDS) == set(slr.ATTENTION_MAPS) - {"erf"}
    softmax, relu = seconds("--attention", "softmax"), seconds("--attention", "relu")
    assert seconds("--attention", "tests.shared:CAPPED") == relu > 3600 > softmax > 30 * 60 > seconds()
    assert softmax == pytest.approx(relu * 3.5e-7 / 2.1e-6)

    # statistical_advantage's own check, of two maps taken by a rule: a researcher's (None) counted as ReLU.
    def advantage(rule_maps):
        return _estimates.advantage_work(20, 3, 1, 2, rule_maps, 4, 20, 0.05, 5, 64, 100)[1][-1].seconds

    assert advantage(["softmax", None]) == advantage(["softmax", "relu"]) > advantage(["softmax", "softmax"])


def test_a_maps_stored_units_are_named_as_files_allow():
    """A map's name in its stored units' file names: the built-in maps' as they are (earlier runs resume), others
    made ASCII, a long one cut and marked by its hash, names that differ only in case numbered (macOS's and
    Windows' file systems ignore case)."""
    from flowsim.tasks.slr._advantage import _unit_stems

    assert _unit_stems(list(slr.ATTENTION_MAPS)) == list(slr.ATTENTION_MAPS)
    assert _unit_stems(["capped softmax", "ε-softmax", ".hidden"]) == ["capped_softmax", "_-softmax", "hidden"]
    assert _unit_stems(["Capped", "capped", "softmax"]) == ["Capped-0", "capped-1", "softmax"]
    long = _unit_stems(["x" * 100, "x" * 99])
    assert all(len(stem) == 59 and stem.startswith("x" * 48 + "-") for stem in long) and long[0] != long[1]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="each of attention must be one of"):
        slr.statistical_advantage(0, attention=("tanh",))
    with pytest.raises(ValueError, match="no two maps of the same name"):
        slr.statistical_advantage(0, attention=("softmax", slr.ATTENTION_MAPS["softmax"]))
    with pytest.raises(ValueError, match="lams must be a finite number > 0"):
        slr.statistical_advantage(0, lams=(1.0, -2.0))
    with pytest.raises(SystemExit) as exit:
        main(["advantage", "--lams", "1,x", "--out", "unused"])
    assert exit.value.code == 2
