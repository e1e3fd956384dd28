"""Training many learners at once: full-batch Adam or AdamW (optax) on the logistic loss, vmapped over models,
for a fixed number of steps or until the training loss has converged; and the l1 control (scikit-learn).

Every model of a call has its own initialisation, training set (padded to a common size with a mask, so
that sample sizes m differ within one compiled program) and support; the loss, the attention mass on the
support and the score gap between the support and the rest are logged inside the loop.

The budget: `steps` Adam steps, or (`until_converged`) until the training loss is at most `loss_threshold`
or has stopped improving (fallen by less than a relative `PLATEAU` over `patience` steps), with `steps`
as the cap. Either way each model reports whether that criterion was met (`converged`) and how many
steps it ran: a run stopped by its cap is reported as such, not silently counted as a statistical failure.

The control (`"l1"`): l1-penalised logistic regression on the bits (scikit-learn's liblinear, run to its
tolerance), with the penalty set by the stated rule lambda = `l1_scale` sqrt(ln T / m) on the mean loss:
the rate of Ng (ICML 2004), chosen from the training set's size only, never from validation samples.
"""

import math
import warnings
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

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
from flowsim.tasks.sparse._model import AttentionHead, BitsMLP, OneLayerTransformer

__all__ = ["DEFAULTS", "LEARNERS", "LOSS_THRESHOLD", "PATIENCE", "PLATEAU", "L1Fit", "TrainingRun", "fit_l1", "train"]

#: Training-set elements (samples x T) of the models trained side by side (vmapped) at a time, by JAX backend. On
#: the CPU, vmapping many models at large T is memory-bound and slower than a few at a time; a GPU's step costs
#: little more for 2^27 elements (a round of 120 models at T = 4096 and m = 272) than for one model, so it trains a
#: round of the search in one program.
_CPU_GROUP_ELEMENTS, _ACCELERATOR_GROUP_ELEMENTS = 2**18, 2**27


def on_accelerator() -> bool:
    """Whether JAX computes on a GPU or TPU (its default backend is not the CPU)."""
    return jax.default_backend() != "cpu"


def group_elements() -> int:
    """Training-set elements (samples x T) of the models one compiled call trains side by side, on this backend."""
    return _ACCELERATOR_GROUP_ELEMENTS if on_accelerator() else _CPU_GROUP_ELEMENTS


#: The learners: one attention head, the MLP on the flattened bits, the paper's one-layer Transformer, and the
#: positive control (l1-penalised logistic regression on the bits).
LEARNERS = ("head", "mlp", "transformer", "l1")

#: Each learner's defaults: optimiser step size, weight decay (AdamW when > 0) and sizes. The Transformer's are
#: the protocol of docs/science.md section 8 (AdamW, lr 1e-3, weight decay 1e-4; width 64, 16 heads, MLP 64).
DEFAULTS = {
    "head": {"lr": 1e-2, "weight_decay": 0.0, "width": 16, "hidden": 32},
    "mlp": {"lr": 1e-2, "weight_decay": 0.0, "hidden": 32},
    "transformer": {"lr": 1e-3, "weight_decay": 1e-4, "width": 64, "hidden": 64, "heads": 16},
    "l1": {"l1_scale": 0.01},
}
#: Training has converged when its mean training loss is at most this ...
LOSS_THRESHOLD = 1e-6
#: ... or when it fell by less than this share of itself over the last `patience` steps (`PATIENCE` by default).
PLATEAU = 1e-3
PATIENCE = 1000
#: The l1 control's solver: liblinear's tolerance and iteration cap.
_L1_TOLERANCE, _L1_MAX_ITER = 1e-6, 10_000


class TrainingRun(eqx.Module):
    """What training logged, per model.

    **Fields:** `steps` (logged steps, (logs,)); `loss` (training loss, (models, logs); NaN after a model
    stopped); `mass` (the attention mass on the support, mean over samples, (models, logs); the Transformer's
    in its best head; NaN for the MLP and the control); `gap` (mean over samples of the smallest score on the
    support minus the largest off it, (models, logs); the Transformer's in the head of largest mass);
    `train_accuracy`, `validation_accuracy` ((models,), at the end); `steps_run` ((models,): optimiser steps
    run, the control's solver iterations); `converged` ((models,): the loss reached `loss_threshold` or
    stopped improving; the control's solver met its tolerance).
    """

    steps: np.ndarray
    loss: np.ndarray
    mass: np.ndarray
    gap: np.ndarray
    train_accuracy: np.ndarray
    validation_accuracy: np.ndarray
    steps_run: np.ndarray
    converged: np.ndarray


def _new(learner, T, options, key):
    if learner == "head":
        return AttentionHead(T, options["width"], options["hidden"], key=key)
    if learner == "transformer":
        return OneLayerTransformer(T, options["width"], options["heads"], options["hidden"], key=key)
    return BitsMLP(T, options["hidden"], key=key)


def _accuracy(model, x, y, mask):
    correct = (model.logits(x) > 0) == y
    return jnp.sum(correct * mask) / jnp.sum(mask)


def _diagnostics(model, x, mask, support):
    """Mean attention mass on the support and mean score gap (support's smallest - the rest's largest); for the
    Transformer, in its head of largest mean mass.

    From the shared scores of the (bit, position) tokens, as `logits` computes its sums: the normaliser is a product
    of the bits with the tokens' weights and the mass needs the s support tokens' weights alone, so no (samples,
    heads, T) attention is formed (at T = 4096 and 120 models of 272 samples it was 16 GiB of a GPU's memory).
    """
    if isinstance(model, BitsMLP):
        return jnp.nan, jnp.nan
    on_cls, tokens = model.token_scores()  # (heads,), (2, heads, T)
    shift = jax.lax.stop_gradient(jnp.maximum(on_cls, jnp.max(tokens, axis=(0, 2))))  # (heads,): nothing overflows
    weights = jnp.exp(tokens - shift[:, None])
    normaliser = jnp.exp(on_cls - shift) + (1 - x) @ weights[0].T + x @ weights[1].T  # (samples, heads)
    bits = x[:, None, :]
    on_support = tokens[0][:, support] + bits[..., support] * (tokens[1][:, support] - tokens[0][:, support])
    mass = jnp.sum(jnp.exp(on_support - shift[:, None]), axis=-1) / normaliser
    off = jnp.ones(x.shape[-1], bool).at[support].set(False)
    largest_off = jnp.max(jnp.where(off, tokens[0] + bits * (tokens[1] - tokens[0]), -jnp.inf), axis=-1)
    gap = jnp.min(on_support, axis=-1) - largest_off
    weight = mask / jnp.sum(mask)
    mass, gap = weight @ mass, weight @ gap  # (heads,)
    best = jnp.argmax(mass)  # the Transformer's best head (the head: its only one)
    return mass[best], gap[best]


def train(
    learner: str,
    key,
    x: Float[Array, "models m T"],
    y: Float[Array, "models m"],
    mask: Float[Array, "models m"],
    support: Int[Array, "models s"],
    x_validation: Float[Array, "models n T"],
    y_validation: Float[Array, "models n"],
    *,
    steps: int = 1000,
    until_converged: bool = False,
    loss_threshold: float = LOSS_THRESHOLD,
    patience: int = PATIENCE,
    log_every: int = 100,
    group: int | None = None,
    **options,
) -> TrainingRun:
    """Train one model per row of the inputs on the logistic loss (full batch).

    **Arguments:**

    - `learner`: one of `LEARNERS`; `key`: a PRNG key or seed for the initialisations.
    - `x`, `y`, `mask`: each model's training set, padded to a common size (mask 0 on padding).
    - `support`: each model's support (logs the attention mass on it).
    - `x_validation`, `y_validation`: fresh samples for the validation accuracy.
    - `steps`: optimiser steps (a multiple of `log_every`); with `until_converged`, the cap.
    - `until_converged`: stop a model once its training loss is <= `loss_threshold` or fell by less than a
      relative `PLATEAU` over `patience` steps (a multiple of `log_every`).
    - `group`: models trained side by side (vmapped) by one compiled program, in calls of at most `CHECK_STEPS`
      steps (a Ctrl-C is raised between two), the groups one after another (the last padded); default: as many
      as hold `group_elements()` training-set elements (2^18 on the CPU, 2^27 on a GPU). On the CPU each group's
      training sets are cut to its largest (rounded up to a quarter power of two); fixing `group` across calls
      (as `critical_sample_size` does) lets the rounds of a search share their compiled programs.
    - `options`: the learner's settings, defaults in `DEFAULTS[learner]`: `lr`, `weight_decay` (AdamW when
      > 0, else Adam), `width`, `hidden`, `heads`; the control's `l1_scale` (lambda = l1_scale sqrt(ln T / m)).

    **Returns:** a `TrainingRun`.
    """
    check_choice("learner", learner, LEARNERS)
    unknown = set(options) - set(DEFAULTS[learner])
    if unknown:
        raise InvalidInput(f"options of the {learner} learner are {sorted(DEFAULTS[learner])}, got {sorted(unknown)}")
    options = DEFAULTS[learner] | options
    if learner == "l1":
        return _train_l1(x, y, mask, x_validation, y_validation, check_positive("l1_scale", options["l1_scale"]))
    steps, log_every = check_count("steps", steps, 1), check_count("log_every", log_every, 1)
    patience = check_count("patience", patience, 1)
    for name, value in (("steps", steps), ("patience", patience))[: 2 if until_converged else 1]:
        if value % log_every:
            raise InvalidInput(f"log_every = {log_every} must divide {name} = {value}")
    lr, threshold = check_positive("lr", options["lr"]), check_positive("loss_threshold", loss_threshold)
    if not options["weight_decay"] >= 0:
        raise InvalidInput(f"weight_decay must be a number >= 0, got {options['weight_decay']}")
    sizes = tuple(sorted((k, v) for k, v in options.items() if k not in ("lr", "weight_decay")))
    # A fixed budget reports the same criterion, checked over the whole segments nearest to `patience` steps.
    window = max(1, round(patience / log_every))
    config = (learner, x.shape[-1], sizes, steps // log_every, log_every)
    models = x.shape[0]
    default = max(1, min(models, group_elements() // (x.shape[1] * x.shape[2])))
    group = default if group is None else check_count("group", group, 1)
    initial = _initial(learner, x.shape[-1], sizes, jax.random.split(as_key(key), models))
    # The budget's criterion and patience are traced: the budgets of a sweep share a program when their steps agree.
    hyper = jnp.asarray([lr, options["weight_decay"], threshold], float)
    criterion = (jnp.asarray(bool(until_converged)), jnp.asarray(window))
    # Bits may come as booleans (8 times less memory than floats: at T = 4096 a round's validation samples
    # are gigabytes as float64); each group is made floats when it is trained.
    inputs = [np.asarray(a) for a in (x, y, mask, x_validation, y_validation, support)]
    padded = -models % group  # the last group is filled with copies of the last model, dropped after
    if padded:
        inputs = [np.concatenate([a, np.repeat(a[-1:], padded, axis=0)]) for a in inputs]
        initial = jax.tree.map(lambda a: np.concatenate([a, np.repeat(a[-1:], padded, axis=0)]), initial)
    kinds = (float, float, float, float, float, None)

    def rows(start):
        # On the CPU, each of several groups' training sets cut to its largest, rounded up to a quarter power of two:
        # a smaller m costs less, and few distinct lengths (programs to compile) serve every group of a search. On a
        # GPU, or in one group, one length, x's: the padded samples cost less than compiling a program per length.
        largest = int(np.max(np.sum(inputs[2][start : start + group] > 0, axis=1)))
        whole = on_accelerator() or group >= models
        length = x.shape[1] if whole else min(x.shape[1], _bucket(largest))
        cut = [a[start : start + group, :length] if i < 3 else a[start : start + group] for i, a in enumerate(inputs)]
        arrays = (jnp.asarray(a, kind) for a, kind in zip(cut, kinds, strict=True))
        return jax.tree.map(lambda a: jnp.asarray(a[start : start + group]), initial), *arrays

    starts = range(0, models + padded, group)
    outputs = [_train_group(config, hyper, criterion, *rows(start)) for start in starts]
    loss, mass, gap, train_accuracy, validation_accuracy, segments, converged = (
        np.concatenate([np.asarray(o[i]) for o in outputs])[:models] for i in range(7)
    )
    return TrainingRun(
        np.arange(0, steps + 1, log_every), loss, mass, gap, train_accuracy, validation_accuracy,
        segments * log_every, converged,
    )  # fmt: skip


def _bucket(n: int) -> int:
    """The smallest ceil(2^(k/4)) >= n (k an integer): lengths at most 19 % above n, four per doubling."""
    return math.ceil(2 ** (math.ceil(4 * math.log2(max(n, 1)) - 1e-9) / 4))


@eqx.filter_jit
def _initial_one(config, key_data):
    """One model's initial parameters (its arrays; `_static` holds the rest)."""
    learner, T, sizes = config
    return eqx.filter(_new(learner, T, dict(sizes), jax.random.wrap_key_data(key_data)), eqx.is_array)


def _initial(learner, T, sizes, keys):
    """The initial parameters of one model per key, stacked (leading axis: the models), as NumPy arrays.

    Drawn one model at a time by a program compiled once per learner and T, outside `_train`: vmapped inside
    it, the initialisations' random draws (float64 normals and uniforms) were most of its compilation, paid
    again for every budget, group size and padding of the same learner and T. The draws are the same.
    """
    params = [_initial_one((learner, T, sizes), row) for row in np.asarray(jax.random.key_data(keys))]
    return jax.tree.map(lambda *leaves: np.stack([np.asarray(leaf) for leaf in leaves]), *params)


def _static(learner, T, sizes):
    """The non-array part of a model (its structure and functions), from its shapes alone."""
    shapes = eqx.filter_eval_shape(_new, learner, T, dict(sizes), jax.random.key(0))
    return eqx.partition(shapes, lambda leaf: isinstance(leaf, jax.ShapeDtypeStruct))[1]


def _optimiser(learner: str, hyper):
    """Full-batch AdamW for the Transformer (its protocol), Adam for the others."""
    lr, weight_decay, _ = hyper
    return optax.adamw(lr, weight_decay=weight_decay) if learner == "transformer" else optax.adam(lr)


def _train_group(config, hyper, criterion, initial, *data):
    """One group of models, vmapped, from their initial parameters, in compiled calls of at most `CHECK_STEPS`
    steps each (whole logging blocks), one after another: Python raises a Ctrl-C between two (a call releases the
    interpreter only when it returns), so a group of runs to convergence (up to 16 000 steps, minutes on a GPU) is
    stopped within a call's steps, not at its end. Stops early once every model has stopped (`until_converged`).

    **Returns:** the per-model arrays of `TrainingRun` in `_train`'s order.
    """
    logs, log_every = config[3], config[4]
    until_converged, models = bool(criterion[0]), len(data[0])
    state = jax.vmap(_optimiser(config[0], hyper).init)(initial)
    logged = jnp.full((models, logs + 1, 3), jnp.nan)
    carry = (initial, state, logged, jnp.zeros(models, int), jnp.zeros(models, bool))
    chunk, until = max(1, CHECK_STEPS // log_every), 0
    while True:
        fresh, until = until == 0, min(logs, until + chunk)
        stopping = until_converged and until < logs and bool(np.all(np.asarray(carry[4])))
        until = logs if stopping else until  # every model has stopped: the last call only computes the accuracies
        flags = (jnp.asarray(until), jnp.asarray(fresh), jnp.asarray(until == logs))
        carry, accuracies = _train(config, hyper, criterion, carry, flags, *data)
        jax.block_until_ready(carry)  # one call at a time: a Ctrl-C is raised before the next
        if until == logs:
            _, _, logged, segments, converged = carry
            return (*jnp.moveaxis(logged, -1, 0), *accuracies, segments, converged)


#: Optimiser steps of one compiled call of a group's training (`_train_group`): the latency of a Ctrl-C against
#: the overhead of a call (a fraction of a millisecond).
CHECK_STEPS = 100


@eqx.filter_jit
def _train(config, hyper, criterion, carry, flags, x, y, mask, x_validation, y_validation, support):
    """One call of a group's training, vmapped over its models: from the carry (parameters, optimiser state, logs,
    segment, stopped), the logging blocks up to segment `until`, or until each model stops; on the first call
    (`fresh`) the log at step 0, on the last (`last`) the training and validation accuracies (else NaN)."""
    learner, T, sizes, _, log_every = config
    _, _, threshold = hyper
    until_converged, patience = criterion
    until, fresh, last = flags
    optimiser = _optimiser(learner, hyper)
    static = _static(learner, T, sizes)

    def one(carry, x, y, mask, x_validation, y_validation, support):
        def loss(params):
            logits = eqx.combine(params, static).logits(x)
            return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, y) * mask) / jnp.sum(mask)

        def step(carry, _):
            params, state = carry
            grads = jax.grad(loss)(params)
            updates, state = optimiser.update(grads, state, params)
            return (optax.apply_updates(params, updates), state), None

        def record(params):
            return jnp.stack([loss(params), *_diagnostics(eqx.combine(params, static), x, mask, support)])

        def running(carry):
            *_, segment, stop = carry
            return (segment < until) & ~(stop & until_converged)

        def segment(carry):
            params, state, logged, segment, stop = carry
            (params, state), _ = jax.lax.scan(step, (params, state), None, length=log_every)
            logged = logged.at[segment + 1].set(record(params))
            now, before = logged[segment + 1, 0], logged[jnp.maximum(segment + 1 - patience, 0), 0]
            stalled = (segment + 1 >= patience) & (now > (1 - PLATEAU) * before)
            return params, state, logged, segment + 1, stop | (now <= threshold) | stalled

        params, state, logged, segment_, stop = carry
        logged = jax.lax.cond(fresh, lambda: logged.at[0].set(record(params)), lambda: logged)
        carry = jax.lax.while_loop(running, segment, (params, state, logged, segment_, stop))

        def accuracies(params):
            model = eqx.combine(params, static)
            ones = jnp.ones(y_validation.shape)
            return _accuracy(model, x, y, mask), _accuracy(model, x_validation, y_validation, ones)

        nan = jnp.asarray(jnp.nan, float)
        return carry, jax.lax.cond(last, accuracies, lambda _: (nan, nan), carry[0])

    return jax.vmap(one)(carry, x, y, mask, x_validation, y_validation, support)


class L1Fit(NamedTuple):
    """An l1-penalised logistic regression: `weights` (T,), `intercept`, the solver's `iterations`, whether it
    met its tolerance (`converged`), and the penalty `lam` (on the mean loss)."""

    weights: np.ndarray
    intercept: float
    iterations: int
    converged: bool
    lam: float

    def logits(self, x) -> np.ndarray:
        return np.asarray(x, float) @ self.weights + self.intercept


def fit_l1(x, y, *, l1_scale: float = DEFAULTS["l1"]["l1_scale"]) -> L1Fit:
    """The positive control: l1-penalised logistic regression of the labels on the bits, by scikit-learn's
    liblinear solver to a tolerance of 1e-6, with the penalty lambda = l1_scale sqrt(ln T / m) on the mean
    loss (scikit-learn's C = 1 / (lambda m)): the rate of Ng (ICML 2004), set by the training set's shape
    only. A training set of one class gets the constant predictor of that class.

    **Arguments:** `x` (m >= 1 samples of T >= 2 bits, finite), `y` (their labels, 0 or 1), `l1_scale` > 0.

    **Returns:** an `L1Fit`.
    """
    x = np.asarray(check_entries("x", x), float)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 2:
        raise wrong_shape("x", "(m, T) with m >= 1 samples and T >= 2 bits", x.shape)
    y = np.asarray(check_entries("y", y, "labels 0 or 1", zeros_and_ones), float)
    if y.shape != x.shape[:1]:
        raise wrong_shape("y", f"(m,) = {x.shape[:1]}, one label per row of x", y.shape)
    (m, T), l1_scale = x.shape, check_positive("l1_scale", l1_scale)
    from sklearn.exceptions import ConvergenceWarning  # after the checks: a refusal needs no scikit-learn
    from sklearn.linear_model import LogisticRegression

    lam = l1_scale * math.sqrt(math.log(T) / m)
    if len(np.unique(y)) < 2:
        return L1Fit(np.zeros(T), 30.0 * (2 * y[0] - 1), 0, True, lam)
    # random_state: liblinear visits the coordinates in a random order; fixed, the same data give the same fit
    # (same seed, same result: a resumed sweep equals an uninterrupted one bit for bit).
    solver = LogisticRegression(C=1.0 / (lam * m), l1_ratio=1.0, solver="liblinear", tol=_L1_TOLERANCE,
                                max_iter=_L1_MAX_ITER, random_state=0)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        solver.fit(x, y)
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return L1Fit(solver.coef_[0], float(solver.intercept_[0]), int(np.max(solver.n_iter_)), converged, lam)


def _train_l1(x, y, mask, x_validation, y_validation, l1_scale) -> TrainingRun:
    """`fit_l1` on each model's training set; one log (its final training loss)."""
    y, mask, models = np.asarray(y, float), np.asarray(mask) > 0, len(x)
    loss, train_accuracy, validation_accuracy = np.empty((models, 1)), np.empty(models), np.empty(models)
    iterations, converged = np.empty(models, int), np.empty(models, bool)
    for i in range(models):
        xi, yi = np.asarray(x[i], float)[mask[i]], y[i][mask[i]]
        fit = fit_l1(xi, yi, l1_scale=l1_scale)
        logits = fit.logits(xi)
        loss[i, 0] = np.mean(np.logaddexp(0.0, logits) - yi * logits)
        train_accuracy[i] = np.mean((logits > 0) == yi)
        validation_accuracy[i] = np.mean((fit.logits(x_validation[i]) > 0) == np.asarray(y_validation[i]))
        iterations[i], converged[i] = fit.iterations, fit.converged
    nan = np.full((models, 1), np.nan)
    return TrainingRun(np.array([0]), loss, nan, nan, train_accuracy, validation_accuracy, iterations, converged)
