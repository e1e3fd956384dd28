"""Supervised learning of the attention parameter: the read-out y_hat = <w, attn_a(K, K)> as a task.

The conjugate location model (z ~ N(0, tau^2 I_d), keys k_l | z ~ N(z, sigma^2 I_d), values v = k) with the
label y = <beta, z> + eps xi, |beta| = 1. As L -> oo attention tends to z + sigma^2 a, and the population
risk of (a, w) is tau^2 |w - beta|^2 + sigma^4 <w, a>^2 + eps^2 (derivations/latent.py). It depends on
(a, w) through five overlaps, and so does its gradient flow: the task's state. Its minimisers form a line,
{w = beta, <w, a> = <a, beta> = 0, |a|^2 free}: at L = oo only the part of a along w costs anything, and
|a|^2 can only decrease along the flow (d|a|^2/dt = -4 sigma^4 <w, a>^2). At finite L the tilt also costs
variance (e^{sigma^2 |a|^2} / L, section 9), so a = 0, uniform attention, is the one minimiser that is
Bayes-optimal at every L: the task's target.

`train_readout` trains (a, w) in R^d by gradient descent on N labelled sequences of finite length L: the
flow is its L, N -> oo, lr -> 0 limit, on the clock t = lr * step.
"""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import NOISE, SCALE, InvalidInput, as_key, at_least, check_choice, check_count
from flowsim._compile import compiled_method
from flowsim._interrupt import ctrl_c_stops, run_interruptibly
from flowsim._memory import Cost, Need, check_work, float_bytes
from flowsim._status import Failure, Status
from flowsim._task import AbstractTask, Parameter
from flowsim.integrate import traced
from flowsim.results import long_table
from flowsim.sgd import (
    LoggedSteps,
    SGDRun,
    check_lengths,
    finish_run,
    logged_needs,
    logged_programs,
    make_run,
    run_logged,
)
from flowsim.tasks.latent import _generated
from flowsim.tasks.latent._attention import softmax_attention

__all__ = [
    "Readout",
    "ReadoutLearning",
    "readout_learning",
    "readout_learning_figure",
    "readout_learning_table",
    "readout_learning_work",
    "readout_overlaps",
    "train_readout",
    "train_readout_work",
]

#: Seconds of gradient descent per (seed x step x sequence x token x dimension), measured on the 2-core CPU of
#: BENCHMARKS.md (section "Estimates before work"), and of compiling one run (with its comparison's flow).
DESCENT_SECONDS = 8.0e-8
COMPILE_SECONDS = 3.0
#: A run whose training risk ends above this many times the risk of predicting 0 has diverged.
DIVERGED = 100.0

PARAMETERS = (
    Parameter("d", int, "dimension d of the latent location", at_least(2), "$d$"),
    Parameter("tau", float, "prior scale tau of the location", SCALE, r"$\tau$"),
    Parameter("sigma", float, "noise sigma of the keys around the location", SCALE, r"$\sigma$"),
    Parameter("eps", float, "standard deviation eps of the label noise", NOISE, r"$\varepsilon$"),
)


def readout_overlaps(w, a, beta) -> jax.Array:
    """The state of (a, w): (|w|^2, <w, beta>, <w, a>, |a|^2, <a, beta>), on the last axis."""
    dot = lambda x, y: jnp.sum(x * y, axis=-1)  # noqa: E731
    return jnp.stack([dot(w, w), dot(w, beta), dot(w, a), dot(a, a), dot(a, beta)], axis=-1)


def _beta(d: int) -> jax.Array:
    return jnp.zeros(d).at[0].set(1.0)


class Readout(AbstractTask):
    """The read-out <w, attn_a> of a latent location's linear functional, at L = oo, as a task (section 9).

    **Arguments:** `d` (>= 2; the state does not depend on it, the initial states and SGD do); `tau`, `sigma`
    (> 0); `eps` (in [0, 1e50], default 0).
    """

    d: int = eqx.field(static=True)
    tau: float = 1.0
    sigma: float = 1.0
    eps: float = 0.0

    state_names: ClassVar = ("w_sq", "w_beta", "w_a", "a_sq", "a_beta")
    parameters: ClassVar = PARAMETERS
    scheduled: ClassVar = None
    initialisations: ClassVar = ("gaussian", "uniform")
    # a -> -a leaves the risk unchanged (it depends on <w, a>^2): <w, a> and <a, beta> flip.
    symmetries: ClassVar = np.array([[1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, -1.0, 1.0, -1.0]])
    targets: ClassVar = np.array([[1.0, 1.0, 0.0, 0.0, 0.0]])
    target_label: ClassVar = "w = beta, a = 0"
    name: ClassVar = "latent-posterior read-out"
    title: ClassVar = "Read-out of attention, L = oo"
    state_labels: ClassVar = {
        "w_sq": r"$|w|^2$",
        "w_beta": r"$\langle w, \beta\rangle$",
        "w_a": r"$\langle w, a\rangle$",
        "a_sq": r"$|a|^2$",
        "a_beta": r"$\langle a, \beta\rangle$",
    }
    panels: ClassVar = ("w_beta", "w_a", "a_sq")
    projection_pairs: ClassVar = (("w_beta", "w_a"), ("w_a", "a_sq"))

    def __check_init__(self):
        for parameter in PARAMETERS:
            parameter.allowed.check(f"Readout.{parameter.name}", getattr(self, parameter.name))

    def _call(self, function, y):
        return function(*jnp.moveaxis(self._as_states(y), -1, 0), self.tau, self.sigma, self.eps)

    @compiled_method
    def vector_field(self, t, y):
        """d/dt of the five overlaps under the gradient flow of (a, w) on the L = oo risk."""
        return self._call(_generated.readout_flow, y)

    @compiled_method
    def risk(self, t, y):
        return self._call(_generated.readout_risk, y)

    def risk_floor(self) -> float:
        return float(self.eps) ** 2

    def initial_vectors(self, key, n: int, kind: str) -> tuple[jax.Array, jax.Array]:
        """n starts (w, a) in R^d: w ~ N(0, I/d); a ~ N(0, I/d) ("gaussian") or a = 0 ("uniform")."""
        check_choice("init", kind, self.initialisations)
        key_w, key_a = jax.random.split(as_key(key))
        w = jax.random.normal(key_w, (n, self.d)) / jnp.sqrt(self.d)
        a = jax.random.normal(key_a, (n, self.d)) / jnp.sqrt(self.d) if kind == "gaussian" else jnp.zeros((n, self.d))
        return w, a

    def initial_states(self, key, n, kind):
        w, a = self.initial_vectors(key, n, kind)
        return readout_overlaps(w, a, _beta(self.d))

    def unrealizable(self, ys, *, atol: float = 1e-10) -> dict[int, str]:
        """States whose overlaps are not those of vectors: the Gram matrix of (w, a, beta) must be PSD."""
        ys = np.asarray(ys, dtype=float)
        bad = super().unrealizable(ys, atol=atol)
        for i, (w_sq, w_beta, w_a, a_sq, a_beta) in enumerate(ys):
            if i in bad:
                continue
            gram = np.array([[w_sq, w_a, w_beta], [w_a, a_sq, a_beta], [w_beta, a_beta, 1.0]])
            if np.linalg.eigvalsh(gram).min() < -max(atol, 1e-9):
                bad[i] = "is not the Gram matrix of (w, a, beta): not positive semi-definite"
        return bad


def train_readout_work(
    task: Readout, L: int, n: int, n_test: int, steps: int, batch: int, log_every: int, seeds: int, names=None
) -> tuple[list, list]:
    """The memory and time `train_readout` needs (`flowsim._memory.check_work`), checked before any work.

    `names`: how the caller's user knows the arguments ({"L", "n", "n_test", "steps", "seeds"}; None: one
    the user cannot change, left out of the advice).
    """
    names = {name: name for name in ("L", "n", "n_test", "steps", "seeds")} | (names or {})

    def lower(*arguments: str) -> str:
        named = [names[argument] for argument in arguments if names[argument]]
        return f"lower {', '.join(named[:-1])} or {named[-1]}" if len(named) > 1 else f"lower {named[0]}"

    needs = [
        Need(  # the keys and the attention's intermediates of their size
            f"the sequences ({seeds} seeds x (n {n} + {n_test} held out) x L {L} x d {task.d})",
            float_bytes(2, seeds, n + n_test, L, task.d),
            lower("n", "n_test", "L", "seeds"),
        ),
        logged_needs(seeds, steps // log_every, 7),
    ]
    costs = [
        Cost(
            f"gradient descent ({seeds} seeds x {steps} steps x batch {batch} x L {L} x d {task.d})",
            DESCENT_SECONDS * seeds * steps * batch * L * task.d,
            lower("steps", "seeds", "n", "L"),
        ),
        Cost(
            f"the logged risks ({seeds} seeds x {steps // log_every + 1} logs x (n {n} + {n_test}) x L {L})",
            DESCENT_SECONDS * seeds * (steps // log_every + 1) * (n + n_test) * L * task.d / 3,
            lower("n_test", "n", "L"),
        ),
        Cost("compiling", COMPILE_SECONDS, "nothing"),
    ]
    return needs, costs


def train_readout(
    task: Readout,
    key,
    *,
    L: int,
    n: int,
    lr: float,
    steps: int,
    init: str = "gaussian",
    batch: int | None = None,
    log_every: int = 1,
    seeds: int = 1,
    n_test: int = 2000,
) -> SGDRun:
    """Train (a, w) in R^d by (mini-batch) gradient descent on n labelled sequences of length L, many seeds at once.

    **Arguments:**

    - `task`: the `Readout` (d, tau, sigma, eps); `key`: a PRNG key or seed (seed i: its start, data, batches).
    - `L`: tokens per sequence; `n`: labelled sequences in the training set.
    - `lr`, `steps`, `log_every`: the step size (the flow's clock is t = lr * step), steps, logging period.
    - `init`: "gaussian" or "uniform" (`Readout.initial_vectors`); `batch`: sequences per step (default n:
      full-batch gradient descent; smaller: epochs over fresh permutations).
    - `seeds`: independent runs; `n_test`: held-out sequences for the test risk.

    **Returns:** an `SGDRun` whose states are the overlaps, with the training and held-out risks at length L
    (`train_risk`, `test_risk`; `risk` is the L = oo risk of the logged overlaps).
    """
    L, n = check_count("L", L, 1), check_count("n", n, 1)
    batch = n if batch is None else batch
    lr, steps, batch, log_every, seeds = check_lengths(lr, steps, batch, log_every, seeds)
    if n % batch:
        raise InvalidInput(f"batch = {batch} must divide n = {n}")
    check_choice("init", init, task.initialisations)
    n_test = check_count("n_test", n_test, 1)
    check_work("train_readout", *train_readout_work(task, L, n, n_test, steps, batch, log_every, seeds))
    config = (init, L, n, n_test, batch)
    shared, keys = (traced(task), jnp.asarray(lr, dtype=float)), jax.random.split(as_key(key), seeds)
    with ctrl_c_stops():
        logged, interrupted = run_interruptibly(
            lambda: run_logged(_TRAINING, shared, keys, config, logs=steps // log_every, log_every=log_every)
        )
    ys, train, test, first_bad, stopped_at = logged
    return finish_run(make_run(task, lr, steps, log_every, ys, first_bad, stopped_at, train, test), interrupted)


def _sequences(task: Readout, key, L: int, n: int):
    """n labelled sequences: keys (n, L, d) around z ~ N(0, tau^2 I), labels <beta, z> + eps xi."""
    key_z, key_k, key_y = jax.random.split(key, 3)
    z = task.tau * jax.random.normal(key_z, (n, task.d))
    keys = z[:, None, :] + task.sigma * jax.random.normal(key_k, (n, L, task.d))
    return keys, z[:, 0] + task.eps * jax.random.normal(key_y, (n,))


def _empirical_risk(w, a, keys, labels):
    return jnp.mean((softmax_attention(a, keys, keys) @ w - labels) ** 2)


def _training_seed(shared, seed_key, config) -> LoggedSteps:
    """One seed's gradient descent on (w, a): its start, training and held-out sequences, steps and logs."""
    task, lr = shared
    init, L, n, n_test, batch = config
    beta = _beta(task.d)
    key_init, key_data, key_test, key_order = jax.random.split(seed_key, 4)
    w, a = (x[0] for x in task.initial_vectors(key_init, 1, init))
    keys, labels = _sequences(task, key_data, L, n)
    test_keys, test_labels = _sequences(task, key_test, L, n_test)

    def step(state, index):
        w, a = state
        rows_keys, rows_labels = keys, labels
        if batch < n:
            per_epoch = n // batch
            order = jax.random.permutation(jax.random.fold_in(key_order, index // per_epoch), n)
            rows = jax.lax.dynamic_slice(order, ((index % per_epoch) * batch,), (batch,))
            rows_keys, rows_labels = keys[rows], labels[rows]
        g_w, g_a = jax.grad(_empirical_risk, (0, 1))(w, a, rows_keys, rows_labels)
        return w - lr * g_w, a - lr * g_a

    def record(state, index):
        w, a = state
        return [
            readout_overlaps(w, a, beta),
            _empirical_risk(w, a, keys, labels),
            _empirical_risk(w, a, test_keys, test_labels),
        ]

    return LoggedSteps((w, a), step, record)


#: The compiled programs of the read-out's training.
_TRAINING = logged_programs(_training_seed, "training")


class ReadoutLearning(eqx.Module):
    """The result of `readout_learning`.

    **Fields:** `Ls`, `ns`; `train_risk`, `test_risk` (at the end of training, median over seeds, (L, n); NaN
    where every seed diverged); `deviation` (from the flow: median over seeds of the largest coordinate
    deviation, (L, n)); `bayes` (the Bayes risk of predicting y from the L keys, eps^2 + sigma^2 tau^2 /
    (sigma^2 + L tau^2), (L,)); `t_end`; `n_test` (held-out sequences per seed); `failed`: the `failures()`.
    """

    Ls: np.ndarray
    ns: np.ndarray
    train_risk: np.ndarray
    test_risk: np.ndarray
    deviation: np.ndarray
    bayes: np.ndarray
    t_end: float
    n_test: int
    failed: tuple = eqx.field(static=True, default=())

    def failures(self) -> list:
        """The seeds that diverged (a non-finite iterate), each reason naming its L and n."""
        return list(self.failed)


def _learning_options(steps: int, options: dict) -> dict:
    return {"log_every": steps // 10 if steps % 10 == 0 else steps, "n_test": 8000} | options


def readout_learning_work(task: Readout, Ls, ns, *, steps: int = 400, seeds: int = 4, names=None, **options):
    """The memory and time `readout_learning` needs (`flowsim._memory.check_work`): every (L, n)'s
    `train_readout_work`, the largest memory of one and the time of all. `names`: as in `train_readout_work`."""
    options = _learning_options(steps, options)
    needs, costs = [], []
    for L in Ls:
        for n in ns:
            work = train_readout_work(
                task, int(L), int(n), options["n_test"], steps, options.get("batch") or int(n), options["log_every"],
                seeds, names,
            )  # fmt: skip
            needs = max(needs, work[0], key=lambda parts: sum(part.nbytes for part in parts))
            costs += work[1]
    return needs, costs


def readout_learning(task: Readout, key, Ls, ns, *, lr: float = 0.05, steps: int = 400, seeds: int = 4, **options):
    """Gradient descent on n sequences of length L for each (L, n): the end risks on the training set and held out,
    and the deviation from the L = oo flow (`flowsim.compare`) on the clock t = lr * step.

    **Arguments:** `task`; `key`; `Ls`, `ns`: the lengths and training-set sizes; `lr`, `steps`, `seeds`;
    `options`: passed to `train_readout` (init, batch, log_every, n_test; default n_test = 8000, so that the
    held-out risk resolves a relative gap of a few percent).

    **Returns:** a `ReadoutLearning`; seeds that diverged are its `failures()`, left out of the medians.
    """
    from flowsim.compare import compare

    key = as_key(key)
    Ls = np.array([check_count("Ls", L, 1) for L in Ls])
    ns = np.array([check_count("ns", n, 1) for n in ns])
    steps, seeds = check_count("steps", steps, 1), check_count("seeds", seeds, 1)
    options = _learning_options(steps, options)
    check_work("readout_learning", *readout_learning_work(task, Ls, ns, steps=steps, seeds=seeds, **options))
    shape = (len(Ls), len(ns))
    train, test, deviation = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    failed, null = [], task.tau**2 + task.eps**2  # the risk of predicting 0
    for i, L in enumerate(Ls):
        for j, n in enumerate(ns):
            run = train_readout(task, key, L=int(L), n=int(n), lr=lr, steps=steps, seeds=seeds, **options)
            for failure in run.failures():
                failed.append(eqx.tree_at(lambda f: f.reason, failure, f"L = {L}, n = {n}: {failure.reason}"))
            # A finite iterate far above the risk of predicting 0 has diverged too (lr too large).
            end = np.asarray(run.train_risk)[:, -1]
            for seed in np.flatnonzero(np.isfinite(end) & (end > DIVERGED * null)):
                reason = f"L = {L}, n = {n}: the training risk {end[seed]:.3g} ended above {DIVERGED:g} x that of 0"
                failed.append(Failure(int(seed), float(lr * steps), Status.DIVERGED, reason, steps))
            finite = (end <= DIVERGED * null) & np.isfinite(np.asarray(run.ys)[:, -1]).all(-1)
            if finite.any():
                train[i, j] = np.median(np.asarray(run.train_risk)[finite, -1])
                test[i, j] = np.median(np.asarray(run.test_risk)[finite, -1])
                deviation[i, j] = np.median(compare(run).deviation.max(axis=1)[finite])
    bayes = task.eps**2 + task.sigma**2 * task.tau**2 / (task.sigma**2 + Ls * task.tau**2)
    return ReadoutLearning(Ls, ns, train, test, deviation, bayes, lr * steps, options["n_test"], tuple(failed))


def readout_learning_table(result: ReadoutLearning) -> dict[str, np.ndarray]:
    """One row per (L, n): the end risks on the training set and held out, the deviation from the flow and the
    Bayes risk from the keys."""
    values = {
        "train_risk": result.train_risk,
        "test_risk": result.test_risk,
        "deviation_from_flow": result.deviation,
        "bayes_risk": result.bayes[:, None],
    }
    return long_table([{"L": result.Ls}, {"n": result.ns}], values)


def readout_learning_figure(result: ReadoutLearning):
    """Three panels: the relative train-test gap against n for each L; the held-out risk against L at each n, with the
    Bayes risk; the deviation from the L = oo flow against L at each n."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(19, 4.8), layout="constrained")
    for i, L in enumerate(result.Ls):
        gap = (result.test_risk[i] - result.train_risk[i]) / result.test_risk[i]
        axes[0].plot(result.ns, gap, "o-", ms=4, label=f"L = {L}")
    # A held-out mean of squared Gaussian residuals has relative standard error sqrt(2 / n_test).
    noise = 2 * np.sqrt(2 / result.n_test)
    axes[0].axhspan(-noise, noise, color="gray", alpha=0.2, label="held-out noise (2 standard errors)")
    axes[0].set(xscale="log", xlabel="training sequences n", ylabel="(test risk - train risk) / test risk")
    axes[0].set_title("The generalisation gap, one curve per L")
    for j, n in enumerate(result.ns):
        axes[1].plot(result.Ls, result.test_risk[:, j], "o-", ms=4, label=f"n = {n}")
        axes[2].plot(result.Ls, result.deviation[:, j], "o-", ms=4, label=f"n = {n}")
    bayes_label = r"Bayes risk from the keys, $\varepsilon^2 + \sigma^2\tau^2/(\sigma^2 + L\tau^2)$"
    axes[1].plot(result.Ls, result.bayes, "k--", label=bayes_label)
    # Diverged runs leave NaN: a panel without a positive value keeps a linear axis (a log one cannot be drawn).
    scale = {name: "log" if np.any(np.isfinite(values) & (values > 0)) else "linear"
             for name, values in (("test", result.test_risk), ("deviation", result.deviation))}  # fmt: skip
    axes[1].set(xscale="log", yscale=scale["test"], xlabel="input length L", ylabel="held-out risk at the end")
    axes[1].set_title(f"The test-risk floor (t = {result.t_end:g})")
    axes[2].set(
        xscale="log", yscale=scale["deviation"], xlabel="input length L", ylabel="largest deviation from the flow"
    )
    axes[2].set_title("Gradient descent against the L = oo flow")
    for ax in axes:
        ax.legend(fontsize=8)
    return fig
