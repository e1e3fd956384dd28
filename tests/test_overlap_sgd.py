"""The exact online-SGD chain on the overlaps (engine="overlaps") against SGD in R^d."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from flowsim import slr
from flowsim.tasks.slr import _generated as generated
from flowsim.tasks.slr._data import empirical_risk, sample
from flowsim.tasks.slr._overlap_sgd import frame, renormalised_step, wishart_2x2
from flowsim.tasks.slr._sgd import projected_step
from tests.shared import CAPPED, compiles_nothing

#: A start off M with every overlap non-zero.
START = np.array([0.3, -0.2, 0.25, 0.1, 0.15])


def _frame_basis(k, v, truth):
    """The frame (k*, v*, e3, e4) of `frame` as vectors of R^d, rows of a (4, d) matrix."""
    kf, vf = frame(slr.overlaps(k, v, truth))
    e3 = (k - kf[0] * truth.k_star - kf[1] * truth.v_star) / kf[2]
    e4 = (v - vf[0] * truth.k_star - vf[1] * truth.v_star - vf[2] * e3) / vf[3]
    return jnp.stack([truth.k_star, truth.v_star, e3, e4])


@pytest.mark.parametrize(("d", "L", "batch", "lr"), [(5, 2, 1, 0.3), (300, 10, 5, 1e-3)])
def test_renormalised_step_is_the_Rd_step_on_the_same_data(d, L, batch, lr):
    """Feed the frame parts and the orthogonal Gram matrix of an R^d mini-batch gradient to the
    overlap update: it returns the overlaps of the R^d step to rounding (<= 1e-12)."""
    problem = slr.Problem(d, L, 0.7, eps=0.1)
    keys = jax.random.split(jax.random.key(d), 4)
    truth = slr.ground_truth(keys[0], d)
    k, v = slr.vectors_with_overlaps(START, truth, keys[1])
    X, y, _ = sample(problem, truth, keys[2], batch)
    g_k, g_v = jax.grad(empirical_risk, (2, 3))(X, y, k, v, problem.lam)
    expected = slr.overlaps(projected_step(k, g_k, lr), projected_step(v, g_v, lr), truth)

    basis = _frame_basis(k, v, truth)
    assert np.abs(basis @ basis.T - np.eye(4)).max() < 1e-14
    u, w = g_k - basis.T @ (basis @ g_k), g_v - basis.T @ (basis @ g_v)
    gram = jnp.stack([u @ u, u @ w, w @ w])
    k_frame, v_frame = frame(slr.overlaps(k, v, truth))
    got = renormalised_step(k_frame, v_frame, basis @ g_k, basis @ g_v, gram, lr)
    np.testing.assert_allclose(got, expected, atol=1e-12, rtol=0)


POINTS = [
    START,
    [0.6, 0.7, 0.0, 0.0, 0.0],  # on M
    [1.0, 0.2, 0.1, 0.0, 0.1],  # k = k*: a = 0 in the frame
    [0.3, 0.2, 0.3, 0.2, 1.0],  # v = k: span(k, v) is a line
    [-0.05, 0.9, 0.3, 0.1, -0.2],
]


@pytest.mark.parametrize("m", POINTS)
def test_without_noise_the_step_is_the_population_map(m):
    """Expected gradient, no orthogonal part: the chain's update (`Problem._pgd_step`, the exact PGD step of
    the maps without a closed form: the population gradient in the frame, renormalised) applied to erf's
    closed-form risk is the generated discrete population map (to 1e-12)."""
    m = jnp.asarray(m, dtype=float)
    slr.check_overlaps(m)
    step, expected = _step_and_map(slr.Problem(80, 3, 0.5, eps=0.1), m, 4e-3)
    np.testing.assert_allclose(step, expected, atol=1e-12, rtol=0)


@jax.jit
def _step_and_map(problem, m, alpha):
    """(`Problem._pgd_step`, the generated `pgd_map`) at m: one compiled program for every point and alpha (and
    the population map of the huge-batch test below, at the same problem)."""
    expected = generated.pgd_map(*m, problem.d, problem.L, problem.lam, problem.gamma, problem.eps, alpha)
    return problem._pgd_step(0.0, m, alpha), expected


@pytest.mark.parametrize(("scale", "dof"), [((2.0, -0.6, 0.5), 7), ((1.0, 1.0, 1.0), 1), ((0.0, 0.0, 3.0), 40)])
def test_wishart_2x2_has_the_law_of_scipy_wishart(scale, dof):
    """Bartlett draws vs scipy.stats.wishart (the third scale is singular): means within 4 SE,
    Kolmogorov-Smirnov on each entry does not reject at 1e-3."""
    n = 20_000
    draws = np.asarray(
        jax.vmap(lambda key: wishart_2x2(key, jnp.asarray(scale), dof))(jax.random.split(jax.random.key(3), n))
    )
    s11, s12, s22 = scale
    matrix = np.array([[s11, s12], [s12, s22]])
    np.testing.assert_allclose(
        draws.mean(0), dof * matrix[[0, 0, 1], [0, 1, 1]], atol=4 * draws.std(0).max() / n**0.5 + 1e-12
    )
    if np.linalg.det(matrix) > 0 and dof >= 2:
        reference = scipy.stats.wishart(dof, matrix).rvs(n, random_state=np.random.default_rng(0))
        reference = reference[:, [0, 0, 1], [0, 1, 1]]
    else:  # singular: W = g g^T with g ~ N(0, scale) summed over dof
        g = np.random.default_rng(0).multivariate_normal([0, 0], matrix, size=(n, dof))
        reference = np.stack([(g[..., 0] ** 2).sum(1), (g[..., 0] * g[..., 1]).sum(1), (g[..., 1] ** 2).sum(1)], -1)
    for j in range(3):
        if np.ptp(reference[:, j]) > 0:
            assert scipy.stats.ks_2samp(draws[:, j], reference[:, j]).pvalue > 1e-3


def test_the_draws_are_float32_and_the_step_computes_in_float64():
    """A step's random numbers are float32 (docs/science.md section 5) and the step widens them before any arithmetic:
    it gives, bit for bit, what it gives the same numbers cast to float64 by hand, a float64 state."""
    problem = slr.Problem(80, 3, 0.5, eps=0.1)
    noise = problem.sgd_noise(jax.random.key(0), 2)
    assert [x.dtype for x in noise] == [jnp.float32, jnp.float32]
    m = jnp.asarray(START)
    step = problem.sgd_step(0.0, m, 0.05, noise, 2)
    assert step.dtype == jnp.float64
    np.testing.assert_array_equal(step, problem.sgd_step(0.0, m, 0.05, tuple(x.astype(float) for x in noise), 2))


def _z_scores(a, b):
    """Two-sample z-scores of the means and of the standard deviations, per overlap."""
    n_a, n_b = len(a), len(b)
    z_mean = (a.mean(0) - b.mean(0)) / np.sqrt(a.var(0) / n_a + b.var(0) / n_b)

    def sd_variance(x):  # delta method: Var(s) ~ (mu4 - sigma^4) / (4 sigma^2 n)
        centred = x - x.mean(0)
        return ((centred**4).mean(0) - x.var(0) ** 2) / (4 * x.var(0) * len(x))

    z_sd = (a.std(0) - b.std(0)) / np.sqrt(sd_variance(a) + sd_variance(b))
    return z_mean, z_sd


SEEDS = 2000
#: d = 8 (the fewest orthogonal directions, d - 4 = 4: the chain's Wishart noise is furthest from Gaussian),
#: L = 3, batch 2, compared after 1, 10 and 100 steps. benchmarks/overlap_sgd_law.py runs the same comparison
#: to 1000 steps, and at d = 80 and 400 (batch 1): each d compiles both engines again, and 1000 steps of 2000
#: seeds cost 25 s of CPU here.
D, BATCH, COMPARED = 8, 2, (1, 10, 100)


@pytest.fixture(scope="module")
def both_engines():
    problem = slr.Problem(D, 3, 0.5, eps=0.1)
    return {
        engine: slr.run_sgd(
            problem, jax.random.key(i), init=START, lr=0.01, steps=COMPARED[-1], batch=BATCH, seeds=SEEDS, engine=engine
        )
        for i, engine in enumerate(slr.ENGINES)
    }


def test_the_chain_has_the_law_of_online_sgd_in_Rd(both_engines):
    """After 1, 10 and 100 steps from the same overlaps, over 2000 seeds per engine: means and
    standard deviations of every overlap agree within 4 standard errors, and two-sample
    Kolmogorov-Smirnov tests on kappa and nu do not reject at the 1e-3 level (fixed seeds)."""
    runs = both_engines
    for step in COMPARED:
        a, b = (np.asarray(runs[engine].ys[:, step]) for engine in slr.ENGINES)
        assert np.isfinite(a).all() and np.isfinite(b).all()
        z_mean, z_sd = _z_scores(a, b)
        assert np.abs(z_mean).max() < 4, (step, z_mean)
        assert np.abs(z_sd).max() < 4, (step, z_sd)
        for j in (0, 1):
            assert scipy.stats.ks_2samp(a[:, j], b[:, j]).pvalue > 1e-3, (step, j)
    # The runs moved: after the last compared step kappa's law is far from the start.
    assert abs(np.asarray(runs["overlaps"].ys[:, COMPARED[-1], 0]).mean() - START[0]) > 0.05


def test_a_huge_batch_step_averages_to_the_population_map():
    """With batch 4000, one step's mean over 400 seeds is the population map's step within 4 SE
    (the chain's own noise is then ~ lr / sqrt(batch))."""
    problem = slr.Problem(80, 3, 0.5, eps=0.1)
    run = slr.run_sgd(
        problem, jax.random.key(5), init=START, lr=0.05, steps=1, batch=4000, seeds=400, engine="overlaps"
    )
    after = np.asarray(run.ys[:, 1])
    expected = np.asarray(_step_and_map(problem, jnp.asarray(START), 0.05)[1])
    stderr = after.std(0) / np.sqrt(len(after))
    assert (np.abs(after.mean(0) - expected) < 4 * stderr).all()
    assert np.abs(after.mean(0) - START).max() > 10 * stderr.max()  # the step is resolved


def test_same_key_same_run_and_risk_is_the_closed_form():
    problem = slr.Problem(80, 3, 0.5, eps=0.1)
    runs = [  # the call of the test above: compiled once
        slr.run_sgd(problem, jax.random.key(5), init=START, lr=0.05, steps=1, batch=4000, seeds=400, engine="overlaps")
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0].ys, runs[1].ys)
    expected = slr.population_risk(problem, runs[0].ys)
    np.testing.assert_allclose(runs[0].risk, expected, rtol=1e-12)


def test_the_chain_at_another_d_runs_the_compiled_chain(caplog):
    """d is a number the chain traces (its chi-square draws, the informative token's mean): a run at another d
    with the same shapes compiles nothing (no XLA compilation logged) and steps with another law."""

    def run(d):
        problem = slr.Problem(d, 3, 0.5, eps=0.1)  # the calls of the tests above: compiled once
        return slr.run_sgd(
            problem, jax.random.key(5), init=START, lr=0.05, steps=1, batch=4000, seeds=400, engine="overlaps"
        )

    at_80 = run(80)
    with compiles_nothing(caplog):
        at_160 = jax.block_until_ready(run(160))
    # Another law: the same keys and starts give other overlaps.
    assert not np.array_equal(np.asarray(at_160.ys[:, 1]), np.asarray(at_80.ys[:, 1]))


def test_a_run_keeps_its_task_as_given():
    """The chain traces d, but the run hands back the task with d the Python int it was given: what reads the
    run's task outside a program works at every d (`flowsim compare --d 300` failed so: the flow's step budget,
    which grows with d from d = 201 on, was computed from the traced d)."""
    problem = slr.Problem(300, 3, 0.5, eps=0.1)  # the calls of the tests above: compiled once
    run = slr.run_sgd(
        problem, jax.random.key(5), init=START, lr=0.05, steps=1, batch=4000, seeds=400, engine="overlaps"
    )
    assert type(run.task.d) is int and run.task.d == 300
    assert run.task.flow_max_steps() == problem.flow_max_steps() == 2**18  # 500 d = 150 000, rounded up


def test_an_overflowing_step_is_a_divergence_not_zero_overlaps():
    """lr = 1e300 overflows the step: every seed diverges at step 1 (NaN), none reads as overlaps 0."""
    problem = slr.Problem(80, 3, 0.5, eps=0.1)
    run = slr.run_sgd(
        problem, jax.random.key(5), init=START, lr=1e300, steps=1, batch=4000, seeds=400, engine="overlaps"
    )
    assert {f.index: f.step for f in run.failures()} == dict.fromkeys(range(400), 1)
    assert np.isnan(np.asarray(run.ys[:, 1])).all() and np.isfinite(np.asarray(run.ys[:, 0])).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"problem": slr.Problem(4, 3, 0.5)}, "engine 'overlaps' needs d >= 5"),
        ({"init": [0.9, 0.9, 0.9, 0.9, 0.9]}, "is not realizable"),
        ({"mode": "dataset", "n": 10}, "engine 'overlaps' runs online SGD only"),
        ({"dtype": "float32"}, "engine 'overlaps' runs in float64 only"),
        ({"engine": "R^d"}, "engine must be one of ('overlaps', 'rd')"),
    ],
)
def test_bad_input_is_rejected(kwargs, message):
    arguments = {"problem": slr.Problem(80, 3, 0.5), "init": "sphere", "engine": "overlaps"} | kwargs
    problem = arguments.pop("problem")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("^", r"\^")):
        slr.run_sgd(problem, jax.random.key(0), lr=0.01, steps=1, **arguments)


@pytest.fixture(scope="module")
def capped_runs():
    """Online SGD with a researcher's map, softmax capped at e (`tests.shared.CAPPED`), 1 000 seeds per engine
    from one start (d = 20, L = 3, lam = 1, batch 2, lr 0.05, 40 steps); the chain also at a wrong d = 40,
    the negative control."""
    start = np.array([0.3, 0.2, 0.1, 0.05, 0.1])

    def run(engine, d, key):
        problem = slr.Problem(d, 3, 1.0, eps=0.1, attention=CAPPED)
        run = slr.run_sgd(problem, key, init=start, lr=0.05, steps=40, log_every=40, batch=2, seeds=1000, engine=engine)
        return np.asarray(run.ys[:, -1])

    return start, run("rd", 20, 1), run("overlaps", 20, 2), run("overlaps", 40, 3)


def test_a_researchers_map_has_one_law_of_online_sgd_on_both_engines(capped_runs):
    """The frame-plus-Wishart construction does not depend on the weight map: for a map made with the public API
    (softmax capped at C = e, which is softmax wherever every score is below 1; every map but erf takes the same
    code path through its rule), two-sample Kolmogorov-Smirnov tests on each of the five overlaps after 40 steps
    do not reject at the family-wise level 0.01 (Bonferroni over the five: each p > 0.002; fixed seeds, measured
    minimum 0.015, on rho). The same tests detect a chain run at the wrong d (d = 40 against 20: p < 1e-6 on at
    least one overlap), so they have the power to see a wrong law at this size; the runs moved by 0.53."""
    start, rd, chain, wrong_d = capped_runs
    assert np.isfinite(rd).all() and np.isfinite(chain).all()
    p_values = [scipy.stats.ks_2samp(rd[:, j], chain[:, j]).pvalue for j in range(5)]
    assert min(p_values) > 0.01 / 5, p_values
    control = [scipy.stats.ks_2samp(rd[:, j], wrong_d[:, j]).pvalue for j in range(5)]
    assert min(control) < 1e-6, control
    assert np.abs(rd.mean(0) - start).max() > 0.4  # the runs moved
