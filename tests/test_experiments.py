"""The five reference experiments of docs/science.md section 6: parameters, quick reproduction, engines, figures.

Compilation dominates on a small machine: the quick on-M reproduction and its continuation share
one compiled map (30 seeds, 6000 steps logged every 30), and the short runs use few seeds.
"""

import dataclasses
import math

import jax
import matplotlib
import numpy as np
import pytest

from flowsim import Attractor, slr
from flowsim.tasks.slr import _experiments

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ON_M = slr.EXPERIMENTS[0]
SGD = slr.EXPERIMENTS[4]


def test_the_five_experiments_are_the_spec_table():
    table = {  # name: init, d, lam at step 0, decay per step, alpha, steps, algorithm, batch, eps
        "init_manifold": ("manifold", 400, 0.1, 0.0, 4e-3, 20_000, "population", None, 0.0),
        "sphere_large_lambda": ("sphere", 400, 0.9, 0.0, 1e-3, 120_000, "population", None, 0.0),
        "sphere_small_lambda": ("sphere", 400, 0.1, 0.0, 4e-3, 20_000, "population", None, 0.0),
        "sphere_schedule": ("sphere", 400, 1.0, 1e-4, 4e-3, 120_000, "population", None, 0.0),
        "sgd_sphere_schedule": ("sphere", 80, 2.0, 1e-4, 1e-3, 200_000, "sgd", 5, 0.1),
    }
    assert [e.name for e in slr.EXPERIMENTS] == list(table)
    for e in slr.EXPERIMENTS:
        assert (e.init, e.d, e.lam, e.decay, e.alpha, e.steps, e.algorithm, e.batch, e.eps) == table[e.name]
        assert (e.L, e.gamma) == (10, math.sqrt(0.5))
        problem, schedule = e.task, e.task.schedule()
        assert (problem.d, problem.L, schedule.initial, problem.gamma, problem.eps) == (e.d, 10, e.lam, e.gamma, e.eps)
        # lam = lam0 / (1 + decay * step), and the schedule gives it on the clock t = alpha * step.
        steps = np.array([0, 1, 10_000, e.steps])
        expected = e.lam / (1 + e.decay * steps)
        np.testing.assert_allclose(schedule.at_step(steps), expected, rtol=1e-15)
        np.testing.assert_allclose([float(problem.lam_at(e.alpha * n)) for n in steps], expected, rtol=1e-12)
    assert float(slr.EXPERIMENTS[3].task.schedule().at_step(10_000)) == pytest.approx(0.5)
    assert float(SGD.task.schedule().at_step(200_000)) == pytest.approx(2.0 / 21)


@pytest.fixture(scope="module")
def quick_on_m(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    finished = []
    (result,) = slr.reproduce(jax.random.key(7), quick=True, out=out, experiments=[ON_M], each=finished.append)
    assert finished == [result]  # handed over as soon as it was done (the command line writes it then)
    return result, out


def test_quick_reproduction_on_M_converges_with_matched_signs(quick_on_m):
    """The issue's claim: at quick length every seed of the on-M experiment converges, with matched signs.

    At 6000 steps (t = 24) every seed has |nu| = 1 and kappa of nu's sign, still rising (kappa
    converges slowly, docs/science.md section 5): the summary counts them as approaching +-(k*, v*).
    Continuing the same map shows that each of them then reaches, within 1e-2, the sign it had."""
    result, _ = quick_on_m
    assert int(result.steps[-1]) == _experiments.QUICK_STEPS["population"] == 6000
    assert result.seeds == 30 and result.engine == "overlaps"
    s = result.summary
    assert s.reached + s.approaching == s.seeds == 30
    assert s.others == [] and s.unassigned == 0 and s.diverged == 0 and s.target_share == 1.0
    final = result.ys[:, -1]
    kappa, nu = final[:, 0], final[:, 1]
    assert np.all(np.sign(kappa) == np.sign(nu))
    assert np.all(np.abs(nu) >= 1 - 1e-6) and np.all(np.abs(kappa) > 0.6)
    assert np.all(final[:, 2:] == 0)  # M is invariant under the map
    # Both signs occur among 30 starts: the convergence is to +-(k*, v*), not to one of them.
    assert 0 < np.sum(kappa > 0) < 30
    # |kappa| still rises over the last tenth of the run.
    assert np.all(np.abs(kappa) > np.abs(result.ys[:, -20, 0]))
    # The excess risk approaches the oracle's from above.
    assert np.all(result.excess_risk[:, -1] >= s.target_excess - 1e-12)
    assert s.final_excess - s.target_excess < 5e-3

    # Five more quick lengths of the same map (same compiled function): each seed reaches its sign.
    m = np.asarray(final)
    for _ in range(5):
        m = np.asarray(slr.iterate_map(ON_M.task, m, ON_M.alpha, 6000, log_every=30).ys)
        m = m[:, -1]
    assert np.max(np.abs(m - np.sign(kappa)[:, None] * np.array([1.0, 1.0, 0, 0, 0]))) <= 1e-2


def test_population_figure_has_the_four_panels_and_files(quick_on_m):
    result, out = quick_on_m
    assert sorted(p.name for p in out.iterdir()) == ["init_manifold.pdf", "init_manifold.png"]
    fig = slr.experiment_figure(result)
    try:
        assert fig.flowsim_result is result
        axes = fig.axes
        assert len(axes) == 4
        risk, absolute, plane, distance = axes
        assert risk.get_yscale() == "log" and distance.get_yscale() == "log"
        assert absolute.get_yscale() == "linear" and plane.get_yscale() == "linear"
        assert "excess risk" in risk.get_ylabel() and "distance to M" in distance.get_ylabel()
        assert "kappa" in plane.get_xlabel() and "nu" in plane.get_ylabel()
        # On M the distance is exactly 0, drawn at the floor 1e-16 of the log axis.
        (lines,) = distance.collections
        assert np.allclose(np.concatenate(lines.get_segments())[:, 1], 1e-16)
        # The mean excess risk is the mean over seeds.
        mean = next(line for line in risk.get_lines() if line.get_label() == "mean over seeds")
        np.testing.assert_allclose(mean.get_ydata(), result.excess_risk.mean(axis=0))
    finally:
        plt.close(fig)


@pytest.mark.parametrize("index", [2, 3])
def test_the_Rd_engine_agrees_with_the_overlap_map(key, index):
    """Population PGD in R^400 and the exact map on the overlaps, from the same overlaps, 400 steps.

    Both experiments share one compiled run per engine (same lengths, same kind of schedule).
    tol = 10 skips the classification (a Newton solve) of end points far from every fixed point.
    Not much longer: in sphere_schedule, lam ~ 1 makes the step alpha = 4e-3 unstable for some
    starts after about 500 steps (a period-2 oscillation grows from round-off), and then the two
    engines part at the rate it grows."""
    experiment = slr.EXPERIMENTS[index]
    options = dict(seeds=4, scale=400 / experiment.steps, log_points=20, tol=10.0)
    rd = slr.run_experiment(experiment, key, engine="rd", **options)
    assert rd.engine == "rd" and int(rd.steps[-1]) == 400 and len(rd.steps) == 21
    m0 = rd.ys[:, 0]
    assert np.max(np.abs(m0[:, 2:])) > 1e-3  # sphere starts: all five overlaps move
    mapped = slr.run_experiment(experiment, key, m0=m0, **options)
    assert mapped.engine == "overlaps"
    np.testing.assert_array_equal(mapped.steps, rd.steps)
    assert np.max(np.abs(mapped.ys - rd.ys)) <= 1e-10
    assert np.max(np.abs(mapped.excess_risk - rd.excess_risk)) <= 1e-10
    assert np.max(np.abs(rd.ys[:, -1] - m0)) > 1e-2  # and they did move
    np.testing.assert_allclose(rd.scheduled_values, experiment.lam / (1 + experiment.decay * rd.steps), rtol=1e-15)


@pytest.fixture(scope="module")
def short_sgd():
    # tol = 10 counts every seed as reached: this run is about the ODE overlay, not the classification
    # (which would compile a Newton solve at d = 80 for end points far from every fixed point).
    return slr.run_experiment(SGD, jax.random.key(3), seeds=3, scale=400 / SGD.steps, log_points=20, tol=10.0)


def test_sgd_run_carries_the_flow_from_each_seeds_start(short_sgd):
    result = short_sgd
    assert result.engine == "overlaps" and int(result.steps[-1]) == 400
    np.testing.assert_allclose(result.times, 1e-3 * result.steps)
    ode = result.ode_ys
    assert ode.shape == result.ys.shape == (3, 21, 5)
    np.testing.assert_allclose(ode[:, 0], result.ys[:, 0], atol=1e-12)
    # The flow from those starts, on the clock t = alpha * step, with lam = 2 / (1 + 1e-4 step).
    flow = slr.solve_flow(SGD.task, result.ys[:, 0], result.times, max_steps=1_000_000)
    np.testing.assert_allclose(ode, np.asarray(flow.ys), atol=1e-9)
    np.testing.assert_allclose(result.ode_excess_risk, np.asarray(flow.observed) - 0.01, atol=1e-9)
    # The excess risk is R - eps^2 of the SGD iterates; the oracle's at each logged lam.
    lams = result.scheduled_values[[0, -1]]
    oracle = [float(slr.oracle_risk(slr.Problem(80, 10, lam, eps=0.1))) - 0.01 for lam in lams]
    np.testing.assert_allclose(result.target_excess[[0, -1]], oracle, rtol=1e-12)
    assert result.summary.target_excess == pytest.approx(oracle[-1], rel=1e-12)


def test_sgd_figure_overlays_the_flow_dashed(short_sgd, tmp_path):
    fig = slr.experiment_figure(short_sgd)
    try:
        assert len(fig.axes) == 4 and fig.axes[3].get_yscale() == "log"
        for ax in fig.axes[1:]:
            dashed = [c for c in ax.collections if c.get_linestyle()[0][1] is not None]
            assert dashed, f"no dashed flow in panel {ax.get_ylabel()!r}"
        assert any(line.get_label() == "ODE, mean" and line.get_linestyle() == "--" for line in fig.axes[0].lines)
        from flowsim.figures import save_figure

        paths = save_figure(fig, tmp_path / "sgd")
        assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    finally:
        plt.close(fig)


def test_summary_table_rows(quick_on_m, short_sgd):
    on_m, _ = quick_on_m
    other = Attractor(np.array([0.0, 0.0, 0.63, 1.0, 0.0]), "sink", np.array([-1.0]), 0.25, 6, 0.2, False)
    with_other = dataclasses.replace(on_m, summary=dataclasses.replace(on_m.summary, others=[other], approaching=24))
    lines = slr.summary_table([with_other, short_sgd]).splitlines()
    assert lines[0].split()[:4] == ["experiment", "steps", "seeds", "reached"]
    row = lines[1].split()
    assert row[:6] == ["init_manifold", "6000", "30", "0%", "80%", "20%"]
    assert float(row[-1]) == pytest.approx(on_m.summary.target_excess, rel=1e-4)
    assert float(row[-2]) == pytest.approx(on_m.summary.final_excess, rel=1e-4)
    assert lines[2].strip().startswith("other attractor (+0.000, +0.000, +0.630, +1.000, +0.000) sink: share 20%")
    assert lines[3].split()[:4] == ["sgd_sphere_schedule", "400", "3", "100%"]
    assert "max-norm distance to +-(k*, v*)" in lines[4]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seeds": 0}, "seeds must be an integer >= 1, got 0"),
        ({"seeds": 2.5}, "seeds must be an integer >= 1, got 2.5"),
        ({"scale": 0.0}, "scale must be a finite number > 0, got 0.0"),
        ({"engine": "gpu"}, "engine must be one of ('overlaps', 'rd'), got 'gpu'"),
        ({"m0": np.zeros((2, 5))}, "m0 must have shape (seeds, 5) = (30, 5), got (2, 5)"),
        ({"log_points": 0}, "log_points must be an integer >= 1, got 0"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        slr.run_experiment(ON_M, jax.random.key(0), **kwargs)


def test_cli_rejects_bad_seeds_in_one_line(capsys):
    from flowsim.cli import main

    assert main(["reproduce", "--quick", "--seeds", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == "flowsim reproduce: error: --seeds must be an integer >= 1, got 0"
