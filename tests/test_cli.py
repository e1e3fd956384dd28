"""The command line, run as a user would (subprocess)."""

import re
import subprocess
import sys

import pytest

from flowsim import slr


def _flowsim(*args):
    return subprocess.run([sys.executable, "-m", "flowsim.cli", *args], capture_output=True, text=True, timeout=300)


def test_demo_prints_the_risk_table():
    result = _flowsim("demo", "--d", "50", "--L", "4", "--lam", "0.3", "--bayes-samples", "2000")
    assert result.returncode == 0, result.stderr
    oracle = float(slr.oracle_risk(slr.Problem(50, 4, 0.3)))
    line = next(line for line in result.stdout.splitlines() if line.startswith("oracle"))
    assert float(re.split(r"\s{2,}", line)[1]) == pytest.approx(oracle, abs=5e-7)
    for name in ("best linear predictor", "Bayes predictor", "random (k, v) on the sphere"):
        assert name in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("demo", "--d", "-3"), "Problem.d must be an integer >= 2, got -3"),
        (("demo", "--lam", "nan"), "Problem.lam must be a finite number > 0, got nan"),
        (("demo", "--L", "0"), "Problem.L must be an integer >= 1, got 0"),
        (("demo", "--d", "abc"), "argument --d: invalid int value: 'abc'"),
        (("nonsense",), "invalid choice: 'nonsense'"),
        (("demo", "--bogus"), "unrecognized arguments: --bogus"),
    ],
)
def test_bad_input_is_one_line_with_status_2(args, message):
    result = _flowsim(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1


def test_verify_exits_1_when_the_claim_fails(capsys):
    """With a horizon far too short to converge, the claim fails and the exit status is 1.

    Run in-process with the shapes of tests/test_fixedpoints.py so compiled solves are shared."""
    from flowsim.cli import main

    assert main(["verify", "--d", "60", "--L", "5", "--n", "12", "--t-max", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "FAILS" in out and "lam = 0.1" in out and "lam = 0.9" in out
