"""A model's risk finite wherever its parameters are allowed (issue 54, finding 2).

The built-in maps' risks and fields at large inverse temperatures against an independent evaluation of the same
rule in NumPy (the map's weights written out, or their limit as lam -> infinity, into the conditional risk generated
by derivations/slr_maps.py); a researcher's map checked on the scores a problem meets; a task whose risk is not
finite refused before any step; linear attention's lam bounded where its flow can be solved.

Cost: one compilation of the risk and of the field per built-in map (rule-based: about 2 s each on one core), one
of the start check for a NaN map, and one flow of softmax attention (about 15 s, most of it compiling the Rodas5
solve of a rule-based field).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special

from flowsim._checks import InvalidInput
from flowsim.cli import main
from flowsim.figures import phase_portrait
from flowsim.integrate import check_finite, solve_flow
from flowsim.tasks import slr
from flowsim.tasks.slr import _generated_maps as generated
from flowsim.tasks.slr._attention import check_scores

#: A realizable overlap point off M, with kappa > 0: the informative token's scores lam (s kappa + gamma u1) take both
#: signs over the rule's points.
POINT = np.array([0.3, 0.2, 0.1, 0.1, 0.05])
#: The issue's sizes: d = 20, L = 3 (the default rule: Gauss-Hermite of order 16 in each of the 3 scores).
D, L = 20, 3
LARGE = (1e2, 1e20, 1e50)


def _limit_weights(name: str, lam: float, x: np.ndarray) -> np.ndarray:
    """The weights of map `name` at scores lam x (rows: rule points, columns: tokens), in NumPy. The normalised maps
    at lam >= 1e20 by their limit: e^{lam x} and softplus(lam x) < e^{-745} for x < -7e-18, so softmax gives all its
    weight to the largest scores (the rule's others are further apart: asserted), softplus to the positive scores in
    proportion to them (log softplus(lam x) = log(lam x) there), or to the largest where none is positive."""
    scores = lam * x
    if name == "erf":
        return scipy.special.erf(scores)
    if name == "linear":
        return 1.0 + scores
    if name == "sigmoid":
        return scipy.special.expit(scores)
    if name == "relu":
        return np.maximum(scores, 0.0) / x.shape[1]
    if lam <= 1e2:  # e^{lam x} and softplus(lam x) stay normal numbers at the rule's scores: the weights as defined
        values = np.exp(scores - scores.max(axis=1, keepdims=True)) if name == "softmax" else np.logaddexp(0, scores)
        return values / values.sum(axis=1, keepdims=True)
    largest = x == x.max(axis=1, keepdims=True)
    # The largest scores are equal (the product rule's equal noise scores: they share the weight) or far apart.
    assert (x.max(axis=1, keepdims=True) - np.where(largest, -np.inf, x)).min() > 1e-15
    largest = largest / largest.sum(axis=1, keepdims=True)
    if name == "softmax":
        return largest
    positive = np.maximum(x, 0.0)
    total = positive.sum(axis=1, keepdims=True)
    return np.where(total > 0, positive / np.where(total > 0, total, 1.0), largest)


def _reference_risk(problem: slr.Problem, name: str) -> float:
    """The rule's mean of the conditional risk at POINT, the weights from `_limit_weights` (J0 = 1)."""
    u, weights = np.asarray(problem.rule.points), np.asarray(problem.rule.weights)
    x = np.concatenate([(problem.s * POINT[0] + problem.gamma * u[:, 0])[:, None], u[:, 1:]], axis=1)
    w = _limit_weights(name, float(problem.lam), x)
    w1, s1, s2 = w[:, 0], (w[:, 1:] * u[:, 1:]).sum(axis=1), (w[:, 1:] ** 2).sum(axis=1)
    conditional = generated.conditional_risk(u[:, 0], w1, s1, s2, *POINT, problem.d, problem.gamma, problem.eps)
    return float(weights @ np.asarray(conditional))


#: The inverse temperatures each map is taken at: linear attention's lam stops at 1e12 (`slr.LARGEST_LAM`).
LAMS = {name: (1e2, 1e12) if name == "linear" else LARGE for name in slr.ATTENTION_MAPS}


@pytest.mark.parametrize("name", [name for name in slr.ATTENTION_MAPS if name != "erf"])
def test_every_rule_map_has_a_finite_risk_and_field_at_large_lam(name):
    """softmax's risk was NaN from lam ~ 1e20 and softplus's from lam ~ 150 (L = 3): the compiled shift of the
    log-sum-exp, a fused multiply-add, overflowed; softplus underflowed to 0 (log 0). Now each equals the NumPy
    evaluation of the same rule to 1e-10 relative: the two sum the same 4096 terms in other orders and forms (their
    rounding, ~1e-14 relative), and the limits are exact in float64 at 1e20 and 1e50. The field is finite too."""
    for lam in LAMS[name]:
        problem = slr.Problem(D, L, lam, attention=name)
        risk = float(slr.population_risk(problem, POINT))
        assert np.isfinite(risk), (name, lam)
        assert risk == pytest.approx(_reference_risk(problem, name), rel=1e-10), (name, lam)
        assert np.isfinite(np.asarray(problem.vector_field(0.0, jnp.asarray(POINT)))).all(), (name, lam)


def test_erf_is_finite_and_at_its_limit_at_large_lam():
    """erf's closed form (docs/science.md section 3) at lam = 1e20 and 1e50: finite and equal to 1e-12 (its weights
    erf(lam x) are the sign map's, +-1, for every |x| > 1e-19), the field finite."""
    risks = [float(slr.population_risk(slr.Problem(D, L, lam), POINT)) for lam in LARGE[1:]]
    assert np.isfinite(risks).all() and risks[0] == pytest.approx(risks[1], rel=1e-12)
    assert np.isfinite(np.asarray(slr.Problem(D, L, 1e50).vector_field(0.0, jnp.asarray(POINT)))).all()


@pytest.mark.parametrize("name", list(slr.ATTENTION_MAPS))
def test_every_built_in_map_is_finite_at_every_score_of_the_largest_lam(name):
    """The check a researcher's map gets (f, or log f for softmax and softplus, finite with its derivative) on the
    scores lam = 1e50 meets at d = 20: up to 1e50 (sqrt(10) + 8) < 2e51. softplus's log f was -inf below -745."""
    built_in = slr.ATTENTION_MAPS[name]
    remade = slr.AttentionMap(name, built_in.f, built_in.normalisation, built_in.log_f)  # checked, as a user's map
    check_scores(remade, 2e51, "at lam = 1e50")


#: tanh within |x| < 150 and NaN beyond: on SCORE_GRID (-100 to 100) it passes the check a map gets when made.
NAN_BEYOND = slr.AttentionMap("nan beyond 150", lambda x: jnp.where(jnp.abs(x) < 150, jnp.tanh(x), jnp.nan))


def test_a_map_that_is_nan_beyond_the_grid_is_refused_where_the_scores_reach_it():
    """At lam = 1, d = 20 the scores stay within 1 (sqrt(10) + 8 max(1, gamma)) ~ 11: accepted. At lam = 50 they reach
    558 (the rule's points are within 8 standard deviations): refused when the problem is made, naming lam and the
    first score where the map is NaN (the grid's most negative)."""
    assert slr.Problem(D, L, 1.0, attention=NAN_BEYOND).attention is NAN_BEYOND
    with pytest.raises(InvalidInput, match=r"'nan beyond 150': f is not finite at x = -558\.1.*at lam = 50, d = 20"):
        slr.Problem(D, L, 50.0, attention=NAN_BEYOND)


def test_linear_attention_lam_is_bounded_where_its_flow_can_be_solved():
    """At lam = 1e13 the linear map's flow rejects step after step (slr.LARGEST_LAM): refused when made; 1e12 is
    accepted."""
    assert float(slr.Problem(D, L, 1e12, attention="linear").lam) == 1e12
    with pytest.raises(InvalidInput, match=r"^lam must be at most 1e\+12 for linear attention .* got 1e\+13$"):
        slr.Problem(D, L, 1e13, attention="linear")


#: A map NaN at every score, made unchecked: what a problem whose risk cannot be computed looks like to the engine.
NAN = slr.AttentionMap("nan", lambda x: x * jnp.nan, odd=False, check=False)


def test_a_task_whose_risk_is_not_finite_is_refused_before_any_step():
    """solve_flow, the SGD chain and the portrait refuse before a step, naming the parameters (max_steps small: the
    solver would otherwise reject steps until its budget is spent)."""
    problem = slr.Problem(D, L, 1.0, attention=NAN)
    message = r"^the risk or field of nan attention, d = 20, L = 3, lam = 1, .* is not finite at \(kappa="
    start = problem.initial_states(jax.random.key(0), 2, "sphere")
    with pytest.raises(InvalidInput, match=message):
        solve_flow(problem, start, jnp.array([0.0, 1.0]), max_steps=16)
    with pytest.raises(InvalidInput, match=message):
        slr.run_sgd(problem, 0, lr=1e-3, steps=2, engine="overlaps")
    with pytest.raises(InvalidInput, match=r"^the risk or field of nan attention"):
        phase_portrait(problem, trajectories=0, grid=3)
    # softplus at lam = 200, whose portrait was blank (a NaN field): finite on the portrait's lattice.
    lattice = np.stack(np.meshgrid(np.linspace(-1, 1, 9), np.linspace(-1, 1, 9)), axis=-1).reshape(-1, 2)
    check_finite(slr.Problem(D, L, 200.0, attention="softplus").restriction(), lattice)


def test_softmax_at_the_largest_lam_flows_to_a_finite_result(tmp_path, capsys):
    """The issue's command, which rejected every step up to its 2e6-step budget: now it runs (about 15 s, most of it
    compiling) and its end points' risks are finite."""
    out = tmp_path / "x"
    arguments = "flow --attention softmax --lam 1e50 --L 3 --d 20 --n 2 --t-max 1 --saves 3 --out"
    assert main([*arguments.split(), str(out)]) == 0
    assert json.loads((out / "run.json").read_text())["status"] == "ok"
    rows = [row.split(",") for row in (out / "trajectories.csv").read_text().splitlines()]
    values = np.array([[float(value) for value in row[1:]] for row in rows[1:]])  # t, lam, the overlaps, the risk
    assert rows[0][-1] == "risk" and values.shape == (2 * 3, 8) and np.isfinite(values).all()
