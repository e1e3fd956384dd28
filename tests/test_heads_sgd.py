"""Several heads, several locations in R^d (issue 56): the data seam with S informative locations, the H-head
predictor and its gradient, projected SGD (reproducible by seed, approaching the flow as the step falls), the outcome
rule on constructed end states, its shares' intervals, and `flowsim heads reproduce`.

Sizes are small (d = 8 or 10, L = 4, a few seeds, tens of steps): the SGD runs share their compiled programs.
"""

import csv
import math
import subprocess
import sys
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import erf
from scipy import stats

from flowsim import slr
from flowsim._checks import InvalidInput
from flowsim.compare import compare
from flowsim.tasks.slr._attention import as_attention_map
from flowsim.tasks.slr._family_data import family_predict, family_sample
from flowsim.tasks.slr._heads_data import heads_gradient, heads_loss, heads_predict, heads_state
from flowsim.tasks.slr._heads_outcome import (
    OUTCOMES,
    classify_heads,
    head_locations,
    outcome_shares,
)
from flowsim.tasks.slr._heads_problem import HeadsProblem
from flowsim.tasks.slr._heads_sgd import run_heads_sgd, sphere_heads
from flowsim.tasks.slr._heads_state import heads_layout, specialised_state

REPOSITORY = Path(__file__).resolve().parent.parent
LAYOUT = heads_layout(2, 2)
#: Compiled once each (run eagerly, every operation would compile its own): the map and the lengths are static.
PREDICT = jax.jit(heads_predict, static_argnums=(0, 5))
GRADIENT = jax.jit(heads_gradient, static_argnums=(0, 5))


# ---------------------------------------------------------------------------------------------
# The data seam


def test_two_locations_have_the_models_law():
    """S = 2 in R^8, L = 4, spike 2, spread 0.7, noise 0.3, 40 000 sequences: the positions are distinct and the
    ordered pair (J_1, J_2) uniform over its 12 values (chi-square, p > 1e-3); the token at J_j has mean 2 e_{2j-1}
    and standard deviation 0.7 in every coordinate, the others mean 0 and standard deviation 1; the two informative
    tokens' noises are uncorrelated; y - x_{J_1, 2} - x_{J_2, 4} has mean 0 and standard deviation 0.3. Means within
    5 standard errors; standard deviations within 2 % (their standard error is 0.35 % here)."""
    n, L, D = 40_000, 4, 8
    data = slr.DataModel(slr.SpikedTokens(2.0, 0.7, locations=2), L, 0.3)
    batch = family_sample(jax.random.key(0), data, n, D)
    X, J = np.asarray(batch.tokens), np.asarray(batch.relevant)
    assert J.shape == (n, 2) and (J[:, 0] != J[:, 1]).all()
    pairs = [a * L + b for a in range(L) for b in range(L) if a != b]
    counts = np.bincount(J[:, 0] * L + J[:, 1], minlength=L * L)[pairs]
    assert stats.chisquare(counts).pvalue > 1e-3
    rows = np.arange(n)
    informative = [X[rows, J[:, j]] for j in range(2)]
    for j, token in enumerate(informative):
        mean = np.zeros(D)
        mean[2 * j] = 2.0
        np.testing.assert_array_less(np.abs(token.mean(0) - mean), 5 * 0.7 / math.sqrt(n))
        np.testing.assert_allclose(token.std(0), 0.7, rtol=0.02)
    others = np.ones((n, L), bool)
    others[rows, J[:, 0]] = others[rows, J[:, 1]] = False
    noise_tokens = X[others]
    np.testing.assert_array_less(np.abs(noise_tokens.mean(0)), 5 / math.sqrt(len(noise_tokens)))
    np.testing.assert_allclose(noise_tokens.std(0), 1.0, rtol=0.02)
    correlation = np.corrcoef(informative[0][:, 5], informative[1][:, 5])[0, 1]
    assert abs(correlation) < 5 / math.sqrt(n)
    residual = np.asarray(batch.labels) - informative[0][:, 1] - informative[1][:, 3]
    assert abs(residual.mean()) < 5 * 0.3 / math.sqrt(n)
    np.testing.assert_allclose(residual.std(), 0.3, rtol=0.02)


def test_the_authors_quirk_shares_one_noise_vector():
    """shared_noise: both informative tokens are the same noise plus their own spike."""
    data = slr.DataModel(slr.SpikedTokens(2.0, 0.7, locations=2, shared_noise=True), 4, 0.0)
    batch = family_sample(jax.random.key(1), data, 50, 8)
    X, J = np.asarray(batch.tokens), np.asarray(batch.relevant)
    first, second = X[np.arange(50), J[:, 0]], X[np.arange(50), J[:, 1]]
    # To rounding: spike + noise - (spike + noise).
    np.testing.assert_allclose(first - second, np.tile([2.0, 0, -2.0, 0, 0, 0, 0, 0], (50, 1)), rtol=0, atol=1e-14)


def test_one_location_draws_what_it_always_drew():
    """S = 1 is the single-location sampler bit for bit: its recipe (issue 55) spelt out, for Marion et al.'s data and
    a variable length; and `family_predict` is `attend_tokens` of one head."""
    for data in (slr.marion_slr(12, 5, 0.7, 0.1), slr.spiked_slr(3.0, slr.Lengths.uniform(1, 3), 0.2)):
        batch = family_sample(jax.random.key(3), data, 30, 12)
        key_length, key_tokens, key_location, key_noise = jax.random.split(jax.random.key(3), 4)
        values = jnp.asarray(data.lengths.values)
        p = jnp.asarray(data.lengths.probabilities)
        length = values[jax.random.choice(key_length, len(values), (30,), p=p)]
        longest = data.lengths.longest
        tokens = jax.random.normal(key_tokens, (30, longest, 12))
        relevant = jax.random.randint(key_location, (30,), 0, length)
        at = jax.nn.one_hot(relevant, longest)
        tokens = (tokens * jnp.where(at > 0, data.tokens.spread, 1.0)[..., None]).at[..., 0].add(data.tokens.spike * at)
        tokens = jnp.where((jnp.arange(longest) < length[:, None])[..., None], tokens, 0.0)
        labels = tokens[jnp.arange(30), relevant, 1] + data.noise * jax.random.normal(key_noise, (30,))
        for got, expected in zip((batch.tokens, batch.lengths, batch.labels, batch.relevant),
                                 (tokens, length, labels, relevant), strict=True):  # fmt: skip
            np.testing.assert_array_equal(got, expected)
        k, v = jax.random.normal(jax.random.key(4), (2, 12))
        softmax = as_attention_map("softmax")
        np.testing.assert_allclose(  # one matrix product for both vectors: rounding
            PREDICT(softmax, batch, k[None], v[None], 1.0, data.lengths.values),
            family_predict(softmax, batch, k, v, data.lengths.values),
            rtol=1e-13,
            atol=1e-13,
        )


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: slr.SpikedTokens(1.0, 1.0, locations=0), "SpikedTokens.locations must be an integer in [1, 64]"),
        (lambda: slr.marion_slr(8, 3, locations=4), "SpikedTokens.locations = 4 must be at most the shortest length"),
        (lambda: slr.spiked_slr(1.0, slr.Lengths.uniform(1, 3), locations=2), "must be at most the shortest length"),
        (lambda: slr.max_slr(1.0, 3, locations=2), "max_slr: locations must be 1"),
        (lambda: slr.SpikedTokens(1.0, 1.0, shared_noise=True), "SpikedTokens.shared_noise must be True or False"),
        (lambda: slr.FamilyProblem(slr.marion_slr(8, 3, locations=2)), "FamilyProblem takes one informative location"),
        (lambda: family_sample(0, slr.marion_slr(8, 3, locations=2), 2, 3), "D must be"),
    ],
)
def test_several_locations_are_refused_where_they_are_not_defined(make, message):
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[").replace("]", r"\]")):
        make()


# ---------------------------------------------------------------------------------------------
# The predictor and its gradient


def test_the_heads_predictor_and_its_gradient():
    """f = sum_h sum_l erf(lam <x_l, k_h>) <x_l, v_h> as written (erf); softmax over each sequence's own tokens with a
    variable length; the gradient through the projections equals automatic differentiation through the vectors
    (rounding: 1e-12 relative)."""
    data = slr.marion_slr(12, 4, 0.7, 0.1, locations=2)
    batch = family_sample(jax.random.key(0), data, 7, 12)
    K, V = jax.random.normal(jax.random.key(1), (2, 3, 12))
    erf_map, softmax = as_attention_map("erf"), as_attention_map("softmax")
    X = np.asarray(batch.tokens)
    explicit = sum((np.asarray(erf(0.7 * X @ K[h])) * (X @ V[h])).sum(-1) for h in range(3))
    np.testing.assert_allclose(PREDICT(erf_map, batch, K, V, 0.7, (4,)), explicit, rtol=1e-12, atol=1e-12)
    variable = slr.spiked_slr(2.0, slr.Lengths.uniform(2, 4), 0.1, locations=2)
    batch = family_sample(jax.random.key(2), variable, 9, 12)
    X, lengths = np.asarray(batch.tokens), np.asarray(batch.lengths)
    explicit = [
        sum(np.asarray(jax.nn.softmax(0.7 * X[i, : lengths[i]] @ K[h])) @ (X[i, : lengths[i]] @ V[h]) for h in range(3))
        for i in range(9)
    ]
    got = PREDICT(softmax, batch, K, V, 0.7, variable.lengths.values)
    np.testing.assert_allclose(got, explicit, rtol=1e-12)
    for attention in (erf_map, softmax):
        through = GRADIENT(attention, batch, K, V, 0.7, variable.lengths.values)

        def loss(K, V, attention=attention):
            return heads_loss(attention, batch, K, V, 0.7, variable.lengths.values)

        direct = jax.jit(jax.grad(loss, (0, 1)))(K, V)
        for a, b in zip(through, direct, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * float(jnp.abs(b).max()))


# ---------------------------------------------------------------------------------------------
# Projected SGD in R^d


@pytest.fixture(scope="module")
def small_problem():
    return HeadsProblem(slr.marion_slr(10, 4, math.sqrt(0.5), 0.1, locations=2), heads=2, lam=0.5)


def test_sgd_is_reproducible_by_seed_and_by_block(small_problem):
    """The same key gives the same run; seed i is the same whichever block it runs in (seeds 2, 3 of a run from seed 0
    are seeds 0, 1 of a run from seed 2); the logged start is the heads' order parameters, unit heads staying unit."""
    options = dict(lr=0.01, steps=20, batch=4, log_every=10, seeds=4)
    first = run_heads_sgd(small_problem, 7, **options)
    again = run_heads_sgd(small_problem, 7, **options)
    later = run_heads_sgd(small_problem, 7, first_seed=2, **options)
    np.testing.assert_array_equal(first.ys, again.ys)
    np.testing.assert_array_equal(first.ys[2:], later.ys[:2])
    assert first.ys.shape == (4, 3, 22) and (np.asarray(first.status) == 0).all()
    K, V = sphere_heads(jax.random.split(jax.random.fold_in(jax.random.key(7), 1))[0], 2, 10)
    np.testing.assert_allclose(first.ys[1, 0], heads_state(K, V, 2), rtol=0, atol=1e-15)
    gram = np.asarray(LAYOUT.gram(first.ys[:, -1]))
    np.testing.assert_allclose(np.diagonal(gram, axis1=-2, axis2=-1), 1.0, atol=1e-12)


def test_sgd_approaches_the_flow_as_the_step_falls(small_problem):
    """From the same 16 starts (d = 10, lam = 0.5, batch 8) to t = 2: SGD's largest deviation from the flow, in max
    norm over the 22 order parameters, falls when the step falls from 0.02 to 0.005. Its noise scales like
    sqrt(lr / batch) (docs/science.md section 5): the median deviation should halve (measured: 0.122 to 0.056);
    asserted: below 0.75 of it."""
    K, V = sphere_heads(jax.random.key(5), 2 * 16, 10)
    k0, v0 = K.reshape(16, 2, 10), V.reshape(16, 2, 10)
    deviations = []
    for lr in (0.02, 0.005):
        run = run_heads_sgd(small_problem, 11, lr=lr, steps=round(2 / lr), batch=8, log_every=round(0.2 / lr),
                            seeds=16, k0=k0, v0=v0)  # fmt: skip
        # Tsit5: this flow is not stiff (d = 10, lam = 0.5), and compiles in seconds where Rodas5 takes twenty.
        deviations.append(np.median(np.asarray(compare(run, settle=0.0, solver=diffrax.Tsit5()).deviation)))
    assert deviations[1] < 0.75 * deviations[0], deviations


def test_bad_runs_are_refused(small_problem):
    with pytest.raises(InvalidInput, match="shared_noise must be True or False"):
        run_heads_sgd(small_problem, 0, steps=10, log_every=10, shared_noise=1)
    with pytest.raises(InvalidInput, match="k0 must hold unit vectors"):
        run_heads_sgd(small_problem, 0, steps=10, log_every=10, k0=np.ones((2, 10)), v0=np.ones((2, 10)))
    with pytest.raises(InvalidInput, match="first_seed must be an integer >= 0"):
        run_heads_sgd(small_problem, 0, steps=10, log_every=10, first_seed=-1)


# ---------------------------------------------------------------------------------------------
# The outcome rule


def _state(kappa, nu):
    """Order parameters of H = S = 2 with the given |<k_h, k*_j>| and |<v_h, v*_j>| (rows: heads), the rest 0."""
    y = np.zeros(LAYOUT.dimension)
    y[LAYOUT.kappa], y[LAYOUT.nu] = kappa, nu
    return y


def test_the_outcome_rule_on_constructed_end_states():
    """The oracles: head h on location pi(h) is specialised, both heads on one location collapsed, one head on a
    location and the other on none partial, no head none. The authors' printed alignments (|<k_h, k*_j>| of runs 1, 2,
    5, 12 of their notebook; |<v_h, v*_j>| 0.47 each, as in runs with their shared noise): specialised, collapsed, none,
    and run 12 (0.21, 0.43, 0.39, 0.22), specialised at 0.3 and partial at 0.4. Signs do not matter (erf is odd); a
    head on two locations counts on its stronger one; thresholds outside (0, 1) are refused."""
    oracle = {(0, 1): 0, (1, 0): 0, (0, 0): 1, (1, 1): 1, (0, None): 2, (None, 1): 2, (None, None): 3}
    states = np.array([specialised_state(LAYOUT, assignment) for assignment in oracle])
    np.testing.assert_array_equal(classify_heads(states, LAYOUT), list(oracle.values()))
    np.testing.assert_array_equal(classify_heads(-states, (2, 2)), list(oracle.values()))
    nu = [[0.47, 0.47], [0.47, 0.47]]
    printed = [[[0.50, 0.06], [0.06, 0.47]], [[0.76, 0.04], [0.75, 0.006]], [[0.09, 0.05], [0.003, 0.03]]]
    np.testing.assert_array_equal(classify_heads([_state(k, nu) for k in printed], LAYOUT), [0, 1, 3])
    run_12 = _state([[0.21, 0.43], [0.39, 0.22]], nu)
    assert OUTCOMES[int(classify_heads(run_12, LAYOUT))] == "specialised"
    assert OUTCOMES[int(classify_heads(run_12, LAYOUT, k_threshold=0.4))] == "partial"
    both = _state([[0.6, 0.5], [0.45, 0.0]], [[0.6, 0.6], [0.5, 0.0]])
    np.testing.assert_array_equal(head_locations(both, LAYOUT), [0, 0])
    assert OUTCOMES[int(classify_heads(both, LAYOUT))] == "collapsed"
    weak_values = _state([[0.5, 0.0], [0.0, 0.5]], [[0.2, 0.0], [0.0, 0.5]])
    assert OUTCOMES[int(classify_heads(weak_values, LAYOUT))] == "partial"
    three = heads_layout(3, 2)
    np.testing.assert_array_equal(
        classify_heads([specialised_state(three, a) for a in ((0, 1, 0), (0, 0, None), (None, 1, None))], three),
        [0, 1, 2],
    )
    for bad in (0, 1, -0.1, 1.5):
        with pytest.raises(InvalidInput, match="k_threshold must be a number in the open interval"):
            classify_heads(states, LAYOUT, k_threshold=bad)


def test_outcome_shares_have_exact_binomial_intervals():
    """Clopper-Pearson: 5 of 20 gives [0.0866, 0.4910] (scipy.stats.binomtest); the authors' shares are set beside,
    with whether they lie inside and Fisher's exact test (identical tables: p = 1)."""
    codes = np.array([0] * 5 + [1] * 10 + [2] + [3] * 4)
    shares = outcome_shares(codes)
    assert [row.outcome for row in shares] == list(OUTCOMES)
    assert [row.count for row in shares] == [5, 10, 1, 4] and all(row.n == 20 for row in shares)
    assert (round(shares[0].low, 4), round(shares[0].high, 4)) == (0.0866, 0.4910)
    assert all(row.inside for row in shares) and all(row.p_value == pytest.approx(1.0) for row in shares)
    all_none = outcome_shares(np.full(200, 3))
    assert not all_none[1].inside and all_none[1].high < 0.02 and all_none[1].p_value < 1e-10


# ---------------------------------------------------------------------------------------------
# The command line


SMALL = "heads reproduce --seeds 3 --block 2 --steps 20 --log-every 10 --d 10 --L 4 --no-flow --no-progress"


def _flowsim(arguments: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "flowsim.cli", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPOSITORY)


def _table(path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_the_command_reproduces_in_resumable_blocks(tmp_path, capsys):
    """The installed executable, small: the shares of the 3 seeds, their starts (the flow's) and ends written; run
    again with --resume (in this process), its two blocks of seeds are read back, nothing computed, and the tables
    are the same bytes."""
    from flowsim.cli import main

    out = tmp_path / "run"
    first = _flowsim([*SMALL.split(), "--out", str(out)])
    assert first.returncode == 0, first.stderr
    shares = _table(out / "shares.csv")
    assert [row["outcome"] for row in shares] == list(OUTCOMES) and {row["source"] for row in shares} == {"sgd"}
    assert sum(int(row["count"]) for row in shares) == 3 and [row["authors"] for row in shares] == ["5", "10", "1", "4"]
    starts = _table(out / "initial_states.csv")
    assert len(starts) == 3 and list(starts[0])[2:] == list(LAYOUT.names)
    tables = {name: (out / name).read_bytes() for name in ("shares.csv", "initial_states.csv", "sgd_final_states.csv")}
    assert main([*SMALL.split(), "--out", str(out), "--resume"]) == 0
    assert "2 finished units read back" in capsys.readouterr().err
    assert {name: (out / name).read_bytes() for name in tables} == tables


@pytest.mark.parametrize(
    "options, message",
    [
        ("--heads 0", "--heads must be an integer >= 1, got 0"),
        ("--locations 0", "--locations must be an integer >= 1, got 0"),
        ("--locations 11", "--locations must be at most --L = 10"),
        ("--k-threshold 1", "--k-threshold must be a number in the open interval (0, 1), got 1.0"),
        ("--v-threshold 0", "--v-threshold must be a number in the open interval (0, 1), got 0.0"),
        ("--heads 40 --locations 10 --d 100", "this run would take about"),
    ],
)
def test_the_command_refuses_in_one_line(options, message, tmp_path, monkeypatch, capsys):
    from flowsim.cli import main

    monkeypatch.chdir(tmp_path)
    status = main(["heads", "reproduce", *options.split()])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.startswith("flowsim heads: error: ") and message in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err + captured.out
    assert not Path("flowsim-out").exists()
