"""The critical sample size m*(T): the smallest m at which at least half of the runs learn the target.

A run succeeds when its validation accuracy on fresh samples reaches `SUCCESS_ACCURACY`. The search does
not train every m of a fine grid: a first round spreads `candidates` sample sizes geometrically over
[m_low, m_high], and each further round puts `candidates` new sizes evenly inside the bracket between the
largest size that failed and the smallest that succeeded (success rate >= 1/2), until the bracket is one
sample wide or the rounds are spent; a round in which no size has yet succeeded is followed by one over
(m_high, 2 m_high], the range doubled upward. Every round trains seeds x candidates models in a few compiled programs
(`train`: groups of a size fixed by m_high and T, each group's training sets cut to its largest size rounded up to
a quarter power of two, so that a few programs serve every round). The interval is a bootstrap over seeds.

The training budget is part of the measurement: `budget` is a number of optimiser steps, or "converged"
(train until the training loss converges, capped at `max_steps`); every run reports whether it converged.
The control learner ("l1") is a convex solver run to its tolerance: its budget is always "converged".
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import (
    InvalidInput,
    as_key,
    check_choice,
    check_count,
    check_entries,
    check_positive,
    wrong_shape,
    zeros_and_ones,
)
from flowsim.tasks.sparse._data import SparseTarget, evaluate_target, sample_bits, training_set
from flowsim.tasks.sparse._limits import information_limit
from flowsim.tasks.sparse._train import LEARNERS, group_elements, on_accelerator, train

__all__ = ["SUCCESS_ACCURACY", "CriticalSize", "critical_sample_size", "success_rates"]

#: The validation accuracy a run must reach to count as a success.
SUCCESS_ACCURACY = 0.99
#: Fresh samples of each run's validation accuracy, by default.
N_VALIDATION = 2000


class CriticalSize(eqx.Module):
    """The result of `critical_sample_size`.

    **Fields:** `T`, `learner`; `m` (the sample sizes trained, sorted, (sizes,)); `success` ((sizes, seeds),
    validation accuracy >= `SUCCESS_ACCURACY`); `accuracy` (validation accuracy, (sizes, seeds)); `mass`
    (the attention mass on the support over training, (sizes, seeds, logs), NaN for the MLP) at the logged
    `steps`; `critical` (m*: the smallest m whose success rate is >= 1/2; inf if none); `interval` (a 95 %
    bootstrap interval of m* over seeds); `budget` ("1000", ... steps, or "converged"); `converged` ((sizes,
    seeds): the run's training loss reached the threshold or stopped improving); `steps_run` ((sizes, seeds):
    the optimiser's steps, the control's solver iterations).
    """

    T: int
    learner: str
    budget: str
    m: np.ndarray
    success: np.ndarray
    accuracy: np.ndarray
    mass: np.ndarray
    steps: np.ndarray
    critical: float
    interval: tuple[float, float]
    converged: np.ndarray
    steps_run: np.ndarray


def success_rates(success: np.ndarray) -> np.ndarray:
    """The share of successful seeds at each sample size, (sizes,), from `success` (sizes, seeds >= 1): booleans,
    or 0 and 1."""
    success = np.asarray(check_entries("success", success, "booleans (or 0 and 1)", zeros_and_ones))
    if success.ndim < 1 or success.shape[-1] < 1:
        raise wrong_shape("success", "(sizes, seeds) with seeds >= 1", success.shape)
    return success.astype(float).mean(axis=-1)


def _critical(m: np.ndarray, success: np.ndarray) -> float:
    rates = success_rates(success)
    passed = np.flatnonzero(rates >= 0.5)
    return float(m[passed[0]]) if len(passed) else math.inf


def critical_sample_size(
    target: SparseTarget,
    key,
    *,
    learner: str = "head",
    budget: int | str = 1000,
    max_steps: int = 16_000,
    seeds: int = 8,
    m_low: int | None = None,
    m_high: int | None = None,
    span: float = 8.0,
    candidates: int = 6,
    rounds: int = 3,
    n_validation: int = N_VALIDATION,
    bootstrap: int = 1000,
    **training,
) -> CriticalSize:
    """The critical sample size of a learner on a sparse target, with a bootstrap interval.

    **Arguments:**

    - `target`: the data model; `key`: a PRNG key or seed (supports, training sets, initialisations).
    - `learner`: one of `LEARNERS`; `seeds`: runs per sample size (each its own support and data).
    - `budget`: optimiser steps per run, or "converged": until the training loss converges (`train`'s
      `until_converged`), at most `max_steps` steps. The control ("l1") ignores it (a solver to tolerance).
    - `m_low`, `m_high`: the search range (default: ceil(log2 C(T, s)) and `span` times that).
    - `candidates`: sample sizes per round; `rounds`: rounds of the search.
    - `n_validation`: fresh samples of each run's validation accuracy; `bootstrap`: resamples of seeds.
    - `training`: passed to `train` (log_every, loss_threshold, patience, and the learner's options: lr, width...).

    **Returns:** a `CriticalSize`.
    """
    check_choice("learner", learner, LEARNERS)
    budget, training = _budget(learner, budget, max_steps, training)
    seeds, candidates, rounds = (
        check_count(n, v, 1) for n, v in (("seeds", seeds), ("candidates", candidates), ("rounds", rounds))
    )
    limit = math.ceil(information_limit(target.T, target.s))
    m_low = check_count("m_low", limit if m_low is None else m_low, 1)
    span = check_positive("span", span)
    m_high = check_count("m_high", round(span * m_low) if m_high is None else m_high, m_low + 1)
    key = as_key(key)
    supports = [target.draw_support(k) for k in jax.random.split(jax.random.fold_in(key, 0), seeds)]
    tried: dict[int, tuple] = {}
    sizes = np.unique(np.geomspace(m_low, m_high, candidates).round().astype(int))
    for round_ in range(rounds):
        round_key = jax.random.fold_in(key, round_ + 1)
        results = _train_sizes(target, round_key, learner, supports, sizes, m_high, candidates, n_validation, training)
        tried |= results
        m = np.array(sorted(tried))
        success = np.array([tried[size][0] for size in m])
        rates = success_rates(success)
        above = np.flatnonzero(rates >= 0.5)
        if not len(above):
            # Nothing reached 1/2 up to the range's top: the next round doubles the range upward, so that a
            # learner that needs more than span x log2 C(T, s) samples gets an m* rather than "> m_high".
            m_high = 2 * int(m[-1])
            sizes = np.setdiff1d(np.unique(np.geomspace(m[-1], m_high, candidates + 1).round().astype(int)), m)
            continue
        high = m[above[0]]
        below = m[(m < high)]
        low = below.max() if len(below) else m_low - 1
        if high - low <= 1:
            break
        sizes = np.setdiff1d(np.unique(np.linspace(low, high, candidates + 2)[1:-1].round().astype(int)), m)
        if not len(sizes):
            break
    m = np.array(sorted(tried))
    success, accuracy, mass, converged, steps_run = (np.array([tried[size][i] for size in m]) for i in (0, 1, 2, 4, 5))
    steps = tried[int(m[0])][3]
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**31 - 1)))
    draws = [_critical(m, success[:, rng.integers(0, seeds, seeds)]) for _ in range(bootstrap)]
    # inverted_cdf picks drawn values: no interpolation between a finite m* and an infinite one.
    interval = tuple(float(q) for q in np.quantile(draws, [0.025, 0.975], method="inverted_cdf"))
    return CriticalSize(
        target.T, learner, budget, m, success, accuracy, mass, steps, _critical(m, success), interval, converged,
        steps_run,
    )  # fmt: skip


def _budget(learner, budget, max_steps, training) -> tuple[str, dict]:
    """The budget's label, and `train`'s arguments for it."""
    if "steps" in training or "until_converged" in training:
        raise InvalidInput("give the training budget as budget= (steps, or 'converged'), not steps=")
    if learner == "l1":
        return "converged", training
    if budget == "converged":
        steps = check_count("max_steps", max_steps, 1)
        return "converged", training | {"steps": steps, "until_converged": True}
    if isinstance(budget, str) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise InvalidInput(f"budget must be a number of steps >= 1 or 'converged', got {budget!r}")
    return str(int(budget)), training | {"steps": int(budget)}


def _train_sizes(target, key, learner, supports, sizes, m_high, candidates, n_validation, training) -> dict[int, tuple]:
    """Train seeds x sizes models at once, in groups of a size fixed by (m_high, T, seeds, candidates) so that the
    rounds share their compiled programs; {m: (success, validation accuracy, mass log, steps, converged, steps run)}."""
    models = [(i, int(m)) for m in sizes for i in range(len(supports))]
    x = np.zeros((len(models), m_high, target.T), bool)  # bits as booleans: `train` makes floats per group
    y, mask = np.zeros((len(models), m_high)), np.zeros((len(models), m_high))
    x_val, y_val = [], []
    for j, (i, m) in enumerate(models):
        support, table = supports[i]
        data_key, validation_key = jax.random.split(jax.random.fold_in(jax.random.fold_in(key, i), m))
        bits, labels, _ = training_set(target, support, table, data_key, m)
        x[j, :m], y[j, :m], mask[j, :m] = np.asarray(bits), np.asarray(labels), 1.0
        fresh = sample_bits(target, validation_key, n_validation)
        x_val.append(np.asarray(fresh, bool))
        y_val.append(np.asarray(evaluate_target(fresh, support, table), float))
    support = jnp.stack([supports[i][0] for i, _ in models])
    # A whole round (every size's seeds) in one program where its padded training sets fit in `group_elements()`
    # (a GPU's, or the CPU's at small T, where a unit is mostly compiling: one program instead of one per size and
    # training-set length); else, on the CPU, the seeds of one size at a time.
    runs, fitting = len(supports) * candidates, group_elements() // (m_high * target.T)
    most = runs if runs <= fitting or on_accelerator() else len(supports)
    group = max(1, min(most, fitting))
    run = train(
        learner, jax.random.fold_in(key, 2**31), x, y, mask, support, np.stack(x_val), np.stack(y_val),
        **({} if learner == "l1" else {"group": group}), **training,
    )  # fmt: skip
    out = {}
    for k, m in enumerate(sizes):
        rows = slice(k * len(supports), (k + 1) * len(supports))
        accuracy = run.validation_accuracy[rows]
        out[int(m)] = (
            accuracy >= SUCCESS_ACCURACY, accuracy, run.mass[rows], run.steps, run.converged[rows], run.steps_run[rows]
        )  # fmt: skip
    return out
