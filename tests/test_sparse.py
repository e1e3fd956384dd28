"""Sparse variable creation (docs/science.md section 8): the data model, the information and ERM limits, the
constructed head and the softmax Lipschitz lemma, the learners (the head, the paper's one-layer Transformer, the
l1 control), the training budgets, the critical sample size and the model selection of its law."""

import functools
import gc
import itertools
import logging
import math
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim.tasks import sparse
from flowsim.tasks.sparse import SparseTarget


def test_the_and_is_balanced_and_the_labels_are_g_of_the_support():
    """p = 2^(-1/3): P(y = 1) = 1/2; 200 000 labels' mean within 4 standard errors (0.0011) of 1/2."""
    target = SparseTarget(100, 3)
    assert target.p == pytest.approx(2 ** (-1 / 3))
    support, table = target.draw_support(0)
    x = sparse.sample_bits(target, 1, 200_000)
    y = np.asarray(sparse.evaluate_target(x, support, table))
    assert abs(y.mean() - 0.5) < 4 * 0.5 / math.sqrt(y.size)
    np.testing.assert_array_equal(y, np.asarray(x)[:, np.asarray(support)].all(axis=1))


@pytest.mark.parametrize("function", sparse.FUNCTIONS)
def test_every_function_is_its_truth_table(function):
    target = SparseTarget(12, 3, function)
    support, table = target.draw_support(3)
    x = np.asarray(sparse.sample_bits(target, 4, 500))
    bits = x[:, np.asarray(support)]
    expected = {
        "and": bits.all(axis=1),
        "or": bits.any(axis=1),
        "majority": bits.sum(axis=1) >= 2,
        "parity": bits.sum(axis=1) % 2 == 1,
        "random": np.asarray(table)[bits @ np.array([4, 2, 1])],
    }[function]
    np.testing.assert_array_equal(np.asarray(sparse.evaluate_target(x, support, table)), expected)


def test_same_seed_same_bits_and_redrawn_sets_identify_the_target():
    target = SparseTarget(30, 3)
    support, table = target.draw_support(7)
    first = sparse.training_set(target, support, table, 8, 20)
    second = sparse.training_set(target, support, table, 8, 20)
    np.testing.assert_array_equal(first[0], second[0])
    x, y, _ = first
    assert sparse.identifies(target, np.asarray(x), np.asarray(y), np.asarray(support), np.asarray(table))
    # A set of 3 samples never identifies a 3-AND among 30 positions: redrawn until the budget is spent.
    with pytest.raises(RuntimeError, match="did not identify the target"):
        sparse.training_set(target, support, table, 8, 3, max_draws=5)


@pytest.mark.parametrize("function", ["and", "or", "parity", "majority", "random"])
def test_identification_matches_brute_force(function):
    """`identifies` against a direct enumeration of every support (and, for "random", every truth table's
    consistency) on small random instances."""
    target = SparseTarget(8, 2, function)
    for seed in range(12):
        support, table = target.draw_support(seed)
        x = np.asarray(sparse.sample_bits(target, 100 + seed, 4 + seed % 6))
        y = np.asarray(sparse.evaluate_target(x, support, table))
        others = []
        for J in map(np.array, itertools.combinations(range(8), 2)):
            if tuple(J) == tuple(np.asarray(support)):
                continue
            index = x[:, J] @ np.array([2, 1])
            if function == "random":
                consistent = all(len(set(y[index == i])) <= 1 for i in range(4))
            else:
                consistent = np.array_equal(np.asarray(table)[index], y)
            others.append(consistent)
        assert sparse.identifies(target, x, y, np.asarray(support), np.asarray(table)) == (not any(others))


@pytest.mark.parametrize("function", ["and", "or"])
def test_the_and_or_identification_matches_every_support(function):
    """`identifies` for the AND and the OR (which searches pairs of columns by a matrix product) against a test of
    every s-subset of the T positions, at s from 1 to 4, on labels of the target and on arbitrary labels."""
    rng = np.random.default_rng(5)
    for trial in range(400):
        s = 1 + trial % 4
        target = SparseTarget(int(rng.integers(max(s, 2), 10)), s, function)
        support = np.sort(rng.choice(target.T, s, replace=False))
        x = rng.random((int(rng.integers(0, 20)), target.T)) < rng.uniform(0.3, 0.95)
        y = {"and": x[:, support].all(axis=1), "or": x[:, support].any(axis=1)}[function]
        y = rng.random(len(x)) < 0.5 if trial % 5 == 0 else y
        g = {"and": lambda bits: bits.all(axis=1), "or": lambda bits: bits.any(axis=1)}[function]
        others = [
            np.array_equal(g(x[:, J]), y) for J in itertools.combinations(range(target.T), s) if J != tuple(support)
        ]
        identified = sparse.identifies(target, x, y, support, target.truth_table(0))
        assert identified == (not any(others)), (trial, function, s)


def test_samples_are_the_first_rows_of_one_draw():
    """`sample_bits` draws m samples from one compiled program per power of two of rows: they are the bits of
    `jax.random.bernoulli(key, p, (m, T))` at every m (with JAX's partitionable Threefry, its default, row i of a
    draw does not depend on how many rows follow); and the ERM limit's trials, drawn by one program per target,
    are those of one trial at a time."""
    target = SparseTarget(13, 3)
    one, many = (np.asarray(jax.random.bernoulli(jax.random.key(9), target.p, (m, 13))) for m in (1, 300))
    np.testing.assert_array_equal(one, many[:1])
    for m in (0, 1, 63, 64, 65, 300):
        np.testing.assert_array_equal(np.asarray(sparse.sample_bits(target, 9, m)), many[:m])
    found = sparse.erm_identifiability(target, 3, trials=4, max_m=60)
    for trial, key in enumerate(jax.random.split(jax.random.key(3), 4)):
        key_support, key_samples = jax.random.split(key)
        support, table = target.draw_support(key_support)
        x = np.asarray(jax.random.bernoulli(key_samples, target.p, (60, 13)))
        y = x[:, np.asarray(support)].all(axis=1)
        m = next((m for m in range(1, 61) if sparse.identifies(target, x[:m], y[:m], support, table)), 61)
        assert found[trial] == m


def test_erm_identifiability_of_the_3_and():
    """The median number of samples at which the 3-AND is the only consistent one (docs/science.md section 8:
    14, 20, 24, 28, 34 at T = 10, 30, 100, 300, 1000 from 200 trials). Here 200 trials per T at T = 10, 30 and 100
    (each T compiles its draws again; benchmarks/sparse_critical.py checks all five); the median of 200 draws of m
    (spread ~6) has a Monte Carlo standard error of about 0.6, and the band is +-2."""
    published = {10: 14, 30: 20, 100: 24}
    for T, expected in published.items():
        m = sparse.erm_identifiability(SparseTarget(T, 3), T, trials=200)
        assert abs(np.median(m) - expected) <= 2, (T, np.median(m))


def test_the_information_limit():
    assert sparse.information_limit(1000, 3) == pytest.approx(math.log2(math.comb(1000, 3)))
    assert sparse.information_limit(10, 3) == pytest.approx(math.log2(120))


def test_the_constructed_head():
    """Scores R on the support, 0 elsewhere: the mass off it is (T - s) / (T - s + s e^R) exactly (softmax of
    the scores), R* = log((T - s)(1 - eps) / (s eps)) gives mass eps, R* is linear in log T (slope 1 for
    T >> s), and at T = 10^4 the head with R* reads the AND of its support exactly on fresh samples while one
    with R* / 4 does not."""
    T, s, eps = 10_000, 3, 0.01
    for R in (0.0, 1.5, 7.0):
        scores = jnp.zeros(T).at[:s].set(R)
        off = float(jnp.sum(jax.nn.softmax(scores)[s:]))
        assert off == pytest.approx(sparse.constructed_mass_off_support(T, s, R), rel=1e-12)
    R_star = sparse.required_score(T, s, eps)
    assert sparse.constructed_mass_off_support(T, s, R_star) == pytest.approx(eps, rel=1e-12)
    logs = np.log([1e2, 1e3, 1e4, 1e5])
    slope = np.polyfit(logs, [sparse.required_score(round(np.exp(t)), s, eps) for t in logs], 1)[0]
    assert slope == pytest.approx(1.0, abs=0.01)  # log(T - s): 1.004 over T = 10^2 .. 10^5
    target = SparseTarget(T, s)
    support, table = target.draw_support(5)
    x = sparse.sample_bits(target, 6, 4000)
    y = np.asarray(sparse.evaluate_target(x, support, table))
    for R, accuracy in ((R_star, 1.0), (R_star / 4, None)):
        read = np.asarray(sparse.constructed_head_predict(x, support, R))
        if accuracy is None:
            assert (read == y).mean() < 0.9
        else:
            assert (read == y).mean() == accuracy


@functools.partial(jax.jit, static_argnums=1)
def _lipschitz_pairs(key, T):
    """500 random pairs (a, b) at each scale 1e-3, 1 and 30: both sides of the lemma, (scales, 500) each."""

    def at(scale, key):
        k1, k2 = jax.random.split(key)
        a = scale * jax.random.normal(k1, (500, T))
        return sparse.softmax_lipschitz_gap(a, a + scale * jax.random.uniform(k2, (500, T), minval=-1, maxval=1))

    return jax.vmap(at)(jnp.array([1e-3, 1.0, 30.0]), jax.random.split(key, 3))


def test_the_softmax_lipschitz_lemma():
    """||softmax(a) - softmax(b)||_1 <= 2 ||a - b||_inf for random pairs at T from 2 to 4096, scaled from
    1e-3 to 30 (and close to equality for a single large coordinate shift)."""
    for T in (2, 17, 4096):
        left, right = _lipschitz_pairs(jax.random.fold_in(jax.random.key(0), T), T)
        assert bool(jnp.all(left <= right * (1 + 1e-12)))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"SparseTarget\.s must be at most T"):
        SparseTarget(3, 4)
    with pytest.raises(ValueError, match=r"SparseTarget\.function must be one of"):
        SparseTarget(10, 3, "xor")
    with pytest.raises(ValueError, match=r"SparseTarget\.p must be a number in \(0, 1\)"):
        SparseTarget(10, 3, p=1.0)
    with pytest.raises(ValueError, match="enumerates"):
        target = SparseTarget(5000, 3, "parity")
        support, table = target.draw_support(0)
        sparse.identifies(target, np.zeros((2, 5000), bool), np.zeros(2, bool), support, table)


def _data(target, support, table, key, m, n_validation=2000):
    """m raw samples (not redrawn) and fresh validation samples of one target, as float arrays."""
    key_train, key_validation = jax.random.split(jax.random.key(key))
    x, x_val = sparse.sample_bits(target, key_train, m), sparse.sample_bits(target, key_validation, n_validation)
    y, y_val = sparse.evaluate_target(x, support, table), sparse.evaluate_target(x_val, support, table)
    return [np.asarray(a, float) for a in (x, y, x_val, y_val)]


def _padded(target, supports, sizes, key, n_validation=1000):
    """Raw training sets (not redrawn) of the given sizes, padded to the largest, with fresh validation samples."""
    width = max(sizes)
    x, y, mask = np.zeros((len(sizes), width, target.T)), np.zeros((len(sizes), width)), np.zeros((len(sizes), width))
    x_val, y_val = [], []
    for i, (m, (support, table)) in enumerate(zip(sizes, supports, strict=True)):
        rows = _data(target, support, table, key + i, m, n_validation)
        x[i, :m], y[i, :m], mask[i, :m] = rows[0], rows[1], 1.0
        x_val.append(rows[2])
        y_val.append(rows[3])
    return x, y, mask, np.stack([np.asarray(s) for s, _ in supports]), np.stack(x_val), np.stack(y_val)


#: The head's runs below all train for 1000 Adam steps logged every 20 (as `flowsim sparse sweep --budgets 1000` logs
#: them), on training sets padded to 8 log2 C(T, 3) samples with 2000 validation samples each, at T = 16 or 32, in
#: groups of 4 models or a search's rounds of 16 (4 seeds x 4 sizes): three compiled programs serve every one of them
#: (the command's included).
HEAD = {"seeds": 4, "log_every": 20}


def test_a_trained_head_learns_at_a_generous_m_and_fails_below_the_information_limit():
    """T = 32, 3-AND, full-batch Adam (1000 steps of 0.01), two supports: with m = 104 samples (8 log2 C(32, 3), the
    largest size of a search at T = 32) the head reaches validation accuracy >= 0.99 with most of its attention on
    the support (mass >= 0.5, measured 0.98 and 0.95); with m = 10 < log2 C(32, 3) = 12.3 samples (which cannot
    identify the support) it does not, and its attention mass on the support stays below. The four models are one
    group of a search's shapes at T = 32 (its compiled program)."""
    target = SparseTarget(32, 3)
    supports = [target.draw_support(11), target.draw_support(12)]
    data = _padded(target, supports * 2, [104, 104, 10, 10], 1, n_validation=2000)
    run = sparse.train("head", 1, *data, steps=1000, log_every=20, group=4)
    assert run.loss.shape == run.mass.shape == (4, 51)
    for generous, starved in ((0, 2), (1, 3)):
        assert run.validation_accuracy[generous] >= sparse.SUCCESS_ACCURACY and run.mass[generous, -1] >= 0.5
        assert run.mass[generous, -1] > run.mass[generous, 0]  # the attention moved onto the support during training
        assert run.validation_accuracy[starved] < sparse.SUCCESS_ACCURACY
        assert run.mass[starved, -1] < run.mass[generous, -1]
        assert run.train_accuracy[starved] == 1.0  # it fits its 10 samples all the same


def test_the_reduced_sweep_lies_above_the_erm_limit():
    """The critical sample size of the head at T = 16 and 32 (4 seeds, 2 rounds of 4 sizes, 1000 Adam steps): at or
    above the median ERM identifiability at each T, non-decreasing in T, and inside its bootstrap interval.
    Measured: m* = 20 (ERM 17.5) and 31 (ERM 20)."""
    found = {}
    for T in (16, 32):
        target = SparseTarget(T, 3)
        result = sparse.critical_sample_size(target, 0, candidates=4, rounds=2, budget=1000, **HEAD)
        erm = np.median(sparse.erm_identifiability(target, 1, trials=100))
        assert result.critical >= erm, (T, result.critical, erm)
        assert result.interval[0] <= result.critical <= result.interval[1]
        assert result.success.shape == (len(result.m), 4) and result.mass.shape == (len(result.m), 4, 51)
        assert result.budget == "1000" and (result.steps_run == 1000).all()
        found[T] = result.critical
    assert found[16] <= found[32]


def test_the_fits_recover_their_law_and_the_selection_names_it():
    """Weighted fits with sigma = 1: on m = 5 + 4.3 ln T the log fit is exact (R^2 = 1, a and b recovered to
    1e-8) and AIC names it; on m = 2 T^0.5 the power fit is exact and named; on a constant it is the
    constant (1 parameter) that AIC names, not a 2-parameter law that fits as well. With noise of sigma = 2 on
    the log law, the 95 % interval of b covers 4.3 and the log law stays within 2 of the least AIC."""
    T = np.array([16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    sigma = np.ones(len(T))
    fits = sparse.fit_scaling(T, 5 + 4.3 * np.log(T), sigma)
    assert fits["log"].r2 == pytest.approx(1.0, abs=1e-12) and fits["log"].b == pytest.approx(4.3, abs=1e-8)
    assert fits["linear"].r2 < 0.9 and np.abs(fits["log"].residuals).max() < 1e-8
    assert sparse.verdict(fits) == "log"
    fits = sparse.fit_scaling(T, 2 * np.sqrt(T), sigma)
    assert (fits["power"].a, fits["power"].b, fits["power"].r2) == pytest.approx((2.0, 0.5, 1.0), abs=1e-8)
    assert sparse.verdict(fits) == "power"
    assert sparse.verdict(sparse.fit_scaling(T, np.full(len(T), 40.0), sigma)) == "constant"
    noisy = 5 + 4.3 * np.log(T) + 2.0 * np.random.default_rng(0).standard_normal(len(T))
    fits = sparse.fit_scaling(T, noisy, 2 * sigma)
    assert fits["log"].b_interval[0] < 4.3 < fits["log"].b_interval[1]
    assert fits["log"].aic - min(f.aic for f in fits.values()) < 2
    with pytest.raises(ValueError, match="at least 3 finite values"):
        sparse.fit_scaling(T[:3], [1.0, np.inf, 3.0])
    with pytest.raises(ValueError, match="sigma must hold one positive number per m"):
        sparse.fit_scaling(T[:3], [1.0, 2.0, 3.0], [1.0, 0.0, 1.0])


def test_a_fit_whose_intercept_converges_to_zero_has_the_closed_form_covariance():
    """m* = log2 T, as a tiny sweep's l1 control gives at s = 1: the log law fits it exactly with a = 0. The intervals
    are those of weighted linear least squares in closed form, (J^T W J)^-1 with W = 1 / sigma^2 (the sigmas
    known), to 1e-9, and no warning; a finite difference in a = 1e-15 had left the covariance infinite."""
    T, sigma = np.array([16.0, 64.0, 256.0]), np.array([0.5, 0.4, 0.6])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = sparse.fit_scaling(T, np.log2(T), sigma)["log"]
    J = np.stack([np.ones_like(T), np.log(T)], axis=-1)
    half = 1.96 * np.sqrt(np.diag(np.linalg.inv(J.T @ (J / sigma[:, None] ** 2))))
    assert (fit.a, fit.b) == pytest.approx((0.0, 1 / np.log(2)), abs=1e-9)
    assert np.array([fit.a_interval, fit.b_interval]) == pytest.approx(
        np.array([[-1, 1], [-1, 1]]) * half[:, None] + [[fit.a], [fit.b]], abs=1e-9
    )


def test_the_sweep_command(tmp_path):
    """`flowsim sparse sweep`, tiny: the control and the head at two T, the MLP at one, 4 seeds, one round of 4 sizes,
    1000 steps (the head's compiled programs of the tests above: a round of 16 runs in one program at T = 16 and 32);
    its tables and figure are written, and a run resumed in the same folder reads every unit back."""
    from flowsim.cli import main

    arguments = (
        "sparse sweep --Ts 16,32 --mlp-Ts 16 --mlp-span 2 --learners l1 head mlp --budgets 1000 --seeds 4 "
        "--candidates 4 --rounds 1 --erm-trials 10 --repeats 1"
    )
    assert main([*arguments.split(), "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "critical.csv").read_text().splitlines()
    assert table[0].startswith("learner,budget,T,critical_m") and len(table) == 6
    rows = [row.split(",")[:3] for row in table[1:]]
    assert rows == [["l1", "converged", "16"], ["l1", "converged", "32"], ["head", "1000", "16"],
                    ["head", "1000", "32"], ["mlp", "1000", "16"]]  # fmt: skip
    assert (tmp_path / "out" / "sweep.png").stat().st_size > 1000
    assert main([*arguments.split(), "--out", str(tmp_path / "out"), "--resume"]) == 0
    assert (tmp_path / "out" / "critical.csv").read_text().splitlines() == table
    # The run's units read back as one sweep (as a sweep extended by a later run would be): the same m*.
    read = sparse.read_sweep(tmp_path / "out")
    assert sorted(read.results) == [("head", "1000"), ("l1", "converged"), ("mlp", "1000")]
    assert read.Ts.tolist() == [16, 32] and (read.erm > 0).all()
    expected = [float(row.split(",")[3]) for row in table[1:]]
    assert sorted(sparse.sweep_table(read)["critical_m"].tolist()) == sorted(expected)
    with pytest.raises(ValueError, match="holds no run of flowsim sparse sweep"):
        sparse.read_sweep(tmp_path)


def _direct_head(model, x):
    """The head's logit computed token by token: embeddings e_l = b[x_l] + P_l, scores <W_K e_l, q> / sqrt(width),
    their softmax, the attended embedding and the read-out of its value."""
    embeddings = model.bits[x.astype(int)] + model.positions
    weights = jax.nn.softmax(embeddings @ model.keys.T @ model.query / math.sqrt(len(model.query)))
    return model.readout(model.values @ (weights @ embeddings))


@eqx.filter_jit
def _head_batched_and_direct(model, x):
    return model.logits(x), jax.vmap(_direct_head, (None, 0))(model, x)


def test_the_heads_bit_linear_sums_equal_its_softmax():
    """The head's batched logits (sums over the tokens as matrix products with the bits) equal the token-by-token
    softmax to 1e-10 in float64, with the positional scores spread over about 30 nats and the bit's score
    delta = (b_1 - b_0) . u set to -40, -3, 0, 3 and 40 (measured: 1e-15 at most). On the input of all ones at
    delta = -40, a form that subtracts the ones' sum from the total (sum_l w_l + (e^delta - 1) x @ w) loses every
    digit of the normaliser and is off by 0.28; this one has no cancellation."""
    T = 37
    model = sparse.AttentionHead(T, key=jax.random.key(3))
    model = eqx.tree_at(lambda h: h.positions, model, 30.0 * model.positions)  # scores spread over ~30 nats
    u = model.keys.T @ model.query / math.sqrt(len(model.query))
    x = jnp.asarray(np.random.default_rng(0).random((64, T)) < 0.79, float)
    x = x.at[:2].set(jnp.array([[0.0], [1.0]]))  # all zeros, all ones: at delta = -40 the ones weigh e^-40
    difference = model.bits[1] - model.bits[0]
    for delta in (-40.0, -3.0, 0.0, 3.0, 40.0):
        bit_1 = model.bits[1] + (delta - difference @ u) * u / (u @ u)  # (b_1 - b_0) . u = delta
        shifted = eqx.tree_at(lambda h: h.bits, model, model.bits.at[1].set(bit_1))
        batched, direct = _head_batched_and_direct(shifted, x)
        assert float(jnp.max(jnp.abs(batched - direct))) < 1e-10 and float(jnp.std(direct)) > 1e-3, delta


def _full_transformer(model, x):
    """The same one-layer Transformer computed in full: every token through the layer, every row of every
    head's attention (T + 1 by T + 1), and the [CLS] token's output read out at the end."""
    tokens = jnp.concatenate([model.cls[None], model.bits[x.astype(int)] + model.positions])
    h = jax.vmap(model.norm_attention)(tokens)
    q, k, v = (jax.vmap(w)(h).reshape(len(h), model.heads, -1) for w in (model.w_query, model.w_key, model.w_value))
    weights = jax.nn.softmax(jnp.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.shape[-1]), axis=-1)
    z = tokens + jax.vmap(model.w_output)(jnp.einsum("hij,jhd->ihd", weights, v).reshape(len(h), -1))
    z = z + jax.vmap(lambda t: model.mlp_out(jax.nn.gelu(model.mlp_in(model.norm_mlp(t)))))(z)
    return jax.vmap(lambda t: model.readout(model.norm_final(t))[0])(z)[0]


def _random_transformer(T):
    """A Transformer at T with its weights moved off their initialisation: the initialisation's law (weights and
    embeddings N(0, 0.02^2), biases 0, layer norms the identity) plus N(0, 0.3^2) on every parameter, drawn with
    NumPy (compiled random draws would cost more than the check)."""
    rng = np.random.default_rng(T)

    def draw(path, leaf):
        name = jax.tree_util.keystr(path)
        start = (1.0 if name.endswith(".weight") else 0.0) if "norm" in name or name.endswith(".bias") else None
        base = rng.normal(0.0, 0.02, leaf.shape) if start is None else np.full(leaf.shape, start)
        return jnp.asarray(base + rng.normal(0.0, 0.3, leaf.shape))

    shapes = eqx.filter_eval_shape(sparse.OneLayerTransformer, T, key=jax.random.key(0))
    return jax.tree_util.tree_map_with_path(draw, shapes), jnp.asarray(rng.random((50, T)) < 0.5, float)


@eqx.filter_jit
def _cls_row_and_full_layer(model, x):
    """The [CLS] output, the full layer's, and each head's attention on the T tokens summed, on each input."""
    return jax.vmap(model)(x), jax.vmap(_full_transformer, (None, 0))(model, x), jax.vmap(model.attention)(x).sum(-1)


def test_the_cls_row_equals_the_full_transformer():
    """The [CLS] output computed from the 2T shared keys and values equals the full layer's on random inputs to
    1e-10 in float64 (measured: 4e-15), with weights moved off their small initialisation (N(0, 0.3^2) added)
    so that every part of the layer matters; and each head's attention on the T tokens is a share of 1 (the rest on
    [CLS] itself)."""
    for T in (5, 37):
        fast, full, on_tokens = _cls_row_and_full_layer(*_random_transformer(T))
        assert float(jnp.max(jnp.abs(fast - full))) < 1e-10 and float(jnp.std(full)) > 0.1
        assert bool(jnp.all((on_tokens > 0) & (on_tokens <= 1 + 1e-12)))  # the rest is [CLS]'s weight on itself
    with pytest.raises(ValueError, match="heads = 5 must divide width = 64"):
        sparse.OneLayerTransformer(8, heads=5, key=jax.random.key(0))


def test_the_logged_mass_and_gap_equal_the_token_by_token_attention():
    """What training logs (the mean attention mass on the support and the mean score gap, in the Transformer's best
    head), computed from the shared token scores without forming any (samples, heads, T) attention, equals the same
    statistics of the token-by-token softmax to 1e-12 (measured: 3e-17), for the head with its positional scores
    spread over about 300 nats and for the Transformer off its initialisation, with a partly masked training set."""
    from flowsim.tasks.sparse._train import _diagnostics

    def direct(model, x, mask, support):
        on = jnp.zeros(x.shape[-1], bool).at[support].set(True)
        if isinstance(model, sparse.AttentionHead):
            scores, attention = model.scores(x)[:, None], model.attention(x)[:, None]
        else:
            scores, attention = jax.vmap(lambda x: model.scores(x)[1])(x), jax.vmap(model.attention)(x)
        weight = mask / jnp.sum(mask)
        mass = weight @ jnp.sum(attention * on, axis=-1)
        lowest = jnp.min(jnp.where(on, scores, jnp.inf), axis=-1)
        gap = weight @ (lowest - jnp.max(jnp.where(on, -jnp.inf, scores), axis=-1))
        return mass[jnp.argmax(mass)], gap[jnp.argmax(mass)]

    both = eqx.filter_jit(lambda *arguments: (_diagnostics(*arguments), direct(*arguments)))  # one compile per model
    head = sparse.AttentionHead(37, key=jax.random.key(5))
    head = eqx.tree_at(lambda h: h.positions, head, 300.0 * head.positions)
    transformer, x = _random_transformer(37)
    mask = (jnp.arange(len(x)) < 41).astype(float)
    for model in (head, transformer):
        for support in (jnp.array([0, 17, 36]), jnp.array([3, 4, 5])):
            logged, expected = both(model, x, mask, support)
            np.testing.assert_allclose(np.array(logged), np.array(expected), rtol=1e-12, atol=1e-12)


def test_ctrl_c_stops_a_training_within_one_call_of_its_steps(monkeypatch):
    """A group's training runs in compiled calls of at most `CHECK_STEPS` (100) steps, and Python raises a Ctrl-C
    between two: a KeyboardInterrupt raised by a signal handler 0.2 s after the first call (a SIGALRM timer, as the
    command line's SIGINT handler does for Ctrl-C) ends a 40 000-step training (400 calls) after at most a few more,
    within 1 s, instead of at its end. (A converged group of 120 runs on a GPU used to ignore SIGINT for over 30 s.)"""
    import signal
    import time

    from flowsim.tasks.sparse import _train as training

    target = SparseTarget(16, 3)
    data = _padded(target, [target.draw_support(1)], [40], 0, n_validation=100)
    calls, fired = [], []
    compiled = training._train

    def counted(*arguments):
        out = compiled(*arguments)
        calls.append(time.perf_counter())
        if len(calls) == 1:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
        return out

    def interrupt(signum, frame):
        fired.append(time.perf_counter())
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "_train", counted)
    previous = signal.signal(signal.SIGALRM, interrupt)
    # No garbage collection meanwhile: a KeyboardInterrupt raised inside a collector's callback (JAX registers one)
    # is dropped by Python, and the command line's `ctrl_c_kept` (tests/test_runs.py), not this test, handles that.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            sparse.train("head", 0, *data, steps=40_000, log_every=20)
    finally:
        if collecting:
            gc.enable()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert training.CHECK_STEPS == 100 and 1 < len(calls) < 400 and time.perf_counter() - fired[0] < 1.0, len(calls)


@pytest.mark.parametrize("gpu", [False, True])
def test_the_sweeps_estimate_knows_the_backend(monkeypatch, gpu):
    """The estimate before work of the GPU run of docs/science.md (the Transformer at T = 4096, 20 seeds, 1000 steps):
    on a GPU about the 89 s measured on the H200 (between 60 and 120 s), with the round's device memory (120 runs x
    (272 + 2000 samples) x 4096 tokens as float64, twice: 17.9 GB); on the CPU the 2-core machine's hours."""
    from flowsim.cli import _parser
    from flowsim.tasks.sparse import _estimates, _train

    monkeypatch.setattr(_train, "on_accelerator", lambda: gpu)
    options = "--learners transformer --transformer-Ts 4096 --seeds 20 --budgets 1000 --erm-trials 1 --repeats 1"
    needs, costs = _estimates.sweep(_parser().parse_args(["sparse", "sweep", *options.split()]))
    seconds = sum(cost.seconds for cost in costs if "transformer" in cost.what)
    on_device = [need.nbytes for need in needs if "on the GPU" in need.what]
    if gpu:
        assert 60 < seconds < 120 and on_device == [2 * 120 * (272 + 2000) * 4096 * 8], (seconds, on_device)
    else:
        assert seconds > 3600 and not on_device, seconds


def test_the_transformer_learns_the_and_at_t32():
    """The paper's learner (width 64, 16 heads, AdamW 1e-3) at T = 32 with m = 128 samples (about 10 times the
    information limit of 12.3), 600 full-batch steps: validation accuracy >= 0.99 on 1000 fresh samples, and
    its best head puts most of its [CLS] attention on the support (mass >= 0.5; uniform: 3/32). Most of its time
    is compiling (AdamW, 16 heads)."""
    target = SparseTarget(32, 3)
    data = _padded(target, [target.draw_support(11)], [128], 0)
    run = sparse.train("transformer", 0, *data, steps=600, log_every=300)
    assert run.validation_accuracy[0] >= sparse.SUCCESS_ACCURACY
    assert run.mass[0, 0] < 0.2 and run.mass[0, -1] >= 0.5
    assert run.steps_run[0] == 600  # a fixed budget runs to its end, converged or not


def test_the_l1_control_identifies_the_support_from_order_s_log_t_samples():
    """The positive control at T = 1024: from m = 80 samples (3.8 s ln T; ERM's median is about 33) its three
    largest weights are the support in 4 runs of 4 (measured 10 of 10 at m = 80, and 9 of 10 at m = 60), with
    the penalty of its rule lambda = 0.01 sqrt(ln T / m) and the solver converged."""
    target = SparseTarget(1024, 3)
    for seed in range(4):
        support, table = target.draw_support(seed)
        x = sparse.sample_bits(target, 100 + seed, 80)
        fit = sparse.fit_l1(np.asarray(x), np.asarray(sparse.evaluate_target(x, support, table)))
        np.testing.assert_array_equal(np.sort(np.argsort(-np.abs(fit.weights))[:3]), np.asarray(support))
        assert fit.converged and fit.lam == pytest.approx(0.01 * math.sqrt(math.log(1024) / 80))


def test_the_search_doubles_its_range_upward_until_a_size_succeeds():
    """The l1 control at T = 64 with a span of 1.5 (sizes 16 ... 24, far below its m* of about 76): no size reaches a
    success rate of 1/2 in the first round, so the next rounds search (24, 48] and (48, 96], and m* is found (finite,
    above 48) instead of being reported as "> 24"."""
    result = sparse.critical_sample_size(
        SparseTarget(64, 3), 0, learner="l1", seeds=4, span=1.5, candidates=2, rounds=3
    )
    rates = sparse.success_rates(result.success)
    assert result.m.max() == 96 and (rates[result.m <= 24] < 0.5).all()
    assert 48 < result.critical <= 96 and rates[result.m == result.critical][0] >= 0.5


def test_the_reduced_sweep_with_its_budget_axis(caplog):
    """`sweep` with the control at T = 16 and 24 and the head at T = 16 (one compiled program, a round of 16 runs as in
    the tests above, shared by both budgets since the cap equals the fixed budget), budgets of 1000 steps
    and "converged" (capped at 1000 steps), 4 seeds, one round of 4 sizes, through a dict-backed unit store: one
    unit per (learner, budget, T) and per T for ERM; every run reports its steps and whether it converged (the
    converged budget stops a run at or before the cap, at a logged step; the fixed one runs exactly 1000); a second
    sweep through the same store computes nothing and returns the same m*."""
    store = {}

    def unit(name, compute):
        if name not in store:
            store[name] = compute()
        return store[name]

    options = HEAD | {"candidates": 4, "rounds": 1, "max_steps": 1000, "erm_trials": 10}
    options |= {"learners": ("l1", "head"), "budgets": (1000, "converged"), "learner_Ts": {"head": (16,)}}
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        result = sparse.sweep(0, (16, 24), unit=unit, **options)
    compiled = [r for r in caplog.records if "Finished XLA compilation of jit(_train)" in r.getMessage()]
    assert len(compiled) <= 1  # none if an earlier test compiled it; 2 if the budgets did not share it
    assert sorted(store) == [
        "erm-T16", "erm-T24", "head-1000-T16", "head-converged-T16", "l1-converged-T16", "l1-converged-T24",
    ]  # fmt: skip
    assert sorted(result.results) == [("head", "1000"), ("head", "converged"), ("l1", "converged")]
    for r in result.results[("head", "1000")]:
        assert (r.steps_run == 1000).all() and r.converged.dtype == bool
    for r in result.results[("head", "converged")]:
        assert ((r.steps_run <= 1000) & (r.steps_run % 20 == 0)).all()
        assert (r.converged | (r.steps_run == 1000)).all()  # stopped by the criterion, or by the cap
    again = sparse.sweep(0, (16, 24), unit=unit, **options)
    assert (
        len(store) == 6
        and sparse.sweep_table(again)["critical_m"].tolist() == sparse.sweep_table(result)["critical_m"].tolist()
    )
    table = sparse.paper_table(result)
    assert table["T"].tolist() == [100, *range(150, 801, 50), 900, 1000, 1100] and np.isnan(table["paper_low"][0])


def test_the_logging_interval_divides_every_budget_the_cap_and_the_patience():
    """`flowsim sparse sweep --budgets converged` alone once logged every 320 steps, which does not divide the
    convergence criterion's patience of 1000 steps, and failed after the ERM limits were computed."""
    from flowsim.tasks.sparse.cli import _log_every

    for budgets, cap in (((1000, "converged"), 16000), (("converged",), 16000), (("converged",), 3000), ((1000,), 700)):
        every = _log_every(budgets, cap)
        divided = [b for b in budgets if b != "converged"] + [cap] + ([1000] if "converged" in budgets else [])
        assert all(n % every == 0 for n in divided), (budgets, cap, every)


def test_bad_training_budgets_are_refused():
    target = SparseTarget(16, 3)
    with pytest.raises(ValueError, match="budget must be a number of steps >= 1 or 'converged'"):
        sparse.critical_sample_size(target, 0, budget="forever")
    with pytest.raises(ValueError, match="budget="):
        sparse.critical_sample_size(target, 0, steps=100)
    with pytest.raises(ValueError, match="budgets must hold numbers of steps >= 1 or 'converged'"):
        sparse.sweep(0, (16,), budgets=(0,))
    with pytest.raises(
        ValueError, match=r"options of the head learner are \['hidden', 'lr', 'weight_decay', 'width'\]"
    ):
        sparse.train("head", 0, np.zeros((1, 2, 4)), np.zeros((1, 2)), np.ones((1, 2)), np.zeros((1, 1), int),
                     np.zeros((1, 2, 4)), np.zeros((1, 2)), heads=4)  # fmt: skip
