"""The follow-up's Figure 2 with dynamics (flowsim.tasks.slr._family_figure): rules, optima, basins, the table.

One small setting, spiked-SLR with L = 2 at nu = 2, with small rules: every compiled program (a map's search,
the polish, the flow) is shared by the tests that use it.
"""

import json
import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim._checks import InvalidInput
from flowsim.cli import main
from flowsim.quadrature import gauss_hermite, product
from flowsim.tasks import slr
from flowsim.tasks.slr._family_figure import (
    FIGURE_TWO_SETTINGS,
    FigureRules,
    basin_shares,
    figure_two,
    figure_two_figure,
    figure_two_text,
    population_optimum,
    token_rule,
)
from flowsim.tasks.slr._family_risk import bayes_risk, family_risk

NU = 2.0
SETTING = "spiked-SLR, L = 2"
DATA = FIGURE_TWO_SETTINGS[SETTING](NU)
#: Search order 8 (64 points), fine order 32 (1024 points): at nu = 2 the fine rule's softmax risk at the Bayes point
#: and its Bayes risk are within 2e-9 (relative) of order 150's.
RULES = FigureRules(search=8, fine=32)
STARTS = 4


@pytest.fixture(scope="module")
def optima():
    search, plane = RULES.for_search(DATA), RULES.for_plane(DATA)
    return {
        attention: population_optimum(
            DATA, attention, starts=STARTS, key=3, rules=search, plane_rules=plane if attention == "softmax" else None
        )
        for attention in ("softmax", "linear", "softplus")
    }


def _symmetric(points: np.ndarray, L: int, first_fixed: bool) -> np.ndarray:
    """A smooth function of the rule's points (token l's coordinates are columns l, l + L, ...), symmetric in the
    tokens but the first where `first_fixed`, else in all."""
    tokens = points.reshape(len(points), -1, L).transpose(0, 2, 1)  # (points, L, coordinates)
    score = tokens[..., 0] + 0.3 * tokens[..., -1] ** 2 + (np.arange(L) == 0) * first_fixed
    weights = np.exp(score - score.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return np.sum(weights * np.cos(tokens[..., 0] + (np.arange(L) == 0) * first_fixed), axis=1)


@pytest.mark.parametrize(
    ("data", "h_order"), [(slr.spiked_slr(2.0, 3), 1), (slr.max_slr(1.5, 2), 3), (slr.max_slr(1.5, 3), 2)]
)
def test_token_rule_is_the_product_rule_summed_over_orbits(data, h_order):
    """The orbit rule integrates a function symmetric in the exchangeable tokens (max-SLR: all; spiked: all but the
    first) as the product rule does, to round-off (1e-13 relative), with fewer points and weights summing to 1."""
    L = data.lengths.values[0]
    full = gauss_hermite(L, 5) if data.spiked else product(gauss_hermite(L, 5), gauss_hermite(L, h_order))
    orbits = token_rule(data, L, 5, h_order)
    assert orbits.size < full.size and math.isclose(float(jnp.sum(orbits.weights)), 1.0, rel_tol=1e-14)
    expected = np.dot(np.asarray(full.weights), _symmetric(np.asarray(full.points), L, data.spiked))
    value = np.dot(np.asarray(orbits.weights), _symmetric(np.asarray(orbits.points), L, data.spiked))
    assert value == pytest.approx(expected, rel=1e-13)


def test_family_risk_is_symmetric_in_max_slr_tokens():
    """The risk's integrand is symmetric in max-SLR's tokens (p and h of each), so the orbit rule gives the product
    rule's risk to round-off, at random (k, v) in R^6 (L = 3, both rules in one compiled program)."""
    data = slr.max_slr(1.5, 3)
    full, orbits = product(gauss_hermite(3, 5), gauss_hermite(3, 2)), token_rule(data, 3, 5, 2)
    k, v = np.random.default_rng(3).normal(scale=0.6, size=(2, 6))
    eye = jnp.eye(6)
    seven = slr.seven_from_vectors(jnp.asarray(k), jnp.asarray(v), eye[0], eye[1])
    softmax = slr.ATTENTION_MAPS["softmax"]
    both = eqx.filter_jit(lambda rules: [family_risk(data, softmax, seven, (rule,)) for rule in rules])
    expected, value = (float(x) for x in both((full, orbits)))
    assert value == pytest.approx(expected, rel=1e-13)


def test_softmax_optimum_is_the_bayes_risk(optima):
    """Softmax's optimum over the seven, polished on the plane with the fine rule, equals the Bayes risk by the
    same rule to 1e-8 relative (each is within 2e-9 of its exact value), at k = sqrt(nu) k*, v = v* (to 1e-4)."""
    optimum = optima["softmax"]
    bayes = float(bayes_risk(DATA, RULES.for_plane(DATA)))
    assert optimum.polished and optimum.on_plane
    assert optimum.risk == pytest.approx(bayes, rel=1e-8)
    np.testing.assert_allclose(optimum.seven, slr.bayes_point(DATA), atol=1e-4)


def test_linear_optimum_has_positive_excess(optima):
    """Linear attention's risk is a polynomial of degree 4 in the scores (exact for Gauss-Hermite of order >= 3);
    on the plane k = a k*, v = e v* it is 1 - 2 e m + e^2 (m^2 + L a^2 + L - 1), m = 1 + a sqrt(nu), whose minimum is
    L (L - 1) / (L^2 + nu (L - 1)) = 1/3 at L = 2, nu = 2 (a = sqrt(nu) / 2): the search finds it to 1e-10, and its
    excess over the Bayes risk is positive (about 0.11)."""
    optimum = optima["linear"]
    assert optimum.risk == pytest.approx(1 / 3, abs=1e-10)
    assert optimum.seven[0] == pytest.approx(math.sqrt(NU) / 2, abs=1e-5)
    assert optimum.risk - float(bayes_risk(DATA, RULES.for_plane(DATA))) > 0.1


def test_maps_ordering(optima):
    """At nu = 2: softmax (the Bayes risk, 0.2248) < softplus (0.2352) < linear (1/3), each gap far above the
    search rule's error (order 8: below 1e-3 relative at these |k|)."""
    risks = {name: optimum.risk for name, optimum in optima.items()}
    assert risks["softmax"] < risks["softplus"] - 5e-3 and risks["softplus"] < risks["linear"] - 5e-2


@pytest.fixture(scope="module")
def basins():
    problem = slr.FamilyProblem(DATA, "softmax", rules=RULES.for_search(DATA))
    return basin_shares(problem, n=4, key=5, t_end=1e4)


def test_softmax_flow_reaches_the_bayes_point(basins):
    """From small starts every softmax flow ends at one sink within 5% of the Bayes point; the shares sum to 1;
    each start comes within the neighbourhood at a finite time, before t_end."""
    shares = sum(group.share for group in basins.groups) + basins.failed / basins.n
    assert shares == pytest.approx(1.0, abs=1e-12)
    assert len(basins.groups) == 1 and basins.groups[0].kind == "sink" and basins.groups[0].settled
    assert basins.bayes_share == 1.0
    assert np.all(np.isfinite(basins.time_to_bayes)) and np.all(basins.time_to_bayes < basins.t_end)


def test_figure_two_table_and_figure(basins):
    """The table's one cell (softmax, shared programs) reads as the parts do; the text and figure are made."""
    import matplotlib

    matplotlib.use("Agg")
    result = figure_two([SETTING], ["softmax"], [NU], starts=STARTS, n=4, t_end=1e4, rules=RULES, progress=False)
    row = result.row(SETTING, "softmax", NU)
    assert abs(row.excess) <= 1e-8 * row.bayes and row.at_optimum == 1.0
    assert result.linear_excess() is None
    text = figure_two_text(result)
    assert f"| {SETTING} | softmax | 2 |" in text and "Bayes" in text
    fig = figure_two_figure(result)
    assert fig.flowsim_figure_two is result and len(fig.axes) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"settings": ["spiked"]}, "settings must be among"),
        ({"maps": ["relu"]}, "maps must be among"),
        ({"nus": [2.0, -1.0]}, "nus must be"),
        ({"nus": []}, "nus must hold"),
        ({"rules": 3}, "rules must be a slr.FigureRules"),
        ({"starts": 0}, "starts must be"),
    ],
)
def test_figure_two_refuses_bad_input(arguments, message):
    with pytest.raises(InvalidInput, match=message):
        figure_two(**arguments, progress=False)


# --- the command line: flowsim optima ----------------------------------------------------------------------------

OPTIMA = "optima --settings spiked --maps linear --nus 2 --starts 1 --n 1 --t-end 10 --no-progress"


def test_optima_command_writes_the_table_and_resumes(tmp_path, capsys):
    """`flowsim optima` on one cell (linear attention, spiked-SLR(2), L = 2): the optimum is the closed form
    L (L - 1) / (L^2 + nu (L - 1)) = 1/3 (its rule is exact: a polynomial of degree 4); the table, records and
    figure are written, and a resumed run reads the cell back (one unit) instead of computing it again."""
    out = tmp_path / "optima"
    assert main([*OPTIMA.split(), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| spiked-SLR, L = 2 | linear | 2 |" in printed
    (record,) = json.loads((out / "optima.json").read_text())
    assert record["attention"] == "linear" and record["optimum_risk"] == pytest.approx(1 / 3, abs=1e-10)
    assert "| spiked-SLR, L = 2 | linear | 2 |" in (out / "optima.md").read_text()
    assert (out / "optima.png").exists() and len(list((out / "units").iterdir())) == 1
    assert main([*OPTIMA.split(), "--out", str(out), "--resume"]) == 0
    assert json.loads((out / "optima.json").read_text()) == [record]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("--nus 2,-1", "flowsim optima: error: argument --nus"),
        ("--settings spiked,other", "flowsim optima: error: argument --settings: invalid choice: 'other'"),
        ("--maps relu", "flowsim optima: error: argument --maps: invalid choice: 'relu'"),
        ("--tol 2", "flowsim optima: error: --tol must be"),
        ("--n 0", "flowsim optima: error: --n must be"),
    ],
)
def test_optima_refuses_bad_input_in_one_line(tmp_path, monkeypatch, capsys, arguments, message):
    monkeypatch.chdir(tmp_path)
    try:
        status = main(["optima", *arguments.split()])
    except SystemExit as exit:  # argparse's own refusals
        status = exit.code
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "flowsim-out").exists()
