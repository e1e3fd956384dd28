"""Fixed points, their stability, the attractors reached, and the convergence check."""

import jax
import numpy as np
import pytest

import flowsim
from flowsim import slr
from flowsim.fixedpoints import classify

EXPECTED_ON_M = {
    (-1.0, -1.0): "sink",
    (1.0, 1.0): "sink",
    (1.0, -1.0): "source",
    (-1.0, 1.0): "source",
    (0.0, 0.0): "saddle",
}


@pytest.mark.parametrize(
    "problem",
    [
        slr.Problem(400, 10, 0.1),
        slr.Problem(80, 5, 0.5, gamma=1.0),
        slr.Problem(1000, 20, 0.05, gamma=0.5, eps=0.3),
        slr.Problem(20, 1, 1.0, gamma=1.5),
    ],
    ids=str,
)
def test_fixed_points_on_manifold(problem):
    """Exactly +-(1, 1) sinks, (1, -1) and (-1, 1) sources, (0, 0) saddle; residuals <= 1e-10 (Newton)."""
    points = slr.fixed_points_on_manifold(problem)
    found = {tuple(np.round(p.point, 9) + 0.0): p.kind for p in points}
    assert found == EXPECTED_ON_M
    assert all(p.residual <= 1e-10 for p in points)
    sink = next(p for p in points if p.kind == "sink")
    assert sink.value == pytest.approx(float(slr.oracle_risk(problem)), rel=1e-12)


def test_classify_bands():
    assert classify([-1.0, -2.0], 1e-8) == "sink"
    assert classify([1.0, 2.0 + 1j], 1e-8) == "source"
    assert classify([-1.0, 2.0], 1e-8) == "saddle"
    assert classify([-1.0, 1e-10], 1e-8) == "non-hyperbolic"


def test_fixed_points_5d_include_the_oracle_as_a_sink(key):
    """Among the 5-D fixed points: the oracle is a sink (all five eigenvalues < 0) and
    (1, -1, 0, 0, 0), a source within M, is a saddle of the 5-D flow (attracting along theta). Newton starts
    from 12 sphere and 12 manifold draws (verify's below: one compiled draw) and the corners of M."""
    problem = slr.Problem(400, 10, 0.1)
    points = {tuple(np.round(p.point, 6) + 0.0): p for p in slr.fixed_points(problem, key, n_starts=12)}
    oracle = points[(1.0, 1.0, 0.0, 0.0, 0.0)]
    assert oracle.kind == "sink" and np.all(np.real(oracle.eigenvalues) < 0)
    assert points[(1.0, -1.0, 0.0, 0.0, 0.0)].kind == "saddle"
    for point in points.values():
        slr.check_overlaps(point.point, atol=1e-9)


def test_attractors_group_end_points_with_symmetry():
    """(k, v) and (-k, -v) give the same predictor: both signs of the oracle are one attractor."""
    problem = slr.Problem(400, 10, 0.1)
    finals = np.array([[1, 1, 0, 0, 0], [-1, -1, 0, 0, 0], [0.5, 0.2, 0.1, 0.0, 0.0]], dtype=float)
    # 11 copies of the three: 33 end points, the batch of the test above's Newton solve (one compiled program).
    found, labels = slr.attractors(problem, np.tile(finals, (11, 1)))
    assert len(found) == 1 and found[0].is_target and found[0].count == 22
    assert list(labels) == [0, 0, -1] * 11  # the last point is not near a fixed point


def test_verify_convergence_on_a_small_problem():
    """d = 60: every start on M converges; from the sphere at small lam a share ends at another attractor."""
    settings = [flowsim.Setting("small lam", slr.Problem(60, 5, 0.2))]
    report = slr.verify_convergence(settings, key=jax.random.key(1), n=12, t_max=600.0, n_saves=61)
    on_m, sphere = report.rows
    assert report.claim_holds
    assert on_m.converged == on_m.n and np.isfinite(on_m.median_time) and on_m.failed == 0
    assert sphere.converged + sphere.slow + sum(a.count for a in sphere.others) + sphere.unassigned == sphere.n
    for attractor in sphere.others:
        assert attractor.risk > float(slr.oracle_risk(settings[0].task))
    text = flowsim.format_report(report)
    assert "HOLDS" in text and "small lam" in text
