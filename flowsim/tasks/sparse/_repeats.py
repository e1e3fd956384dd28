"""m* as a repeated measurement: the whole search of `critical_sample_size` run with R independent search keys.

One search's m* (the first size it tried whose success rate is >= 1/2) moves by tens of samples with the key: the
success rate of the learners measured here stays near one half over a wide range of m (docs/science.md section 8),
and the search's bootstrap over seeds, which resamples seeds at the sizes it tried, does not see that. Repeating
the search, each repetition with its own supports, training sets, initialisations and bracket, measures the
spread that is really there: m* is the median of the R searches' m*, its interval an order statistic of theirs,
and the pooled success curve adds up the runs of every search at every size tried.
"""

import math

import equinox as eqx
import jax
import numpy as np

from flowsim._checks import InvalidInput, as_key, check_count
from flowsim.tasks.sparse._critical import CriticalSize, critical_sample_size

__all__ = [
    "INTERVAL_LEVEL",
    "RepeatedSize",
    "median_interval",
    "repeated_critical_size",
    "repeated_size",
    "search_key",
]

#: The coverage the interval of a repeated m* aims at: the order-statistic interval of the median with coverage
#: >= 95 %, where R searches allow one (R >= 6); else the range of the R searches (`median_interval`).
INTERVAL_LEVEL = 0.95
#: The branch of a key that repetitions r >= 1 are folded into: none of the numbers a search folds into its own key
#: (0 for the supports, 1, 2, ... for its rounds), so that no repetition shares a key with another's draws.
_REPEATS = 2**31 - 1


def search_key(key, repetition: int):
    """The key of repetition `repetition` of a search whose key is `key`: `key` itself for repetition 0 (a single
    search is repetition 0 of a repeated one: its measurements are read again, not repeated), else
    `fold_in(fold_in(key, 2^31 - 1), repetition)`. A repetition's key does not depend on how many there are, so a
    run with more repetitions extends one with fewer.

    **Arguments:** `key` (a PRNG key or seed); `repetition` (an integer >= 0).

    **Returns:** a PRNG key.
    """
    key, repetition = as_key(key), check_count("repetition", repetition, 0)
    return key if repetition == 0 else jax.random.fold_in(jax.random.fold_in(key, _REPEATS), repetition)


def median_interval(values, level: float = INTERVAL_LEVEL) -> tuple[float, float, float]:
    """The distribution-free interval of the median of R independent values: the order statistics
    (x_(k), x_(R + 1 - k)) with the largest k whose coverage 1 - 2 P(Binomial(R, 1/2) < k) is >= `level`; where no k
    reaches it (R <= 5 at 95 %), the range (k = 1), whose coverage is 1 - 2^(1 - R) (75 % at R = 3, 50 % at R = 2).

    **Arguments:** `values` (R >= 1 numbers; inf allowed: an m* that was not reached); `level` in (0, 1).

    **Returns:** (low, high, coverage).
    """
    values = np.sort(np.asarray(values, float))
    if values.ndim != 1 or len(values) < 1 or np.isnan(values).any():
        raise InvalidInput(f"values must hold at least one number (not NaN), got {values.tolist()}")
    if not 0 < level < 1:
        raise InvalidInput(f"level must be a number in (0, 1), got {level}")
    import scipy.stats  # here, not at import: most of a command's start-up otherwise

    R = len(values)
    coverage = [1 - 2 * scipy.stats.binom.cdf(k - 1, R, 0.5) for k in range(1, R // 2 + 2)]
    reaching = [k for k, c in enumerate(coverage, start=1) if c >= level and k <= R + 1 - k]
    k = max(reaching) if reaching else 1
    return float(values[k - 1]), float(values[R - k]), float(max(0.0, coverage[k - 1]))


class RepeatedSize(eqx.Module):
    """m* of one learner, budget and T measured by R >= 2 independent searches (`repeated_size`).

    **Fields:** `T`, `learner`, `budget`; `searches` (the R `CriticalSize`s, in the order of their repetitions);
    `critical` (m*: the median of the searches' m*; inf when at least half of them reached none); `interval` (the
    order-statistic interval of that median, `median_interval`) and its `coverage`; the pooled success curve: `m`
    (every size any search tried, sorted), `successes` and `runs` (the successful runs and all runs at each size,
    summed over the searches that tried it); `converged` and `steps_run` (every run's, flattened over the searches).
    """

    T: int
    learner: str
    budget: str
    searches: tuple
    critical: float
    interval: tuple[float, float]
    coverage: float
    m: np.ndarray
    successes: np.ndarray
    runs: np.ndarray
    converged: np.ndarray
    steps_run: np.ndarray

    @property
    def repeats(self) -> int:
        """R, the number of searches."""
        return len(self.searches)

    @property
    def pooled_rates(self) -> np.ndarray:
        """The pooled success rate at each size of `m`: successes / runs."""
        return self.successes / self.runs


def repeated_size(searches) -> RepeatedSize:
    """The repeated measurement made of R >= 2 searches of the same learner, budget and T (their keys independent).

    **Arguments:** `searches`: `CriticalSize`s, e.g. `critical_sample_size` with the keys of `search_key`.

    **Returns:** a `RepeatedSize`.
    """
    searches = tuple(searches)
    if len(searches) < 2 or not all(isinstance(s, CriticalSize) for s in searches):
        raise InvalidInput(f"searches must hold at least 2 CriticalSize results, got {len(searches)}")
    kinds = {(s.T, s.learner, s.budget) for s in searches}
    if len(kinds) != 1:
        raise InvalidInput(f"searches must be of one (T, learner, budget), got {sorted(kinds)}")
    T, learner, budget = kinds.pop()
    critical = np.array([s.critical for s in searches])
    low, high, coverage = median_interval(critical)
    m = np.unique(np.concatenate([s.m for s in searches]))
    successes, runs = np.zeros(len(m), int), np.zeros(len(m), int)
    for s in searches:
        at = np.searchsorted(m, s.m)
        successes[at] += np.sum(s.success, axis=1)
        runs[at] += s.success.shape[1]
    return RepeatedSize(
        T, learner, budget, searches, float(np.median(critical)), (low, high), coverage, m, successes, runs,
        np.concatenate([np.ravel(s.converged) for s in searches]),
        np.concatenate([np.ravel(s.steps_run) for s in searches]),
    )  # fmt: skip


def repeated_critical_size(target, key, *, repeats: int = 3, **search) -> RepeatedSize:
    """The critical sample size measured by `repeats` independent searches (`critical_sample_size` with the keys
    `search_key(key, r)`, r = 0 ... R - 1): m* as their median, with an interval over the repetitions.

    **Arguments:** `target`, `key` (a PRNG key or seed); `repeats` (R >= 2); `search`: passed to
    `critical_sample_size` (learner, budget, seeds, candidates, rounds, ...).

    **Returns:** a `RepeatedSize`.
    """
    repeats = check_count("repeats", repeats, 2)
    key = as_key(key)
    return repeated_size(critical_sample_size(target, search_key(key, r), **search) for r in range(repeats))


def repeated_sigma(result: RepeatedSize, own) -> float:
    """The standard error of a repeated m* (the median of R searches), from the repetitions' spread: sqrt(pi / 2) s /
    sqrt(R), s the standard deviation of the searches' finite m* (the median's large-R standard error for a normal
    spread; above the exact one at R = 2 and 3), at least the median of the searches' own standard errors `own` (each
    from its bootstrap and resolution, `critical_sigma`) over sqrt(R), and at least one sample: a small R can agree
    by chance."""
    critical = np.array([s.critical for s in result.searches])
    finite = critical[np.isfinite(critical)]
    spread = math.sqrt(math.pi / 2) * float(np.std(finite, ddof=1)) if len(finite) >= 2 else 0.0
    R, own = len(critical), np.asarray(own, float)
    floor = float(np.median(own)) / math.sqrt(R) if own.size else 0.0
    return float(max(spread / math.sqrt(R), floor, 1.0))
