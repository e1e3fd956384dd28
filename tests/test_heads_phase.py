"""The phase diagram of specialisation (flowsim.tasks.slr._heads_phase): a small grid, its parts checked against
the flow and the outcome rule called directly. One compiled flow (the state's size and the schedule's form are the
same in every cell; lam0 and d are values)."""

import csv
import math

import jax
import numpy as np
import pytest

from flowsim._checks import InvalidInput
from flowsim.cli import main
from flowsim.integrate import solve_flow
from flowsim.schedules import InverseTimeDecay
from flowsim.tasks import slr
from flowsim.tasks.slr._heads_outcome import classify_heads
from flowsim.tasks.slr._heads_phase import specialisation_diagram, specialisation_figure
from flowsim.tasks.slr._heads_state import sphere_states

GRID = dict(lams=(1.0, 2.0), ds=(12, 16), n=3, key=4, L=4, steps=4000, saves=9)


@pytest.fixture(scope="module")
def diagram():
    return specialisation_diagram(**GRID)


def test_shares_are_the_outcome_rule_on_the_flows_ends(diagram):
    """Cell (lam0 = 2, d = 16): the same starts (fold_in(key, cell)) solved and classified directly give the same
    outcomes; every cell's shares sum to 1; the plateau is a saved time or inf."""
    problem = slr.HeadsProblem(
        slr.marion_slr(16, 4, math.sqrt(0.5), 0.1, locations=2), heads=2, lam=InverseTimeDecay(2.0, 2e-4, 1e-3, 25_000)
    )
    starts = sphere_states(jax.random.fold_in(jax.random.key(4), 3), problem.layout, 16, 3)
    solved = solve_flow(problem, starts, diagram.times)
    np.testing.assert_array_equal(diagram.outcomes[1, 1], classify_heads(np.asarray(solved.y_final), problem.layout))
    np.testing.assert_allclose(diagram.shares.sum(axis=-1), 1.0, atol=1e-12)
    assert diagram.times[-1] == pytest.approx(4.0)
    finite = np.isfinite(diagram.plateau)
    assert np.all(np.isin(diagram.plateau[finite], diagram.times))


def test_figure_and_plateau_fit(diagram):
    import matplotlib

    matplotlib.use("Agg")
    fig = specialisation_figure(diagram)
    assert fig.flowsim_diagram is diagram and len(fig.axes) >= 5
    slope, _ = diagram.plateau_slope(0)
    assert math.isnan(slope) == (np.isfinite(diagram.median_plateau()[0]).sum() < 2)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"lams": (-1.0,)}, "lams must be"), ({"ds": (4,)}, "ds must be"), ({"n": 0}, "n must be"),
     ({"k_threshold": 1.0}, "k_threshold must be a number in the open interval")],
)  # fmt: skip
def test_bad_input_is_refused(arguments, message):
    with pytest.raises(InvalidInput, match=message):
        specialisation_diagram(**(GRID | arguments))


def test_the_command_writes_the_diagram(tmp_path, capsys, diagram):
    """`flowsim heads diagram` on one cell of the fixture's grid (the same sizes: its compiled flow serves) writes the
    shares the Python call gives, the table and the figure; a threshold outside (0, 1) is refused in one line."""
    out = tmp_path / "diagram"
    arguments = "heads diagram --lams 2 --ds 16 --n 3 --L 4 --steps 4000 --saves 9 --seed 4 --no-progress"
    assert main([*arguments.split(), "--out", str(out)]) == 0
    assert "median plateau" in capsys.readouterr().out
    with open(out / "diagram.csv", newline="") as file:
        (row,) = list(csv.DictReader(file))
    # The command's one cell is the grid's cell 0 of its own key: the shares of 3 starts, summing to 1.
    shares = [float(row[name]) for name in slr.HEADS_OUTCOMES]
    assert (float(row["lam0"]), int(row["d"])) == (2.0, 16) and sum(shares) == pytest.approx(1.0)
    assert (out / "diagram.png").exists()
    try:
        status = main(["heads", "diagram", "--k-threshold", "1", "--out", str(tmp_path / "refused")])
    except SystemExit as exit:
        status = exit.code
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("flowsim heads: error: --k-threshold must be") and len(err.splitlines()) == 1
