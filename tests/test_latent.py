"""Attention as latent-posterior inference (docs/science.md section 9): the generated closed forms against
Monte Carlo and direct computation, the estimators against independent routes, and the experiments."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.stats

from flowsim.tasks import latent

#: The tilted-Gaussian example of section 9: L E||attn_a - lim||^2 -> e^{0.9}(2.25 + 0.7475) = 7.3727.
SIGMA = np.diag([1.0, 0.5, 0.5, 0.25])
A = np.array([0.8, -0.5, 0.3, 0.6])


def _table(path) -> list[dict]:
    """A CSV table written by a command: one dict per row, numbers as floats (written by repr: exact)."""
    header, *rows = path.read_text().splitlines()
    return [dict(zip(header.split(","), map(float, row.split(",")), strict=True)) for row in rows]


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    """The four commands, run once at the settings the tests below read from their tables (each test names what it
    reads): `latent error` at |a| = 0 and |A| (the example's a) over L = 64 and 4096 with 2500 sequences, its
    softmax-against-kernel comparison at L = 64; `latent risk` at |a| = 0 and 0.5, L = 4096, 2500 sequences;
    `latent mixture` at L = 64 with one and two heads (2000 sequences to fit, 2000 held out); `latent learn` at
    L = 64 and 256, n = 1000, 100 steps, 3 seeds. Returns the folder holding their folders."""
    from flowsim.cli import main

    out = tmp_path_factory.mktemp("latent")
    runs = {
        "error": f"--Ls 64,4096 --replicates 2500 --norms 0,{float(np.linalg.norm(A))!r} --kernel-max-L 64 "
        "--kernel-replicates 100",
        "risk": "--Ls 4096 --replicates 2500 --norms 0,0.5",
        "mixture": "--Ls 64 --heads 1,2 --n-train 2000 --n-test 2000",
        "learn": "--Ls 64,256 --ns 1000 --steps 100 --seeds 3",
    }
    for command, arguments in runs.items():
        assert main(["latent", command, *arguments.split(), "--out", str(out / command)]) == 0
    return out


def test_the_error_constant_of_the_example(commands):
    """7.37 from the generated constant (by hand: e^{0.9} (2.25 + 0.7475)), and by Monte Carlo (`latent error`'s
    table): at L = 4096, 2500 sequences give L MSE within 4 standard errors of it (20 000 sequences:
    7.28 +- 0.05, benchmarks/latent_limits.py; the finite-L terms are O(1/L) relative), approached from below (at
    L = 64: 6.5); at a = 0 the limit is tr Sigma = 2.25, within 4 standard errors too."""
    model = latent.TiltedGaussian(SIGMA)
    constant = float(model.error_constant(jnp.asarray(A)))
    assert constant == pytest.approx(math.exp(0.9) * (2.25 + 0.7475), rel=1e-12)
    assert round(constant, 2) == 7.37
    rows = {(row["a_norm"] > 0, row["L"]): row for row in _table(commands / "error" / "attention_error.csv")}
    small, large, uniform = rows[True, 64], rows[True, 4096], rows[False, 4096]
    assert large["predicted_limit"] == pytest.approx(constant, rel=1e-12)
    assert abs(large["scaled_mse"] - constant) < 4 * large["stderr"]
    assert small["scaled_mse"] < large["scaled_mse"]
    assert uniform["predicted_limit"] == pytest.approx(2.25, rel=1e-12)
    assert abs(uniform["scaled_mse"] - 2.25) < 4 * uniform["stderr"]


def test_the_error_constant_at_random_parameters():
    """For random Sigma, B, c, location and a (a^T Sigma a <= 0.4, so that L = 4096 is deep in the 1/L regime):
    L E||attn_a - B(mu + Sigma a) - c||^2 within 4 standard errors of e^q (t + r) (4000 sequences)."""
    rng = np.random.default_rng(3)
    for d, d_v in ((2, 3), (3, 1)):
        root = rng.normal(size=(d, d))
        Sigma = root @ root.T / d + 0.2 * np.eye(d)
        a = rng.normal(size=d)
        a *= math.sqrt(0.4 / (a @ Sigma @ a)) * rng.uniform(0.3, 1.0)
        model = latent.TiltedGaussian(Sigma, rng.normal(size=(d_v, d)), rng.normal(size=d_v))
        result = latent.attention_error(d, model, rng.normal(size=d), a, [4096], replicates=4000)
        assert abs(result.scaled_mse[0, 0] - result.predicted[0]) < 4 * result.stderr[0, 0], (d, result)


def test_attention_tends_to_the_tilted_mean():
    """The mean of attn_a over 1000 sequences at L = 4096 is B(mu + Sigma a) + c within 4 standard errors in every
    coordinate (the bias is O(1/L): about 1e-3 here, below the standard error of ~ 3e-3)."""
    model = latent.TiltedGaussian(SIGMA, np.array([[1.0, 2.0, 0.0, -1.0]]), np.array([0.5]))
    location = np.array([0.3, -1.0, 2.0, 0.0])
    keys, values = model.sample(7, location, 4096, 1000)
    attended = np.asarray(latent.softmax_attention(jnp.asarray(A), keys, values))
    limit = np.asarray(model.attention_limit(location, jnp.asarray(A)))
    se = attended.std(0, ddof=1) / math.sqrt(len(attended))
    assert np.all(np.abs(attended.mean(0) - limit) < 4 * se)
    np.testing.assert_allclose(limit, [1.0 * (0.3 + 0.8) + 2.0 * (-1.0 - 0.25) - (0.0 + 0.15) + 0.5])


def test_the_posterior_mean_and_the_bayes_risk():
    """The posterior mean against direct numerical integration (scipy.integrate.quad of z p(z) prod_l p(k_l | z)),
    and the Bayes risk d sigma^2 tau^2 / (sigma^2 + L tau^2) against Monte Carlo of the posterior mean's risk
    (4 standard errors), at two parameter sets."""
    for d, tau, sigma, L in ((3, 0.7, 1.3, 5), (2, 2.0, 0.5, 40)):
        model = latent.ConjugateLocation(d, tau, sigma)
        z, keys = model.sample(d, L, 20_000)
        posterior = np.asarray(model.posterior_mean(keys))
        k = np.asarray(keys[0, :, 0])

        def density(x, k=k, tau=tau, sigma=sigma):
            return scipy.stats.norm.pdf(x, 0, tau) * np.prod(scipy.stats.norm.pdf(k, x, sigma))

        lo, hi = k.mean() - 10 * sigma, k.mean() + 10 * sigma
        numerator = scipy.integrate.quad(lambda x, density=density: x * density(x), lo, hi, epsabs=0, epsrel=1e-12)
        normaliser = scipy.integrate.quad(density, lo, hi, epsabs=0, epsrel=1e-12)
        assert posterior[0, 0] == pytest.approx(numerator[0] / normaliser[0], rel=1e-9)
        errors = np.sum((posterior - np.asarray(z)) ** 2, -1)
        bayes = float(model.bayes_risk(L))
        assert bayes == pytest.approx(d * sigma**2 * tau**2 / (sigma**2 + L * tau**2), rel=1e-14)
        assert abs(errors.mean() - bayes) < 4 * errors.std(ddof=1) / math.sqrt(len(errors))


def test_the_risk_ratio_of_the_example(commands):
    """d = 4, sigma = tau = 1, |a| = 0.5: attention's risk over the Bayes risk tends to e^{0.25}(1 + 0.25 / 4) =
    1.364; at L = 4096 (`latent risk`'s table, 2500 sequences) the measured ratio is within 4 standard errors of it,
    uniform attention (a = 0) is within 4 standard errors of Bayes (ratio 1), and so is the posterior mean's risk
    (its squared errors are (Bayes risk / d) chi^2_d: a standard error of Bayes sqrt(2 / (d n)))."""
    model = latent.ConjugateLocation(4, 1.0, 1.0)
    limit = float(model.attention_ratio_limit(0.5))
    assert limit == pytest.approx(math.exp(0.25) * (1 + 0.25 / 4), rel=1e-14) and round(limit, 3) == 1.364
    uniform, tilted = sorted(_table(commands / "risk" / "location_risk.csv"), key=lambda row: row["a_norm"])
    bayes = float(model.bayes_risk(4096))
    for row, expected in ((uniform, 1.0), (tilted, limit)):
        assert row["L"] == 4096 and row["bayes_risk"] == pytest.approx(bayes, rel=1e-14)
        assert row["ratio_limit"] == pytest.approx(expected, rel=1e-14)
        assert abs(row["ratio_to_bayes"] - expected) < 4 * row["attention_stderr"] / bayes
    assert abs(uniform["posterior_mean_risk"] - bayes) < 4 * bayes * math.sqrt(2 / (4 * 2500))


def test_the_mixture_posterior_is_bayes_rule():
    """The discrete posterior sums to one and equals Bayes' rule computed directly with scipy.stats (products of
    multivariate normal densities times the prior), to 1e-10."""
    locations = np.array([[0.0, 0.0], [1.0, -0.5], [-0.5, 2.0]])
    model = latent.LocationMixture(locations, [0.2, 0.5, 0.3], sigma=1.5)
    component, keys = model.sample(4, 6, 50)
    posterior = np.asarray(model.posterior(keys))
    np.testing.assert_allclose(posterior.sum(-1), 1.0, rtol=0, atol=1e-14)
    for i in range(5):
        joint = [
            w * np.prod(scipy.stats.multivariate_normal(z, 1.5**2 * np.eye(2)).pdf(np.asarray(keys[i])))
            for z, w in zip(locations, model.weights, strict=True)
        ]
        np.testing.assert_allclose(posterior[i], np.array(joint) / np.sum(joint), rtol=1e-10)
    # A location-scale mixture: the same check with a scale per component.
    scaled = latent.LocationMixture(locations, [0.2, 0.5, 0.3], sigma=[0.7, 1.5, 1.1])
    _, keys = scaled.sample(6, 6, 50)  # the same shapes: the same compiled draws
    for i, row in enumerate(np.asarray(scaled.posterior(keys))[:5]):
        joint = [
            w * np.prod(scipy.stats.multivariate_normal(z, s**2 * np.eye(2)).pdf(np.asarray(keys[i])))
            for z, w, s in zip(locations, scaled.weights, [0.7, 1.5, 1.1], strict=True)
        ]
        np.testing.assert_allclose(row, np.array(joint) / np.sum(joint), rtol=1e-10)
    # With many tokens the posterior concentrates on the true component.
    component, keys = model.sample(5, 400, 50)
    assert np.mean(np.argmax(np.asarray(model.posterior(keys)), -1) == np.asarray(component)) == 1.0


def test_two_heads_see_what_the_mean_cannot(commands):
    """Two components at the origin with scales 1 and 1.6 and a third elsewhere: one head (uniform attention, the
    keys' mean) cannot separate the first two, a tilted second head can (its output minus the mean estimates
    scale^2 a). At L = 64 the read-out's total variation to the exact posterior is below a third of one
    head's with two heads, and one head's stays above a tenth of the prior's (measured: 0.34 with one head,
    0.04 with two, prior 0.67). The settings of `latent mixture` in `commands`: its compiled programs."""
    mixture = latent.LocationMixture(np.array([[0.0, 0.0], [0.0, 0.0], [1.5, 0.0]]), sigma=np.array([1.0, 1.6, 1.0]))
    result = latent.mixture_posterior(0, mixture, [64], [1, 2], n_train=2000, n_test=2000)
    one, two = result.tv[:, 0]
    assert two < one / 3 and one > result.prior_tv[0] / 10, (result.tv, result.prior_tv)
    np.testing.assert_array_equal(result.head_parameters[0], [0.0, 0.0])


def test_softmax_on_unit_norm_keys_is_nadaraya_watson():
    """On unit-norm keys, softmax attention with a = q / h^2 equals the Gaussian-kernel Nadaraya-Watson estimator
    with bandwidth h, to 1e-12 (random inputs drawn with NumPy)."""
    rng = np.random.default_rng(8)
    keys = rng.normal(size=(20, 50, 3))
    keys = keys / np.linalg.norm(keys, axis=-1, keepdims=True)
    values, query = rng.normal(size=(20, 50, 2)), rng.normal(size=(20, 3))
    for h in (0.3, 1.0, 3.0):
        attention = latent.softmax_attention(query / h**2, keys, values)
        np.testing.assert_allclose(attention, latent.nadaraya_watson(query, keys, values, h), rtol=0, atol=1e-12)


def test_nadaraya_watson_on_the_sphere_tends_to_the_langevin_shrinkage(commands):
    """Keys uniform on the unit sphere of R^3, v = Bk + c: softmax attention with a = q / h^2 tends to
    B q (coth(1/h^2) - h^2) + c (the mean of k under the weight e^{<q, k>/h^2} is q times the Langevin function
    of 1/h^2, by integrating over the angle to q). 2000 sequences of L = 4096 (drawn with NumPy), within 4 standard
    errors per coordinate (the bias is O(1/L)); `regression_error` measures the squared error against Bq + c,
    which falls with L (16 to 64, the comparison `latent error` runs in `commands`) for both estimators."""
    B, c, h = np.array([[1.0, -0.5, 0.25], [0.0, 2.0, 1.0]]), np.array([0.3, -0.2]), 0.5
    query = np.array([1.0, 1.0, 0.0]) / math.sqrt(2)
    rng = np.random.default_rng(11)
    keys = rng.normal(size=(2000, 4096, 3))
    keys /= np.linalg.norm(keys, axis=-1, keepdims=True)
    values = keys @ B.T + c + 0.5 * rng.normal(size=(2000, 4096, 2))
    attended = np.asarray(latent.softmax_attention(jnp.asarray(query / h**2), keys, values))
    limit = B @ query * (1 / math.tanh(1 / h**2) - h**2) + c
    se = attended.std(0, ddof=1) / math.sqrt(len(attended))
    assert np.all(np.abs(attended.mean(0) - limit) < 4 * se), (attended.mean(0), limit, se)
    result = latent.regression_error(1, B, c, 0.5, query, [16, 64], bandwidth=h, replicates=100)
    assert result.softmax[1] < result.softmax[0] and result.kernel[1] < result.kernel[0]
    bias = np.sum((limit - (B @ query + c)) ** 2)
    assert result.softmax[1] > bias  # Nadaraya-Watson keeps its smoothing bias at any L


def test_kernel_attention_is_kernel_ridge_regression():
    """V^T (G + L lam I)^{-1} k(K, q) against numpy's dense solve, and its limits: as lam grows it shrinks to 0
    like 1 / (L lam); multi-head attention stacks the heads' softmax attentions."""
    rng = np.random.default_rng(9)
    keys, values, query = rng.normal(size=(30, 2)), rng.normal(size=(30, 3)), rng.normal(size=2)
    h, ridge = 0.8, 1e-2
    gram = np.exp(-np.sum((keys[:, None] - keys[None]) ** 2, -1) / (2 * h**2))
    weights = np.exp(-np.sum((keys - query) ** 2, -1) / (2 * h**2))
    expected = values.T @ np.linalg.solve(gram + 30 * ridge * np.eye(30), weights)
    np.testing.assert_allclose(latent.kernel_attention(query, keys, values, h, ridge), expected, rtol=1e-10)
    large = np.asarray(latent.kernel_attention(query, keys, values, h, 1e6))
    np.testing.assert_allclose(large * 30 * 1e6, values.T @ weights, rtol=1e-4)
    heads = rng.normal(size=(4, 2))
    stacked = latent.multihead_attention(heads, keys, values)
    assert stacked.shape == (4, 3)
    np.testing.assert_allclose(stacked[2], latent.softmax_attention(heads[2], keys, values), rtol=1e-14)


def test_the_experiments_tables_figures_and_commands(commands):
    """The four commands (run by `commands`): their tables hold one row per (|a|, L), (heads, L) or (L, n), with the
    predicted columns, and their figures are drawn."""
    rows = (commands / "mixture" / "mixture_posterior.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0] == "heads,L,total_variation,stderr,prior_total_variation"
    rows = (commands / "learn" / "readout_learning.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0] == "L,n,train_risk,test_risk,deviation_from_flow,bayes_risk"
    # The Bayes risk from L keys: eps^2 + sigma^2 tau^2 / (sigma^2 + L tau^2) = 0.01 + 1 / (L + 1).
    for row, L in zip(rows[1:], (64, 256), strict=True):
        assert float(row.split(",")[-1]) == pytest.approx(0.01 + 1 / (L + 1), rel=1e-12)
    for command, name, count in (("error", "attention_error", 2 * 2), ("risk", "location_risk", 2 * 1)):
        rows = (commands / command / f"{name}.csv").read_text().splitlines()
        assert len(rows) == 1 + count and rows[0].startswith("a_norm,L,")
        assert (commands / command / f"{name}.png").stat().st_size > 1000
    assert len((commands / "error" / "regression_error.csv").read_text().splitlines()) == 2
    for command, name in (("mixture", "mixture_posterior"), ("learn", "readout_learning")):
        assert (commands / command / f"{name}.png").stat().st_size > 1000


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="Sigma must be symmetric positive definite"):
        latent.TiltedGaussian(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match=r"TiltedGaussian\.B must be a finite \(d_v, 2\) matrix"):
        latent.TiltedGaussian(np.eye(2), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"ConjugateLocation\.tau must be"):
        latent.ConjugateLocation(3, tau=0.0)
    with pytest.raises(ValueError, match=r"LocationMixture\.sigma must be a number > 0 or 2 of them"):
        latent.LocationMixture(np.zeros((2, 3)), sigma=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"LocationMixture\.weights must be 2 positive numbers"):
        latent.LocationMixture(np.zeros((2, 3)), [1.0, -1.0])
    with pytest.raises(ValueError, match=r"a must be finite attention parameters of shape \(A, 4\)"):
        latent.attention_error(0, latent.TiltedGaussian(SIGMA), np.zeros(4), np.ones(3), [8])
    with pytest.raises(ValueError, match="location must have shape"):
        latent.TiltedGaussian(SIGMA).sample(0, np.zeros(3), 4, 2)


def _readout_start(d, seed, a_scale=0.5):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=d)), jnp.asarray(a_scale * rng.normal(size=d)), jnp.zeros(d).at[0].set(1.0)


@jax.jit
def _readout_per_sequence(w, a, keys, labels):
    """Each sequence's squared loss, and the derivatives of the overlaps (with beta = e_1) along the negative gradient
    of its loss in R^d (the flow's direction), (n, 5). One program per d."""

    def loss(w, a, keys, label):
        return (latent.softmax_attention(a, keys, keys) @ w - label) ** 2

    beta = jnp.zeros(len(w)).at[0].set(1.0)
    g_w, g_a = jax.vmap(jax.grad(loss, (0, 1)), in_axes=(None, None, 0, 0))(w, a, keys, labels)
    g_w, g_a = -g_w, -g_a
    per_sequence = jnp.stack([2 * g_w @ w, g_w @ beta, g_w @ a + g_a @ w, 2 * g_a @ a, g_a @ beta], axis=-1)
    return jax.vmap(loss, in_axes=(None, None, 0, 0))(w, a, keys, labels), per_sequence


def test_the_readout_flow_is_the_gradient_of_the_monte_carlo_risk():
    """At two random (a, w) and parameters: the generated risk and flow on the overlaps against the empirical risk
    of 4000 sequences of L = 2048 tokens and the overlaps' derivatives from its autodiff gradient in R^d (per
    sequence, so that each has a standard error): within 4 standard errors (the O(1/L) bias of attention is
    below a tenth of one here). The sequences are the task's model (z ~ N(0, tau^2 I), keys z + sigma N(0, I),
    labels z_1 + eps N(0, 1)), drawn with NumPy."""
    for d, tau, sigma, eps, seed in ((3, 1.2, 0.8, 0.3, 0), (5, 0.7, 1.1, 0.0, 1)):
        task = latent.Readout(d, tau, sigma, eps)
        w, a, beta = _readout_start(d, seed)
        rng = np.random.default_rng(seed + 10)
        z = tau * rng.normal(size=(4000, d))
        keys, labels = z[:, None, :] + sigma * rng.normal(size=(4000, 2048, d)), z[:, 0] + eps * rng.normal(size=4000)
        losses, per_sequence = _readout_per_sequence(w, a, keys, labels)
        state = latent.readout_overlaps(w, a, beta)
        for values, expected in (
            (np.asarray(per_sequence), np.asarray(task.vector_field(0.0, state))),
            (np.asarray(losses)[:, None], task.risk(0.0, state)),
        ):
            se = values.std(0, ddof=1) / math.sqrt(len(values))
            assert np.all(np.abs(values.mean(0) - expected) < 4 * se), (d, values.mean(0), expected, se)


def test_the_readout_flow_ends_on_the_line_of_minimisers():
    """From 6 Gaussian starts (d = 4): |a|^2 never increases along the flow (d|a|^2/dt = -4 sigma^4 <w, a>^2), and
    every start ends on the minimisers {w = beta, <w, a> = <a, beta> = 0} at risk eps^2 (to 1e-6 at t = 60), with
    |a|^2 > 0: the L = oo flow does not find uniform attention, it only removes a's part along w."""
    import flowsim

    task = latent.Readout(4, 1.0, 1.0, 0.2)
    starts = task.initial_states(jax.random.key(3), 6, "gaussian")
    assert task.unrealizable(np.asarray(starts)) == {}
    solved = flowsim.solve_flow(task, starts, np.linspace(0.0, 60.0, 61))
    ys = np.asarray(solved.ys)
    assert np.all(np.diff(ys[:, :, 3], axis=1) <= 1e-12)
    end = ys[:, -1]
    np.testing.assert_allclose(end[:, [0, 1, 2, 4]], np.tile([1.0, 1.0, 0.0, 0.0], (6, 1)), atol=1e-6)
    np.testing.assert_allclose(np.asarray(task.risk(0.0, end)), 0.04, atol=1e-10)
    assert np.all(end[:, 3] > 0.01)
    assert task.unrealizable(np.array([[1.0, 2.0, 0.0, 1.0, 0.0]])) == {
        0: "is not the Gram matrix of (w, a, beta): not positive semi-definite"
    }


def test_gradient_descent_on_finite_sequences_tracks_the_flow(commands):
    """Full-batch gradient descent on n = 1000 sequences (d = 4, lr = 0.05, to t = 5), compared with the flow from
    the same overlaps (`flowsim.compare`, through `latent learn` in `commands`): the deviation (median over 3 seeds
    of the largest coordinate's) falls as L grows, with a log-log slope in L between -1.2 and -0.3 from L = 64 to
    256 (the finite-L variance e^{sigma^2 |a|^2} / L of attention drives |a| down, which the L = oo flow does not).
    benchmarks/latent_limits.py fits it over L = 64, 256 and 1024 (measured -0.59)."""
    rows = _table(commands / "learn" / "readout_learning.csv")
    Ls, deviation = [row["L"] for row in rows], [row["deviation_from_flow"] for row in rows]
    assert Ls == [64, 256] and deviation[1] < deviation[0]
    slope = np.polyfit(np.log(Ls), np.log(deviation), 1)[0]
    assert -1.2 < slope < -0.3, (deviation, slope)
