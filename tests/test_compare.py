"""SGD runs against their deterministic limits: the population map, the flow, and full-batch GD on n samples.

Compiling costs seconds per program and each static configuration of `run_sgd` (mode, steps,
log_every, batch, n) is its own program, while lr, lam and the schedule's numbers are traced. So
the runs share programs: every online and dataset run has SEEDS seeds and 33 logged times under
SCHEDULE, the lr sweep's lr = LR run is also the batch sweep's batch = BATCH run, the CLI quick
path repeats the lr = LR / 4 run in-process, and every flow solve (comparison or continuation of
end points) has SEEDS rows and 33 saved times: one compiled solve. The comparison of a population run
with the map lives in tests/test_sgd.py, beside the run it repeats (the same compiled programs).

Deviations are statistics of fixed seeds: the bounds hold with margin for these seeds, and each
test states the measured numbers and the scale theory predicts.
"""

import jax
import matplotlib.pyplot
import numpy as np
import pytest

import flowsim
from flowsim import figures, schedules, slr
from flowsim.cli import main

PROBLEM = slr.Problem(d=16, L=4, lam=0.5)
#: lam = 0.5 / (1 + 0.125 t): a function of t, so one object serves every lr and the flow.
SCHEDULE = schedules.InverseTimeDecay(0.5, 5e-3, 0.04)
#: The task every online and dataset run trains on: PROBLEM with lam under SCHEDULE.
SCHEDULED = PROBLEM.with_schedule(SCHEDULE)
#: A start off M with kappa, nu well away from the saddle at 0: the flow heads for the sink
#: (1, 1, 0, 0, 0) at once, and SGD noise is not amplified by an escape from the saddle.
M0 = np.array([0.3, 0.3, 0.05, 0.05, 0.05])
SEEDS, LOGS, T_END, LR, BATCH = 6, 32, 5.12, 0.04, 32
#: The sweeps train in R^d (`slr.run_sgd`, engine "rd"), from M0.
RD = dict(train=slr.run_sgd, train_options=dict(engine="rd", seeds=SEEDS, init=M0))


@pytest.fixture(scope="module")
def seed_key():
    return jax.random.key(3)


@pytest.fixture(scope="module")
def lr_sweep(seed_key):
    train_options = {**RD["train_options"], "batch": BATCH}
    return slr.sweep_lr(
        SCHEDULED, seed_key, [LR, LR / 4], t_end=T_END, logs=LOGS, train=slr.run_sgd, train_options=train_options
    )


def test_online_sgd_tracks_the_flow_better_at_a_smaller_step(lr_sweep):
    """Online SGD (batch 32, d = 16) against the flow on [0, 5.12]: fluctuations of order
    sqrt(lr / batch) (0.018 at lr = 0.01) and a bias of order lr. Measured with these seeds:
    largest deviation of any overlap 0.27 at lr = 0.04 and 0.089 at lr = 0.01 (risk: 0.054),
    means over seeds 0.19 and 0.072 (slope 0.71)."""
    coarse, fine = lr_sweep.comparisons
    assert fine.lr == pytest.approx(LR / 4) and fine.steps[-1] == 512 and coarse.steps[-1] == 128
    assert fine.times[-1] == pytest.approx(T_END) and coarse.times[-1] == pytest.approx(T_END)
    assert fine.max_deviation.max() <= 0.15
    assert fine.max_risk_deviation <= 0.1
    # lr / 4 at fixed lr * steps: the deviation drops by 2 (fluctuations) to 4 (bias), for every seed.
    assert lr_sweep.deviation[1] <= lr_sweep.deviation[0] / 1.8
    assert np.all(fine.state_deviation < coarse.state_deviation)
    assert 0.4 <= lr_sweep.slope <= 1.2
    # Both head for the sink: nu near 1 and kappa still creeping up at t = 5.12.
    assert fine.same_attractor.all() and coarse.same_attractor.all()
    assert np.all(fine.ys[:, -1, 1] > 0.99) and np.all(fine.sgd[:, -1, 1] > 0.9)


def test_larger_batches_track_the_flow_better(seed_key, lr_sweep):
    """At lr = 0.04 the deviation falls like batch^(-1/2) (fluctuations) to batch^(-1) (the drift
    of the renormalisation, lr d / batch). Measured: 0.19 and 0.068 at batch 32 and 128 (slope -0.75)."""
    sweep = slr.sweep_batch(SCHEDULED, seed_key, [BATCH, 4 * BATCH], lr=LR, t_end=T_END, logs=LOGS, **RD)
    # Same key, lr and batch as the lr sweep's first run: the same run.
    np.testing.assert_array_equal(sweep.comparisons[0].sgd, lr_sweep.comparisons[0].sgd)
    assert sweep.deviation[1] < sweep.deviation[0]
    assert -1.2 <= sweep.slope <= -0.4


def test_full_batch_gd_approaches_population_gd_as_n_grows(seed_key):
    """Full-batch GD on n samples against population GD (same lr, same start): the empirical
    gradient is off by O(sqrt(d / n)), so the deviation falls like n^(-1/2). Two sizes 64 apart
    (a third costs one more compilation of about 10 s): measured with these seeds, mean deviation
    0.48 at n = 125 and 0.034 at n = 8000 (slope -0.64; with n = 100, 1000, 10000: 0.46, 0.15,
    0.035, slope -0.56), and every n = 8000 run ends at the map's attractor."""
    sweep = slr.sweep_dataset(
        SCHEDULED,
        seed_key,
        [125, 8000],
        lr=LR,
        steps=128,
        log_every=4,
        train=slr.run_sgd,
        train_options=dict(mode="dataset", seeds=SEEDS, init=M0, n_test=16),
    )
    assert sweep.deviation[1] <= sweep.deviation[0] / 4
    assert np.all(sweep.comparisons[1].state_deviation < sweep.comparisons[0].state_deviation)
    assert -0.8 <= sweep.slope <= -0.35
    assert sweep.deviation[1] <= 0.08
    assert sweep.comparisons[1].same_attractor.all()


def test_compare_uses_the_runs_schedule_and_checks_the_reference(lr_sweep, seed_key):
    """The run carries its task, schedule included, so compare cannot be given another problem's lam:
    the reference is the flow under the lam the run saw, not the flow at problem.lam."""
    run = slr.run_sgd(SCHEDULED, seed_key, lr=LR, steps=128, log_every=4, batch=BATCH, **RD["train_options"])
    np.testing.assert_allclose(run.scheduled_values, 0.5 / (1 + 0.125 * run.times), rtol=1e-15)
    comparison = lr_sweep.comparisons[0]  # the comparison of this same run
    np.testing.assert_array_equal(comparison.sgd, run.ys)
    np.testing.assert_array_equal(comparison.ys, slr.solve_flow(run.task, run.ys[:, 0], run.times).ys)
    # PROBLEM's constant lam as a schedule of rate 0 (it returns lam0 exactly): the compiled solve of the schedule.
    constant = PROBLEM.with_schedule(schedules.InverseTimeDecay(PROBLEM.lam, 0.0, LR))
    at_fixed_lam = np.asarray(slr.solve_flow(constant, run.ys[:, 0], run.times).ys)
    assert np.abs(comparison.ys - at_fixed_lam).max() > 1e-2
    with pytest.raises(ValueError, match="reference must be one of"):
        slr.compare(run, reference="ode")
    with pytest.raises(ValueError, match="lrs must hold at least two"):
        slr.sweep_lr(PROBLEM, seed_key, [LR], t_end=T_END)


def test_the_table_and_the_figure_say_that_end_points_are_compared_up_to_the_symmetry(lr_sweep):
    comparison = lr_sweep.comparisons[0]
    stated = "(kappa, nu, theta, eta, rho) -> (-kappa, -nu, -theta, -eta, rho)"
    assert comparison.symmetry == stated
    assert f"end dist and same attr. are taken up to the symmetry {stated}" in comparison.table()
    figure = figures.comparison_figure(comparison, PROBLEM)
    assert f"(up to {stated})" in figure.get_suptitle()
    matplotlib.pyplot.close(figure)


def test_end_points_are_compared_up_to_the_sign_symmetry():
    """Near the attractor off M, +-(0, 0, 0.38, 1, 0) (d = 20, L = 10, lam = 1), an SGD end point
    with kappa = -0.016 and the flow's with kappa = +0.002 are 0.0398 apart (in rho) up to (k, v) -> (-k, -v);
    the canonical representative on both would have mirrored one of them only (distance 2). A
    non-finite end point (a diverged run) is infinitely far."""
    sgd = np.array([-0.0162, 0.0103, -0.3789, -0.9901, -0.039])
    flow = np.array([0.0017, 0.0048, -0.3785, -1.0, 0.0008])
    assert flowsim.distance_up_to_symmetry(PROBLEM, sgd, flow) == pytest.approx(0.0398, abs=1e-12)
    assert flowsim.distance_up_to_symmetry(PROBLEM, sgd, -flow * [1, 1, 1, 1, -1]) == pytest.approx(0.0398, abs=1e-12)
    assert np.abs(flowsim.canonical(PROBLEM, sgd) - flowsim.canonical(PROBLEM, flow)).max() > 1.9
    assert flowsim.distance_up_to_symmetry(PROBLEM, np.array([np.nan, 0, 0, 0, 0]), flow) == np.inf


def test_cli_compare_prints_the_table_and_draws_the_overlay(tmp_path, capsys, lr_sweep):
    """The quick path, in-process with the options of the lr sweep's lr = 0.01 run so that its
    compiled SGD and flow are reused (a subprocess would compile both again: tens of seconds
    here); the table's numbers are that comparison's. The same schedule, per step: 0.5 / (1 +
    1.25e-3 step) at lr = 0.01 is 0.5 / (1 + 0.125 t)."""
    args = ["compare", "--engine", "rd", "--d", "16", "--L", "4", "--lam", "0.5", "--decay", "1.25e-3", "--eps", "0"]
    args += ["--lr", str(LR / 4), "--steps", "512", "--log-every", "16", "--batch", str(BATCH)]
    args += ["--seeds", str(SEEDS), "--seed", "3", "--init", ",".join(str(x) for x in M0), "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "SGD vs gradient flow" in out and "same attractor" in out
    row = next(line for line in out.splitlines() if line.split()[:1] == ["max"])
    np.testing.assert_allclose([float(x) for x in row.split()[1:6]], lr_sweep.comparisons[1].max_deviation, rtol=1e-3)
    for suffix in (".png", ".pdf"):
        path = tmp_path / f"compare{suffix}"
        assert path.stat().st_size > 0 and str(path) in out


def test_cli_compare_bad_input_is_one_line_with_status_2(capsys):
    """In this process (the command line's own start, `python -m flowsim.cli`, is tests/test_cli.py's)."""
    assert main(["compare", "--lr", "-1"]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert captured.err.strip().splitlines() == ["flowsim compare: error: --lr must be a finite number > 0, got -1.0"]
