"""Bad and hostile input, at the command line and at the Python API: refused at once, in one clear line.

Every case is listed, with its outcome, in docs/bad-inputs.md: the table there is generated from
the cases below (`python tests/test_bad_inputs.py` prints it) and a test checks that it is current.
Each case is run in this process (`flowsim.cli.main`): nothing here compiles a computation, since
every refusal comes before one.
"""

import json
import shlex
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import flowsim._memory
from flowsim import slr
from flowsim.cli import main

REPOSITORY = Path(__file__).resolve().parent.parent
DOC = REPOSITORY / "docs" / "bad-inputs.md"

#: Command-line cases: (arguments, exit status, the start of the one line on stderr). {file} is a
#: regular file, {earlier} a folder holding an earlier run, {foreign} a non-empty folder of other files.
CLI_CASES = [
    ("nonsense", 2, "flowsim: error: argument command: invalid choice: 'nonsense'"),
    ("verify --bogus", 2, "flowsim: error: unrecognized arguments: --bogus"),
    ("portrait --d abc", 2, "flowsim portrait: error: argument --d: invalid int value: 'abc'"),
    ("sgd --d -3", 2, "flowsim sgd: error: --d must be an integer >= 5 (every command: SGD on the overlaps needs"),
    ("flow --d 3", 2, "flowsim flow: error: --d must be an integer >= 5 (every command: SGD on the overlaps needs"),
    ("demo --L 0", 2, "flowsim demo: error: --L must be an integer >= 1, got 0"),
    ("flow --lam nan", 2, "flowsim flow: error: --lam must be a finite number > 0, got nan"),
    ("flow --t-max 0", 2, "flowsim flow: error: --t-max must be a finite number > 0, got 0.0"),
    ("verify --min-share 1.5", 2, "flowsim verify: error: --min-share must be a number in [0, 1], got 1.5"),
    (
        "flow --seed 1180591620717411303424",
        2,
        "flowsim flow: error: --seed must be an integer in [0, 2**63 - 1], got 1180591620717411303424",
    ),
    ("flow --seed -1", 2, "flowsim flow: error: --seed must be an integer in [0, 2**63 - 1], got -1"),
    ("flow --init 2,0,0,0,0", 2, "flowsim flow: error: --init 2,0,0,0,0: overlaps point (the only one)"),
    ("flow --init 1,2,3", 2, "flowsim flow: error: argument --init: must be sphere or manifold or 5 comma-separated"),
    ("flow --out ''", 2, "flowsim flow: error: argument --out: must name a folder, got ''"),
    ("flow --out {file}/results", 2, "flowsim flow: error: cannot write results into"),
    ("flow --out {earlier}", 2, "flowsim flow: error: {earlier} holds an earlier run (flowsim flow, started"),
    ("flow --out {foreign} --replace", 2, "flowsim flow: error: cannot write results into {foreign}: it is not empty"),
    ("sgd --mode online --n 100", 2, "flowsim sgd: error: --n is the dataset size of --mode dataset: --mode online"),
    ("sparse sweep --span 0", 2, "flowsim sparse sweep: error: --span must be a finite number > 0, got 0.0"),
    ("sparse sweep --mlp-Ts 3", 2, "flowsim sparse sweep: error: Ts of mlp must be an integer >= 4, got 3"),
    (
        "latent error --Ls 0",
        2,
        "flowsim latent error: error: argument --Ls: must be comma-separated values, each an integer >= 1, got '0'",
    ),
    ("latent risk --sigma 0", 2, "flowsim latent risk: error: --sigma must be a finite number > 0, got 0.0"),
    (
        "latent error --kernel-max-L 65536",
        2,
        "flowsim latent error: error: regression_error would need about 12.5 TiB of memory, more than the 16 GiB "
        "available on this machine: the Gram matrices (200 sequences x L 65536 x L 65536) alone take 12.5 TiB",
    ),
    (
        "latent learn --Ls 65536 --ns 100000",
        2,
        "flowsim latent learn: error: train_readout would need about 1.65 TiB of memory, more than the 16 GiB "
        "available on this machine: the sequences (4 seeds x (n 100000 + 8000 held out) x L 65536 x d 4) alone",
    ),
    ("sgd --mode dataset", 2, "flowsim sgd: error: --engine overlaps runs online SGD only: --mode dataset needs"),
    ("sgd --mode dataset --engine rd", 2, "flowsim sgd: error: --mode dataset needs --n, the dataset size"),
    ("sgd --steps 100 --log-every 7", 2, "flowsim sgd: error: --log-every 7 must divide --steps 100"),
    ("sgd --dtype float16", 2, "flowsim sgd: error: argument --dtype: invalid choice: 'float16'"),
    (
        "sgd --batch 2000000000 --steps 1 --log-every 1 --seeds 1",
        2,
        "flowsim sgd: error: run_sgd would need about 685 GiB of memory, more than the 16 GiB available on this "
        "machine: the random numbers of one step (1 seeds x 343 GiB, batch 2000000000) alone take 685 GiB; "
        "lower batch (--batch)",
    ),
    (
        "sgd --steps 1000000000000 --log-every 1 --seeds 1",
        2,
        "flowsim sgd: error: run_sgd would need about 87.3 TiB of memory, more than the 16 GiB available on this "
        "machine: the logged values (1 seeds x 1000000000001 logs x 6 values) alone take 87.3 TiB; log fewer "
        "steps: raise log_every (--log-every)",
    ),
    (
        "sgd --engine rd --batch 100000 --d 100000 --steps 1 --log-every 1 --seeds 1",
        2,
        "flowsim sgd: error: run_sgd would need about 2.18 TiB of memory, more than the 16 GiB available on this "
        "machine: the samples of one step (1 seeds x batch 100000 x L 10 x d 100000) alone take 2.18 TiB; "
        "lower batch (--batch), seeds (--seeds) or d (--d), or use the overlap engine",
    ),
    ("compare --reference nothing", 2, "flowsim compare: error: argument --reference: invalid choice: 'nothing'"),
    ("reproduce --only nothing", 2, "flowsim reproduce: error: argument --only: invalid choice: 'nothing'"),
]

PROBLEM = slr.Problem(d=20, L=4, lam=0.5)


def _api_cases():
    """Python API cases: (the call as shown, a function making it, the exception, the start of its message)."""
    return [
        (
            "population_risk(problem, np.zeros(4))",
            lambda: slr.population_risk(PROBLEM, np.zeros(4)),
            ValueError,
            "overlaps must have a last axis of size 5",
        ),
        (
            "population_risk(problem, np.zeros((3, 6)))",
            lambda: slr.population_risk(PROBLEM, np.zeros((3, 6))),
            ValueError,
            "overlaps must have a last axis of size 5",
        ),
        (
            "population_risk(problem, [2, 0, 0, 0, 0])",
            lambda: slr.population_risk(PROBLEM, [2.0, 0, 0, 0, 0]),
            ValueError,
            "overlaps point (the only one) = (kappa=2, nu=0, theta=0, eta=0, rho=0) has an entry outside [-1, 1]",
        ),
        (
            "population_risk(problem, [nan, 0, 0, 0, 0])",
            lambda: slr.population_risk(PROBLEM, [np.nan, 0, 0, 0, 0]),
            ValueError,
            "overlaps point (the only one) = (kappa=nan, nu=0, theta=0, eta=0, rho=0) has a non-finite entry",
        ),
        (
            "run_sgd(problem, key='a', ...)",
            lambda: slr.run_sgd(PROBLEM, "a", lr=1e-3, steps=1),
            ValueError,
            "key must be a JAX PRNG key, jax.random.key(seed), or an integer seed in [0, 2**63 - 1], got 'a'",
        ),
        (
            "run_sgd(problem, key=2**64, ...)",
            lambda: slr.run_sgd(PROBLEM, 2**64, lr=1e-3, steps=1),
            ValueError,
            "key (an integer seed) must be an integer in [0, 2**63 - 1], got 18446744073709551616",
        ),
        (
            "run_sgd(problem, 0, batch=2_000_000_000, engine='overlaps', ...)",
            lambda: slr.run_sgd(PROBLEM, 0, lr=1e-3, steps=1, batch=2_000_000_000, engine="overlaps"),
            ValueError,
            "run_sgd would need about",
        ),
        (
            "Problem(d=5.5, L=4, lam=0.5)",
            lambda: slr.Problem(d=5.5, L=4, lam=0.5),
            ValueError,
            "Problem.d must be an integer >= 2, got 5.5",
        ),
        (
            "run_experiment(EXPERIMENTS[0], 0, m0=np.zeros((2, 5)))",
            lambda: slr.run_experiment(slr.EXPERIMENTS[0], 0, m0=np.zeros((2, 5))),
            ValueError,
            "m0 must have shape (seeds, 5) = (30, 5), got (2, 5)",
        ),
    ]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """{file}, {earlier} and {foreign}: a regular file, an earlier run's folder, a folder of other files."""
    base = tmp_path_factory.mktemp("places")
    (base / "file").write_text("")
    earlier = base / "earlier"
    earlier.mkdir()
    record = {"command": "flowsim flow", "started": "2026-11-24T12:00:00Z", "status": "ok", "files": ["x.csv"]}
    (earlier / "run.json").write_text(json.dumps(record))
    (earlier / "x.csv").write_text("x\n1\n")
    foreign = base / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("")
    return {"file": base / "file", "earlier": earlier, "foreign": foreign}


@pytest.fixture(autouse=True)
def sixteen_gib(monkeypatch):
    """The memory checks compare with 16 GiB, whatever this machine has: the same refusals everywhere."""
    monkeypatch.setattr(flowsim._memory, "available_bytes", lambda: (16 * 2**30, "available on this machine"))


@pytest.mark.parametrize(("arguments", "status", "message"), CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_the_command_line_refuses_in_one_line(capsys, places, arguments, status, message):
    try:
        returned = main(shlex.split(arguments.format(**places)))
    except SystemExit as exit:  # argparse's own refusals
        returned = exit.code
    captured = capsys.readouterr()
    assert returned == status
    assert captured.err.startswith(message.format(**places)), captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err + captured.out


def test_a_refused_replacement_leaves_the_earlier_run(places):
    assert sorted(path.name for path in places["earlier"].iterdir()) == ["run.json", "x.csv"]
    assert [path.name for path in places["foreign"].iterdir()] == ["thesis.tex"]


@pytest.mark.parametrize("case", range(len(_api_cases())), ids=[case[0] for case in _api_cases()])
def test_the_api_refuses_with_a_message_naming_the_field(case):
    _, call, exception, message = _api_cases()[case]
    with pytest.raises(exception) as raised:
        call()
    assert str(raised.value).startswith(message), str(raised.value)


def test_numpy_scalars_and_integer_seeds_are_taken_as_they_mean():
    """NumPy integers for the static sizes (no equinox warning), an int seed for a key: the same results."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        problem = slr.Problem(d=np.int64(20), L=np.int32(4), lam=np.float64(0.5))
    assert (problem.d, problem.L, float(problem.lam)) == (20, 4, 0.5)
    assert type(problem.d) is int and type(problem.L) is int
    by_seed = slr.initial_overlaps(7, 20, 3)
    np.testing.assert_array_equal(by_seed, slr.initial_overlaps(jax.random.key(7), 20, 3))
    # The realizability check is skipped under tracing and with check=False, never the shape check.
    assert float(slr.population_risk(PROBLEM, [2.0, 0, 0, 0, 0], check=False)) > 0
    gradient = jax.grad(lambda m: slr.population_risk(PROBLEM, m))(jax.numpy.array([0.5, 0.5, 0, 0, 0]))
    assert np.isfinite(gradient).all()


def markdown() -> str:
    """docs/bad-inputs.md: the cases and their outcomes, as tables."""
    lines = [
        "# Bad input and its outcome",
        "",
        "Every case of tests/test_bad_inputs.py, which checks each outcome and that this page is current",
        "(regenerate it with `python tests/test_bad_inputs.py > docs/bad-inputs.md`). Each is refused",
        "before anything is computed or written, with one line naming the option or field and what it",
        "accepts. In the arguments, {file} stands for a regular file, {earlier} for a folder holding an",
        "earlier run, {foreign} for a non-empty folder of other files.",
        "",
        f"## Command line ({len(CLI_CASES)} cases)",
        "",
        "| arguments | exit status | stderr begins with |",
        "|---|---:|---|",
    ]
    lines += [f"| `flowsim {arguments}` | {status} | `{message}` |" for arguments, status, message in CLI_CASES]
    cases = _api_cases()
    lines += [
        "",
        f"## Python API ({len(cases)} cases)",
        "",
        "| call | raises | message begins with |",
        "|---|---|---|",
    ]
    lines += [f"| `{call}` | {exception.__name__} | `{message}` |" for call, _, exception, message in cases]
    return "\n".join(lines) + "\n"


def test_the_documented_table_is_current():
    assert DOC.read_text() == markdown(), f"run: {sys.executable} tests/test_bad_inputs.py > docs/bad-inputs.md"


if __name__ == "__main__":
    print(markdown(), end="")
