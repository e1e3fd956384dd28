"""What any learner needs, and what one attention head can represent (docs/science.md section 8).

- `information_limit`: log2 C(T, s) labels, the bits needed to name the support.
- `erm_identifiability`: the number of samples at which the target is the unique s-sparse function of its
  kind consistent with the data, per trial (exact, by `identifies`), and its median m_50%.
- `constructed_head`: the head whose scores are R on the support and 0 elsewhere; its attention mass off the
  support is (T - s) / (T - s + s e^R), so a mass <= eps needs R >= `required_score(T, s, eps)`
  = log((T - s)(1 - eps) / (s eps)): the weights grow like log(T / eps).
- `softmax_lipschitz_gap`: ||softmax(a) - softmax(b)||_1 against 2 ||a - b||_inf (the capacity bound's lemma).
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import InvalidInput, as_key, check_count
from flowsim.tasks.sparse._data import SparseTarget, evaluate_target, identifies

__all__ = [
    "constructed_head_predict",
    "constructed_mass_off_support",
    "erm_identifiability",
    "information_limit",
    "required_score",
    "softmax_lipschitz_gap",
]


def information_limit(T: int, s: int) -> float:
    """log2 C(T, s): no learner identifies one of C(T, s) supports from fewer binary labels."""
    T, s = check_count("T", T, 1), check_count("s", s, 1)
    if s > T:
        raise InvalidInput(f"s must be at most T = {T} (an s-sparse function of T bits), got {s}")
    return math.log2(math.comb(T, s))


def erm_identifiability(target: SparseTarget, key, trials: int = 200, max_m: int = 400) -> np.ndarray:
    """For each trial (a support and a stream of samples), the smallest m whose first m samples identify it.

    Identification only improves with more samples, so each trial bisects on m in [1, max_m].

    **Returns:** the m of each trial, shape (trials,); max_m + 1 where max_m samples did not identify it.
    """
    trials, max_m = check_count("trials", trials, 1), check_count("max_m", max_m, 1)
    keys = jax.random.split(as_key(key), trials)
    keys = np.asarray(jax.random.key_data(keys) if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys)
    found = np.empty(trials, int)
    for trial in range(trials):
        # One program per target and max_m draws a trial's support and samples (unbatched: vmapped over the trials,
        # its random draws took seconds more to compile than the trials take to run).
        support, table, x, y = (np.asarray(a) for a in _trial(target, keys[trial], max_m))
        if not identifies(target, x, y, support, table):
            found[trial] = max_m + 1
            continue
        low, high = 0, max_m  # low: not identified (0 samples never do), high: identified
        while high - low > 1:
            middle = (low + high) // 2
            if identifies(target, x[:middle], y[:middle], support, table):
                high = middle
            else:
                low = middle
        found[trial] = high
    return found


@functools.partial(jax.jit, static_argnums=(0, 2))
def _trial(target: SparseTarget, key_data, max_m: int):
    """A trial's support and truth table (from the first half of its key), max_m samples (from the second half) and
    their labels."""
    key_support, key_samples = jax.random.split(jax.random.wrap_key_data(key_data))
    support, table = target.draw_support(key_support)
    x = jax.random.bernoulli(key_samples, target.p, (max_m, target.T))
    return support, table, x, evaluate_target(x, support, table)


def constructed_mass_off_support(T: int, s: int, R) -> float:
    """The attention mass off the support of the head with scores R on it and 0 elsewhere: (T - s) / (T - s + s e^R)."""
    return (T - s) / (T - s + s * math.exp(R))


def required_score(T: int, s: int, eps: float) -> float:
    """The smallest R whose constructed head puts mass <= eps off the support: log((T - s)(1 - eps) / (s eps))."""
    return math.log((T - s) * (1 - eps) / (s * eps))


def constructed_head_predict(x, support, R):
    """The AND of the support read by the constructed head: attention with scores R on the support and 0
    elsewhere over the bits (values: the bits themselves), then a threshold.

    With mass eps off the support, the attended value is >= 1 - eps when every support bit is 1 and
    <= (s - 1)(1 - eps) / s + eps otherwise; the threshold is their midpoint, so the reading is exact whenever
    eps < 1 / (s + 1) and fails often when eps is near 1.

    **Returns:** the predicted labels, shape (...).
    """
    x = jnp.asarray(x, dtype=float)
    T, s = x.shape[-1], len(support)
    scores = jnp.zeros(T).at[jnp.asarray(support)].set(R)
    attended = x @ jax.nn.softmax(scores)
    eps = constructed_mass_off_support(T, s, R)
    threshold = ((1 - eps) + (s - 1) * (1 - eps) / s + eps) / 2
    return attended > threshold


def softmax_lipschitz_gap(a, b):
    """(||softmax(a) - softmax(b)||_1, 2 ||a - b||_inf) along the last axis: the first is never larger."""
    left = jnp.sum(jnp.abs(jax.nn.softmax(a, axis=-1) - jax.nn.softmax(b, axis=-1)), axis=-1)
    return left, 2 * jnp.max(jnp.abs(a - b), axis=-1)
