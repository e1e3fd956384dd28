"""m* as a repeated measurement (docs/science.md section 8): R independent searches, their median and its
order-statistic interval, the pooled success curve, the fits weighted by the repetitions' spread, runs of other
seeds read back as repetitions, and the default sweep's estimate on the CPU."""

import math

import jax
import numpy as np
import pytest
import scipy.stats

from flowsim.tasks import sparse
from flowsim.tasks.sparse import SparseTarget


def test_the_interval_of_the_median_is_an_order_statistic_interval():
    """Distribution-free: (x_(k), x_(R+1-k)) covers the median with probability 1 - 2 P(Bin(R, 1/2) < k). At R = 20
    the textbook 95 % interval is (x_(6), x_(15)), coverage 0.9586; at R = 9, (x_(2), x_(8)), 0.9609; below 6
    searches no k reaches 95 % and the interval is the range, of coverage 1 - 2^(1 - R) (0.75 at R = 3, 0.5 at 2)."""
    values = np.arange(1.0, 21.0)[::-1]  # unsorted on purpose
    low, high, coverage = sparse.median_interval(values)
    assert (low, high) == (6.0, 15.0) and coverage == pytest.approx(1 - 2 * scipy.stats.binom.cdf(5, 20, 0.5))
    assert coverage == pytest.approx(0.9586, abs=1e-4)
    assert sparse.median_interval(np.arange(1.0, 10.0))[:2] == (2.0, 8.0)
    for R, expected in ((2, 0.5), (3, 0.75), (5, 0.9375)):
        low, high, coverage = sparse.median_interval([40.0 + i for i in range(R)])
        assert (low, high) == (40.0, 40.0 + R - 1) and coverage == pytest.approx(expected)
    assert sparse.median_interval([95.0, math.inf, 104.0])[:2] == (95.0, math.inf)  # an m* not reached: inf
    with pytest.raises(ValueError, match="values must hold at least one number"):
        sparse.median_interval([])


def test_a_repetitions_key_does_not_depend_on_how_many_there_are():
    """Repetition 0 is the single search (its key unchanged); the others are distinct from it and from each other."""
    key = jax.random.key(3)
    keys = [jax.random.key_data(sparse.search_key(key, r)) for r in range(4)]
    np.testing.assert_array_equal(keys[0], jax.random.key_data(key))
    assert len({tuple(np.asarray(k).tolist()) for k in keys}) == 4
    with pytest.raises(ValueError, match="repetition must be an integer >= 0"):
        sparse.search_key(key, -1)


def test_the_repeated_search_contains_each_single_search():
    """`sweep` with 3 searches per (learner, T): the l1 control at T = 16 and 32, the head at T = 16 (1000 Adam steps,
    the compiled program of tests/test_sparse.py's reduced sweep: 4 seeds, one round of 4 sizes). Each point's
    m* is the median of its searches, its interval (the range: 75 % at R = 3) contains each search's m*; each search is
    a unit ("...-r1", "...-r2" after the single search's name) and equals `critical_sample_size` with the key
    `search_key(fold_in(key, T), r)`; a sweep with one search reads repetition 0 back (nothing computed); the pooled
    curve counts every run of every search at each size."""
    store = {}

    def unit(name, compute):
        if name not in store:
            store[name] = compute()
        return store[name]

    search = {"seeds": 4, "candidates": 4, "rounds": 1, "log_every": 20}
    options = {"learners": ("l1", "head"), "budgets": (1000,), "learner_Ts": {"head": (16,)}, "erm_trials": 10}
    result = sparse.sweep(0, (16, 32), repeats=3, unit=unit, **options, **search)
    assert sorted(name for name in store if name.startswith("head")) == ["head-1000-T16", "head-1000-T16-r1",
                                                                         "head-1000-T16-r2"]  # fmt: skip
    for found in (*result.results[("l1", "converged")], *result.results[("head", "1000")]):
        assert isinstance(found, sparse.RepeatedSize) and found.repeats == 3 and found.coverage == pytest.approx(0.75)
        each = np.array([s.critical for s in found.searches])
        assert found.critical == np.median(each)
        assert all(found.interval[0] <= c <= found.interval[1] for c in each), (found.interval, each)
        assert found.runs.sum() == sum(s.success.size for s in found.searches)
        assert found.successes.sum() == sum(s.success.sum() for s in found.searches)
        assert not np.array_equal(found.searches[0].accuracy, found.searches[1].accuracy)  # other keys, other data
    # The control's second search at T = 32, made alone with its key: the same search.
    alone = sparse.critical_sample_size(
        SparseTarget(32, 3), sparse.search_key(jax.random.fold_in(jax.random.key(0), 32), 1), learner="l1", **search
    )
    again = result.results[("l1", "converged")][1].searches[1]
    assert alone.critical == again.critical and np.array_equal(alone.accuracy, again.accuracy)
    computed = len(store)
    single = sparse.sweep(0, (16, 32), repeats=1, unit=unit, **options, **search)
    assert len(store) == computed
    assert [r.critical for r in single.results[("l1", "converged")]] == [
        r.searches[0].critical for r in result.results[("l1", "converged")]
    ]
    table = sparse.sweep_table(result)
    assert table["repeats"].tolist() == [3, 3, 3] and all(len(m.split()) == 3 for m in table["searches_m"])


def _search(T, critical, sigma=1.0):
    """A search's result that found m* = `critical` with a bootstrap interval of half-width 1.96 sigma and sizes one
    sample apart around it (its own standard error: `sigma`, at least one sample)."""
    m = np.array([critical - 1, critical])
    success = np.array([[False, False], [True, True]])
    return sparse.CriticalSize(
        T, "head", "1000", m, success, success.astype(float), np.full((2, 2, 1), np.nan), np.array([0]),
        float(critical), (critical - 1.96 * sigma, critical + 1.96 * sigma), np.ones((2, 2), bool),
        np.full((2, 2), 1000),
    )  # fmt: skip


def test_the_fits_weigh_each_t_by_the_repetitions_spread():
    """sigma of a repeated m* = sqrt(pi/2) s / sqrt(R) (s: the searches' standard deviation), at least their own
    standard errors' median / sqrt(R) and one sample. Three searches of 95, 104, 113 (s = 9) give sqrt(pi/2) 9 / sqrt(3)
    = 6.51; spread twice as wide (86, 104, 122), twice that; searches that agree fall back on their own errors (4 /
    sqrt(3)) or one sample. A sweep's fits take those sigmas: doubling the spread at one T changes that T's weight,
    the chi^2 and the interval of b of the log law."""
    spread = [95.0, 104.0, 113.0]
    repeated = sparse.repeated_size(_search(1024, c) for c in spread)
    assert sparse.critical_sigma(repeated) == pytest.approx(math.sqrt(math.pi / 2) * 9 / math.sqrt(3))
    wider = sparse.repeated_size(_search(1024, 104 + 2 * (c - 104)) for c in spread)
    assert sparse.critical_sigma(wider) == pytest.approx(2 * sparse.critical_sigma(repeated))
    assert sparse.critical_sigma(sparse.repeated_size(_search(1024, 100.0, 4.0) for _ in range(3))) == pytest.approx(
        4 / math.sqrt(3)
    )
    assert sparse.critical_sigma(sparse.repeated_size(_search(1024, 100.0) for _ in range(3))) == 1.0
    from flowsim.tasks.sparse._sweep import _fits

    Ts = (16, 64, 256, 1024, 4096)
    law = {T: 10 + 15 * math.log(T) for T in Ts}

    def curve(scale_at_1024):
        points = []
        for T in Ts:
            scale = scale_at_1024 if T == 1024 else 1.0
            offsets = (-4.0, 1.0, 4.0) if T != 256 else (-3.0, 2.0, 3.0)  # noise: the log law does not fit exactly
            points.append(sparse.repeated_size(_search(T, round(law[T]) + scale * d) for d in offsets))
        return {("head", "1000"): tuple(points)}

    narrow, wide = _fits(curve(1.0))[("head", "1000")]["log"], _fits(curve(3.0))[("head", "1000")]["log"]
    assert narrow.chi2 != pytest.approx(wide.chi2)
    assert np.diff(wide.b_interval)[0] != pytest.approx(np.diff(narrow.b_interval)[0])
    sigmas = [sparse.critical_sigma(r) for r in curve(3.0)[("head", "1000")]]
    weights = np.array(sigmas) ** -2
    assert weights[3] == pytest.approx(weights[4] / 9)  # the T of thrice the spread: a ninth of the weight


def _cli_run(tmp_path, name, *options):
    from flowsim.cli import main

    arguments = "sparse sweep --learners l1 --Ts 16,32,64 --seeds 2 --candidates 2 --rounds 1 --erm-trials 2"
    assert main([*arguments.split(), *options, "--out", str(tmp_path / name), "--no-progress"]) == 0
    return tmp_path / name


def test_runs_of_other_seeds_are_read_back_as_repetitions(tmp_path):
    """`read_sweep` names a search by its run's seed and repetition: a run of the control with --repeats 2 holds two
    searches of each T; with a run of --seed 1 beside it, three (in the order seed 0's two, seed 1's); a folder read
    twice adds nothing; runs that searched otherwise (--seeds 3) are refused."""
    two = _cli_run(tmp_path, "two", "--repeats", "2")
    seed1 = _cli_run(tmp_path, "seed1", "--repeats", "1", "--seed", "1")
    repeated = sparse.read_sweep(two).results[("l1", "converged")]
    alone = sparse.read_sweep(seed1).results[("l1", "converged")]
    pooled = sparse.read_sweep(two, seed1, two).results[("l1", "converged")]
    for r, r1, both in zip(repeated, alone, pooled, strict=True):
        assert isinstance(r, sparse.RepeatedSize) and r.repeats == 2 and both.repeats == 3
        assert [s.critical for s in both.searches] == [*(s.critical for s in r.searches), r1.critical]
    other = _cli_run(tmp_path, "other", "--repeats", "1", "--seed", "2", "--seeds", "3")
    with pytest.raises(ValueError, match=r"must search alike: seeds = 2 in .*two, 3 in .*other"):
        sparse.read_sweep(two, other)


def test_the_default_sweep_is_estimated_under_20_minutes_on_the_cpu(monkeypatch):
    """`flowsim sparse sweep` with no options, estimated on the 2-core CPU (the per-unit costs of BENCHMARKS.md): under
    20 minutes. The command it names to extend it (T to 4096, the Transformer, both budgets, the same search) parses,
    and its estimate is the one said."""
    from flowsim._memory import format_seconds
    from flowsim.cli import _parser
    from flowsim.tasks.sparse import _estimates, _train, cli

    monkeypatch.setattr(_train, "on_accelerator", lambda: False)
    default = _parser().parse_args(["sparse", "sweep"])
    assert cli._is_default(default) and default.repeats == sparse.DEFAULT_REPEATS == 3
    assert _estimates.seconds(default) < 20 * 60, _estimates.seconds(default)
    said = cli._extension(default)
    command = said.split("flowsim ", 1)[1].split(" --yes")[0].split()
    extended = _parser().parse_args(command)
    assert max(extended.Ts) == max(extended.transformer_Ts) == 4096 and "transformer" in extended.learners
    assert tuple(extended.budgets) == (1000, "converged") and extended.repeats == 3 and extended.seed == 0
    assert f"about {format_seconds(_estimates.seconds(extended))} here" in said
    assert f"on one GPU about {format_seconds(_estimates.seconds(extended, True))}" in said
    assert not cli._is_default(extended)
