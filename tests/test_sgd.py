"""run_sgd against the exact overlap map, an independent NumPy SGD, and its own guarantees.

Compile time dominates (each static configuration of `run_sgd` is one XLA compilation of 4-10 s
of CPU on a 2-core machine), so the tests share configurations:

- population PGD: one problem, 3 seeds, 1000 steps logged every 100, compiled twice (init
  "manifold" at constant lam, given overlaps under a schedule); the overlap map is compiled once
  (an `InverseTimeDecay` with rate 0 stands for the constant lam: it returns lam0 exactly);
- online SGD: 3 seeds, 20 steps logged at every step, batch 64, compiled once (determinism, the
  NumPy reference, divergence: lr is traced, so a new lr does not recompile);
- dataset mode: the same 20 steps, n = 64, full batch in float64 and batch 16 in float32 (the
  float32 check lives there, which also covers the float32 training and test risks).

Online and dataset runs are also checked against a NumPy SGD with a hand-written gradient, fed the
samples run_sgd draws (`_reference`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from flowsim import schedules, slr
from flowsim.tasks.slr._data import GroundTruth, sample
from tests.reference import random_realizable_overlaps

PROBLEM = slr.Problem(12, 4, 0.5, 0.7, 0.2)

#: Population PGD: step size, length, logging, seeds.
LR, STEPS, LOG_EVERY, SEEDS = 0.05, 1000, 100, 3
#: A schedule that halves lam over the run. lam0 = 0.5 keeps M transversally stable (see
#: test_M_is_transversally_unstable_at_large_lam for what happens at lam0 = 2).
SCHEDULE = schedules.InverseTimeDecay(0.5, 1e-3, LR)
#: Two points off M with sizeable overlaps of both signs, and one on M.
M0 = np.array(
    [
        [0.30, 0.25, 0.10, -0.05, 0.20],
        [-0.20, 0.40, 0.30, 0.10, -0.10],
        [0.05, -0.10, 0.0, 0.0, 0.0],
    ]
)

#: Online SGD and dataset mode: a short run logged at every step.
ONLINE = dict(lr=0.05, steps=20, log_every=1, batch=64, seeds=3)
DATASET_N = 64


def _map(m0, schedule=None):
    """The exact overlap map, always compiled with an InverseTimeDecay schedule (one compilation)."""
    schedule = schedule if schedule is not None else schedules.InverseTimeDecay(PROBLEM.lam, 0.0, LR)
    return slr.iterate_map(PROBLEM.with_schedule(schedule), np.asarray(m0), LR, STEPS, log_every=LOG_EVERY)


def _diverged(run):
    """{seed: first non-finite step} of the run's failures."""
    return {failure.index: failure.step for failure in run.failures()}


def _distance_from_M(m):
    m = np.asarray(m)
    return np.sqrt(m[..., 2] ** 2 + m[..., 3] ** 2 + m[..., 4] ** 2)


@pytest.fixture(scope="module")
def online(key):
    return slr.run_sgd(PROBLEM, key, **ONLINE)


# ---------------------------------------------------------------------------------------------
# 1. Population PGD in R^d is the overlap map


def test_population_pgd_on_M_is_the_overlap_map_and_stays_on_M(key):
    """init "manifold", constant lam (schedule=None): R^d PGD with the exact population gradient and
    the closed-form map on the overlaps are the same map, so only rounding separates them. Observed
    ~3e-15 after 1000 steps; 1e-10 is the required bound (lam = 0.5 does not amplify rounding; see
    test_M_is_transversally_unstable_at_large_lam). M = {theta = eta = rho = 0} is invariant for both;
    in R^d it holds to rounding (observed ~2e-15), asserted to 1e-12."""
    run = slr.run_sgd(
        PROBLEM, key, init="manifold", lr=LR, steps=STEPS, log_every=LOG_EVERY, seeds=SEEDS, mode="population"
    )
    assert run.ys.shape == (SEEDS, STEPS // LOG_EVERY + 1, 5)
    np.testing.assert_array_equal(run.steps, np.arange(0, STEPS + 1, LOG_EVERY))
    np.testing.assert_allclose(run.times, LR * run.steps, rtol=1e-15)
    np.testing.assert_array_equal(run.scheduled_values, PROBLEM.lam)
    assert run.train_risk is None and run.test_risk is None and _diverged(run) == {}

    reference = _map(run.ys[:, 0])
    np.testing.assert_allclose(run.ys, reference.ys, rtol=0, atol=1e-10)
    np.testing.assert_allclose(run.risk, reference.risk, rtol=0, atol=1e-10)
    assert _distance_from_M(run.ys).max() <= 1e-12
    # The run goes somewhere: the overlaps move by O(1), so agreement is not trivial.
    assert np.abs(np.asarray(run.ys[:, -1] - run.ys[:, 0])).max() > 0.1


@pytest.fixture(scope="module")
def population_run(key):
    """Population PGD in R^12 from given overlaps (two off M, one on M) under lam = 0.5 / (1 + 1e-3 step): the run
    of the two tests below, computed once."""
    return slr.run_sgd(
        PROBLEM.with_schedule(SCHEDULE),
        key,
        init=M0,
        lr=LR,
        steps=STEPS,
        log_every=LOG_EVERY,
        seeds=SEEDS,
        mode="population",
    )


def test_population_pgd_off_M_under_a_schedule_is_the_overlap_map(population_run, key):
    """Given initial overlaps (two off M, one on M) and lam = 0.5 / (1 + 1e-3 step): step n uses
    lam(lr n) in both, so the trajectories agree to rounding (observed ~2.5e-15; bound 1e-10)."""
    run = population_run
    np.testing.assert_allclose(run.scheduled_values, 0.5 / (1 + 1e-3 * run.steps), rtol=1e-15)
    reference = _map(run.ys[:, 0], SCHEDULE)
    np.testing.assert_allclose(run.ys, reference.ys, rtol=0, atol=1e-10)
    np.testing.assert_allclose(run.risk, reference.risk, rtol=0, atol=1e-10)
    assert _distance_from_M(run.ys[2]).max() <= 1e-12
    # Not a trivial agreement: the off-M rows start far from M, and every row moves by O(1) (the
    # off-M rows are attracted to M, near kappa = nu = 1).
    assert _distance_from_M(run.ys[:2, 0]).min() > 0.1
    assert np.abs(np.asarray(run.ys[:, -1] - run.ys[:, 0])).max(axis=-1).min() > 0.1
    # 2. init = overlaps is reproduced at step 0 (vectors_with_overlaps in R^12), as (seeds, 5) or (5,).
    np.testing.assert_allclose(run.ys[:, 0], M0, rtol=0, atol=1e-12)
    single = slr.run_sgd(
        PROBLEM.with_schedule(SCHEDULE),
        key,
        init=M0[1],
        lr=LR,
        steps=STEPS,
        log_every=LOG_EVERY,
        seeds=SEEDS,
        mode="population",
    )
    np.testing.assert_allclose(single.ys[:, 0], np.broadcast_to(M0[1], (SEEDS, 5)), rtol=0, atol=1e-12)


def test_population_run_is_the_map_on_the_overlaps(population_run):
    """`compare(run, reference="map")`: mode "population" takes the exact PGD step in R^d, the map takes it on the
    overlaps: the same algorithm, so only round-off separates them (measured: 2.3e-15 after 1000 steps). The run
    of the test above."""
    comparison = slr.compare(population_run, reference="map")
    assert comparison.ys.shape == (3, 11, 5) and comparison.times[-1] == pytest.approx(50.0)
    np.testing.assert_allclose(comparison.ys[:, 0], M0, rtol=0, atol=1e-12)
    assert comparison.max_deviation.max() <= 1e-10
    assert comparison.max_risk_deviation <= 1e-10
    assert comparison.same_attractor.all() and not comparison.reasons
    # Not a trivial agreement: every start moves by O(1).
    assert np.abs(comparison.ys[:, -1] - comparison.ys[:, 0]).max(axis=-1).min() > 0.1


def test_M_is_transversally_unstable_at_large_lam():
    """Why the tests above keep lam <= 0.5. Under lam = 2 / (1 + 1e-3 step) the overlap map keeps M
    exactly invariant (theta = eta = rho = 0 stay exactly 0), but a 1e-15 step off M grows to O(0.1)
    within 300 steps; R^d PGD started on M (whose rounding puts it ~1e-16 off M) then leaves M too,
    and it cannot be compared with the map at 1e-10 there. Same compiled map as above."""
    lam2 = schedules.InverseTimeDecay(2.0, 1e-3, LR)
    start = np.array([[0.05, -0.10, 0.0, 0.0, 0.0], [0.05, -0.10, 1e-15, 0.0, 0.0], [0.05, -0.10, 0.0, 1e-15, 0.0]])
    ys = np.asarray(_map(start, lam2).ys)
    assert _distance_from_M(ys[0]).max() == 0.0
    assert _distance_from_M(ys[1:, -1]).min() > 0.1


# ---------------------------------------------------------------------------------------------
# 2. vectors_with_overlaps


@jax.jit
def _vectors_with_overlaps(points, truth, keys):
    return jax.vmap(slr.vectors_with_overlaps, (0, None, 0))(points, truth, keys)


def test_vectors_with_overlaps_realise_the_requested_overlaps(key):
    """Random realizable points and boundary ones (k in span(k*, v*) where rho = kappa theta + eta nu is
    forced; v in span(k*, v*, k); k = k*; k = v; all zero): unit vectors in R^12 whose overlaps
    equal the requested ones to 1e-12 (the construction is exact up to rounding, ~1e-16)."""
    boundary = np.array(
        [
            [0.6, -0.5, 0.3, 0.8, 0.6 * 0.3 + 0.8 * -0.5],  # a = 0: k = 0.6 k* + 0.8 v*
            [0.3, 0.25, 0.1, -0.05, 0.3 * 0.1 - 0.05 * 0.25],  # b = 0, rho = kappa theta + eta nu
            [0.5, 0.0, 0.6, 0.5, 0.3 + 0.5**0.5 * 0.8],  # c = 0: theta^2 + nu^2 + b^2 = 1
            [1.0, 0.8, 0.6, 0.0, 0.6],  # k = k*
            [0.6, 0.8, 0.6, 0.8, 1.0],  # k = v
            [0.0, 0.0, 0.0, 0.0, 0.0],
        ]
    )
    slr.check_overlaps(boundary)
    points = np.concatenate([boundary, random_realizable_overlaps(np.random.default_rng(5), 60)])
    key_truth, key_vectors = jax.random.split(key)
    truth = slr.ground_truth(key_truth, PROBLEM.d)
    keys = jax.random.split(key_vectors, len(points))
    # Every point in one compiled program (op by op, each of the construction's operations would compile).
    k, v = (np.asarray(x) for x in _vectors_with_overlaps(jnp.asarray(points), truth, keys))
    np.testing.assert_allclose(np.linalg.norm(k, axis=-1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(slr.overlaps(k, v, truth), points, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# 3-4. Online SGD: determinism, an independent reference, float32


def _residual_and_gradients(X, y, k, v, lam):
    """Squared-loss residuals and the hand-written gradients of mean((y - T)^2) in k and v."""
    a, b = X @ k, X @ v  # (batch, L)
    residual = y - np.sum(special.erf(lam * a) * b, axis=-1)
    weight = 2 / np.sqrt(np.pi) * np.exp(-((lam * a) ** 2)) * lam * b  # d T / d a
    g_k = -2 * np.mean(residual[:, None] * np.einsum("bl,bld->bd", weight, X), axis=0)
    g_v = -2 * np.mean(residual[:, None] * np.einsum("bl,bld->bd", special.erf(lam * a), X), axis=0)
    return residual, g_k, g_v


def _reference(key, *, lr, steps, batch, seeds, dtype=jnp.float64, n=None, **_):
    """SGD in NumPy float64 with a hand-written gradient, on the samples run_sgd draws: online
    (n None) or on a fixed dataset of n (epochs of n // batch steps). Returns the overlaps
    (seeds, steps + 1, 5) and, on a dataset, the training risk (seeds, steps + 1).

    White box: it repeats run_sgd's key plumbing (seed i: split(key, seeds)[i], then split into
    truth / init / data / test keys; online, step s's batch from fold_in(data key, s); on a dataset,
    the dataset from the data key and epoch e's order from permutation(fold_in(data key, e), n)) and
    draws the tokens and the initial Gaussian vectors in `dtype` as run_sgd does; everything else is
    float64.
    """
    d, lam = PROBLEM.d, PROBLEM.lam
    logged, train = np.empty((seeds, steps + 1, 5)), np.empty((seeds, steps + 1))
    for i, seed_key in enumerate(jax.random.split(key, seeds)):
        key_truth, key_init, key_data, _ = jax.random.split(seed_key, 4)
        truth = slr.ground_truth(key_truth, d)
        cast = GroundTruth(truth.k_star.astype(dtype), truth.v_star.astype(dtype))
        k_star, v_star = np.asarray(truth.k_star), np.asarray(truth.v_star)
        k, v = (np.asarray(x, dtype=np.float64) for x in jax.random.normal(key_init, (2, d), dtype))
        k, v = k / np.linalg.norm(k), v / np.linalg.norm(v)
        if n is not None:
            data = [np.asarray(x, dtype=np.float64) for x in sample(PROBLEM, cast, key_data, n, dtype)[:2]]
            visits = np.zeros(n, int)
        for step in range(steps + 1):
            logged[i, step] = [k @ k_star, v @ v_star, v @ k_star, k @ v_star, k @ v]
            if n is not None:
                train[i, step] = np.mean(_residual_and_gradients(*data, k, v, lam)[0] ** 2)
            if step == steps:
                break
            if n is None:
                X, y, _ = sample(PROBLEM, cast, jax.random.fold_in(key_data, step), batch, dtype)
                X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
            else:
                epoch, position = divmod(step, n // batch)
                order = np.asarray(jax.random.permutation(jax.random.fold_in(key_data, epoch), n))
                rows = order[position * batch : (position + 1) * batch]
                visits[rows] += 1
                X, y = data[0][rows], data[1][rows]
            _, g_k, g_v = _residual_and_gradients(X, y, k, v, lam)
            k = k - lr * (g_k - (g_k @ k) * k)
            v = v - lr * (g_v - (g_v @ v) * v)
            k, v = k / np.linalg.norm(k), v / np.linalg.norm(v)
        if n is not None and steps % (n // batch) == 0:
            assert (visits == steps * batch // n).all()  # each epoch visits every sample once
    return logged, train


def test_online_sgd_matches_numpy_reference(online, key):
    """Float64 online SGD = the NumPy reference on the same samples: same algorithm, different
    arithmetic order, so agreement to rounding (observed ~4e-16 after 20 steps), asserted to 1e-12."""
    reference, _ = _reference(key, **ONLINE)
    assert online.ys.shape == (3, 21, 5) and online.risk.shape == (3, 21)
    np.testing.assert_allclose(online.ys, reference, rtol=0, atol=1e-12)
    assert _diverged(online) == {}
    assert np.abs(reference[:, -1] - reference[:, 0]).max() > 0.05  # the iterates did move


def test_online_sgd_is_deterministic_given_the_key(online, key):
    """Same key: bitwise the same run. Another key, or another seed within the run: different data,
    different hidden directions and initialisations, so O(1) different overlaps."""
    again = slr.run_sgd(PROBLEM, key, **ONLINE)
    np.testing.assert_array_equal(again.ys, online.ys)
    np.testing.assert_array_equal(again.risk, online.risk)
    other = slr.run_sgd(PROBLEM, jax.random.fold_in(key, 1), **ONLINE)
    assert np.abs(np.asarray(other.ys - online.ys)).max() > 0.1
    m = np.asarray(online.ys)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        assert np.abs(m[i] - m[j]).max() > 0.1


# ---------------------------------------------------------------------------------------------
# 5. Dataset mode


def _squared_residual_sd(m, key, batches=250):
    """Standard deviation of one sample's squared residual at overlaps m (rotation invariant, so any
    truth and any vectors with these overlaps will do), from a fresh sample of 250 x 64 (drawn with
    the sampler compiled for the other tests' batches of 64)."""
    key_truth, key_vectors, key_data = jax.random.split(key, 3)
    truth = slr.ground_truth(key_truth, PROBLEM.d)
    k, v = (np.asarray(x) for x in slr.vectors_with_overlaps(m, truth, key_vectors))
    squares = []
    for batch_key in jax.random.split(key_data, batches):
        X, y, _ = (np.asarray(x) for x in sample(PROBLEM, truth, batch_key, DATASET_N, jnp.float64))
        squares.append((y - np.sum(special.erf(PROBLEM.lam * (X @ k)) * (X @ v), axis=-1)) ** 2)
    return np.std(np.concatenate(squares))


FULL_BATCH = {**ONLINE, "mode": "dataset", "n": DATASET_N, "batch": DATASET_N, "n_test": 10_000}
MINI_BATCH = {**FULL_BATCH, "batch": 16, "dtype": "float32"}


@pytest.fixture(scope="module")
def full_batch(key):
    return slr.run_sgd(PROBLEM, key, **FULL_BATCH)


def test_dataset_full_batch(full_batch, key):
    """batch = n: full-batch GD on a fixed dataset of 64 = the NumPy reference (overlaps and training
    risk to 1e-12; observed ~4e-16). At step 0 the iterate is independent of both the training set and
    the held-out set, so each empirical risk is a mean of i.i.d. squared residuals whose expectation is
    the population risk: both within 4 standard errors (sd from an independent sample of 16000 at the
    same overlaps, / sqrt(n); observed |z| <= 1.8). Deterministic given the key (bitwise), and GD
    lowers the training risk."""
    run, n_test = full_batch, FULL_BATCH["n_test"]
    assert run.train_risk.shape == run.test_risk.shape == run.risk.shape == (ONLINE["seeds"], ONLINE["steps"] + 1)
    assert np.isfinite(run.train_risk).all() and np.isfinite(run.test_risk).all()
    reference, train = _reference(key, **FULL_BATCH)
    np.testing.assert_allclose(run.ys, reference, rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.train_risk, train, rtol=0, atol=1e-12)
    for i, seed_key in enumerate(jax.random.split(jax.random.fold_in(key, 7), ONLINE["seeds"])):
        sd = _squared_residual_sd(run.ys[i, 0], seed_key)
        assert abs(run.test_risk[i, 0] - run.risk[i, 0]) < 4 * sd / np.sqrt(n_test)
        assert abs(run.train_risk[i, 0] - run.risk[i, 0]) < 4 * sd / np.sqrt(DATASET_N)
    again = slr.run_sgd(PROBLEM, key, **FULL_BATCH)
    for a, b in ((again.ys, run.ys), (again.train_risk, run.train_risk), (again.test_risk, run.test_risk)):
        np.testing.assert_array_equal(a, b)
    assert (run.train_risk[:, -1] < run.train_risk[:, 0]).all()


def test_dataset_mini_batch_epochs_in_float32_stay_close_to_float64(key):
    """batch 16 < n = 64: epochs of 4 steps, each over a fresh permutation (20 steps = 5 epochs), in
    float32. float32 draws its dataset and initial vectors in float32 (other random numbers than
    float64 from the same key), so it is compared with the float64 NumPy reference run on those same
    float32 samples (which also checks that every sample is visited once per epoch): the difference
    is float32 arithmetic only. Each step adds O(10) roundings of 6e-8 to unit vectors and 20 steps of
    size 0.05 barely amplify them: observed 8e-8; bound 1e-4 (room for another platform's float32
    summation order and for other seeds). It must also exceed 1e-9: a float32 run agreeing to float64 precision would
    have computed in float64. A wrong batch order would differ by O(lr) = O(0.05)."""
    run = slr.run_sgd(PROBLEM, key, **MINI_BATCH)
    assert run.train_risk.shape == run.test_risk.shape == (ONLINE["seeds"], ONLINE["steps"] + 1)
    assert np.isfinite(run.test_risk).all() and _diverged(run) == {}
    reference, train = _reference(key, **{**MINI_BATCH, "dtype": jnp.float32})
    error = np.abs(np.asarray(run.ys) - reference).max()
    assert 1e-9 < error < 1e-4, error
    np.testing.assert_allclose(run.train_risk, train, rtol=1e-4)  # float32 mean of 64 squares: observed 3e-7
    assert (run.train_risk[:, -1] < run.train_risk[:, 0]).all()


def test_population_pgd_in_float32_stays_close_to_float64(key):
    """Regression: mode "population" with dtype "float32" once raised TypeError while tracing (the
    JVP of `flowsim._special.zeta` got float32 overlaps beside float64 parameters). The float32 run
    follows the float64 one (same initial overlaps, so the same overlap trajectory) to float32
    rounding amplified over 1000 steps; 1e-4 as for the SGD check."""
    options = dict(init=M0, lr=LR, steps=STEPS, log_every=LOG_EVERY, seeds=SEEDS, mode="population")
    scheduled = PROBLEM.with_schedule(SCHEDULE)
    run32 = slr.run_sgd(scheduled, key, **options, dtype="float32")
    run64 = slr.run_sgd(scheduled, key, **options)
    np.testing.assert_allclose(run32.ys, run64.ys, rtol=0, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# 6. Invalid arguments


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lr": 0.0}, r"lr must be a finite number > 0, got 0.0"),
        ({"lr": -0.1}, r"lr must be a finite number > 0, got -0.1"),
        ({"lr": float("nan")}, r"lr must be a finite number > 0, got nan"),
        ({"lr": float("inf")}, r"lr must be a finite number > 0, got inf"),
        ({"lr": True}, r"lr must be a finite number > 0, got True"),
        ({"batch": 0}, r"batch must be an integer >= 1, got 0"),
        ({"batch": 2.0}, r"batch must be an integer >= 1, got 2.0"),
        ({"steps": 0}, r"steps must be an integer >= 1, got 0"),
        ({"log_every": 3}, r"log_every = 3 must divide steps = 20"),
        ({"log_every": 0}, r"log_every must be an integer >= 1, got 0"),
        ({"seeds": 0}, r"seeds must be an integer >= 1, got 0"),
        ({"mode": "sgd"}, r"mode must be one of \('online', 'dataset', 'population'\), got 'sgd'"),
        (
            {"init": "gaussian"},
            r"init must be one of \('sphere', 'manifold'\) or states of shape \(5,\) or \(seeds, 5\), got 'gaussian'",
        ),
        ({"mode": "dataset"}, r"n must be an integer >= 1, got None"),
        ({"mode": "dataset", "n": 50}, r"batch = 64 must divide the dataset size n = 50"),
        ({"mode": "dataset", "n": 64, "n_test": 0}, r"n_test must be an integer >= 1, got 0"),
        ({"init": np.zeros((2, 5))}, r"init must have shape \(5,\) or \(seeds, 5\) = \(3, 5\), got \(2, 5\)"),
        ({"init": np.zeros(4)}, r"init must have shape \(5,\) or \(batch, 5\) \(kappa, nu, theta, eta, rho\)"),
        ({"init": [0.9, 0.0, 0.0, 0.9, 0.0]}, r"is not realizable"),  # kappa^2 + eta^2 > 1
        ({"init": [1.2, 0.0, 0.0, 0.0, 0.0]}, r"has an entry outside \[-1, 1\]"),
        ({"init": [np.nan, 0.0, 0.0, 0.0, 0.0]}, r"has a non-finite entry"),
        ({"dtype": "float16"}, r"dtype must be one of \('float64', 'float32'\), got 'float16'"),
    ],
)
def test_invalid_arguments_are_rejected(key, changes, message):
    with pytest.raises(ValueError, match=message):
        slr.run_sgd(PROBLEM, key, **{**ONLINE, **changes})


def test_init_overlaps_need_d_at_least_4(key):
    with pytest.raises(ValueError, match=r"needs d >= 4, got d = 3"):
        slr.run_sgd(slr.Problem(3, 2, 0.5), key, init=np.zeros(5), lr=0.1, steps=1)


# ---------------------------------------------------------------------------------------------
# 7. Divergence


def _first_non_finite(run):
    bad = ~np.isfinite(np.asarray(run.ys)).all(axis=-1)
    return {int(i): int(run.steps[np.argmax(bad[i])]) for i in np.flatnonzero(bad.any(axis=-1))}


def test_divergence_is_reported_per_seed_and_the_history_kept():
    """Renormalisation keeps every finite step on the sphere, so run_sgd only diverges through
    overflow: once |k - lr g| exceeds ~1.3e154 its norm overflows. With lr = 3e153 that happens
    at random steps (when a batch gives a large gradient): with this key the seeds diverge after
    a few finite steps (steps 2 to 4 on the machine that wrote this test).
    `failures()` must name exactly the seeds whose logged overlaps turn NaN, at the first such
    logged step (log_every = 1); everything before stays finite and is kept, risk included.
    With lr = 1e300 every seed diverges within 2 steps and step 0 is kept."""
    run = slr.run_sgd(PROBLEM, jax.random.key(1), **{**ONLINE, "lr": 3e153})
    diverged = _diverged(run)
    assert diverged == _first_non_finite(run)
    assert diverged and min(diverged.values()) >= 2  # a finite history worth keeping
    m, risk = np.asarray(run.ys), np.asarray(run.risk)
    for seed in range(ONLINE["seeds"]):
        first = diverged.get(seed, ONLINE["steps"] + 1)
        assert np.isfinite(m[seed, :first]).all() and np.isfinite(risk[seed, :first]).all()
        assert np.isnan(m[seed, first:]).all() and np.isnan(risk[seed, first:]).all()
        assert np.abs(m[seed, 1:first] - m[seed, : first - 1]).max() > 0  # the history really moved

    early = slr.run_sgd(PROBLEM, jax.random.key(1), **{**ONLINE, "lr": 1e300})
    early_diverged = _diverged(early)
    assert early_diverged == _first_non_finite(early)
    assert sorted(early_diverged) == [0, 1, 2] and max(early_diverged.values()) <= 2
    assert np.isfinite(np.asarray(early.ys[:, 0])).all()


def test_divergence_is_reported_at_the_first_invalid_iterate():
    """Regression: when |k - lr g| overflowed, `projected_step` once divided by an infinite norm and
    returned the zero vector -- finite, so not flagged, logged with all overlaps exactly 0 and
    reported one step late. A unit vector never has all five overlaps exactly 0 at these random
    points, so no logged iterate before the reported step may be all zeros."""
    run = slr.run_sgd(PROBLEM, jax.random.key(1), **{**ONLINE, "lr": 3e153})
    m = np.asarray(run.ys)
    for seed, first in _diverged(run).items():
        assert not (m[seed, :first] == 0).all(axis=-1).any()
