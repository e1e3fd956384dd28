"""Training many learners at once: full-batch Adam (optax) on the logistic loss, vmapped over models.

Every model of a call has its own initialisation, training set (padded to a common size with a mask, so
that sample sizes m differ within one compiled program) and support; the loss, the attention mass on the
support and the score gap between the support and the rest are logged inside the scan.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int

from flowsim._checks import as_key, check_choice, check_count, check_positive
from flowsim.tasks.sparse._model import AttentionHead, BitsMLP

__all__ = ["LEARNERS", "TrainingRun", "train"]

#: Training-set elements (samples x T) of the models trained side by side (vmapped) at a time.
_GROUP_ELEMENTS = 2**18

#: The learners: one attention head, or the MLP on the flattened bits.
LEARNERS = ("head", "mlp")


class TrainingRun(eqx.Module):
    """What training logged, per model.

    **Fields:** `steps` (logged steps, (logs,)); `loss` (training loss, (models, logs)); `mass` (the head's
    mean attention mass on the support, (models, logs); NaN for the MLP); `gap` (mean over samples of the
    smallest score on the support minus the largest off it, (models, logs); NaN for the MLP);
    `train_accuracy`, `validation_accuracy` ((models,), at the end).
    """

    steps: np.ndarray
    loss: np.ndarray
    mass: np.ndarray
    gap: np.ndarray
    train_accuracy: np.ndarray
    validation_accuracy: np.ndarray


def _new(learner, T, width, hidden, key):
    return AttentionHead(T, width, hidden, key=key) if learner == "head" else BitsMLP(T, hidden, key=key)


def _accuracy(model, x, y, mask):
    correct = (jax.vmap(model)(x) > 0) == y
    return jnp.sum(correct * mask) / jnp.sum(mask)


def _diagnostics(model, x, mask, support):
    """Mean attention mass on the support and mean score gap (support's smallest - the rest's largest)."""
    if not isinstance(model, AttentionHead):
        return jnp.nan, jnp.nan
    on = jnp.zeros(x.shape[-1], bool).at[support].set(True)
    scores = model.scores(x)
    mass = jnp.sum(jax.nn.softmax(scores, axis=-1) * on, axis=-1)
    gap = jnp.min(jnp.where(on, scores, jnp.inf), axis=-1) - jnp.max(jnp.where(on, -jnp.inf, scores), axis=-1)
    weight = mask / jnp.sum(mask)
    return jnp.sum(mass * weight), jnp.sum(gap * weight)


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
    lr: float = 1e-2,
    log_every: int = 100,
    width: int = 16,
    hidden: int = 32,
) -> TrainingRun:
    """Train one model per row of the inputs by full-batch Adam on the logistic loss.

    **Arguments:**

    - `learner`: "head" or "mlp" (`LEARNERS`); `key`: a PRNG key or seed for the initialisations.
    - `x`, `y`, `mask`: each model's training set, padded to a common size (mask 0 on padding).
    - `support`: each model's support (logs the attention mass on it).
    - `x_validation`, `y_validation`: fresh samples for the validation accuracy.
    - `steps`, `lr`, `log_every`: Adam's steps (a multiple of log_every) and step size.
    - `width`, `hidden`: the embedding width and the read-out MLP's width.

    **Returns:** a `TrainingRun`.
    """
    check_choice("learner", learner, LEARNERS)
    steps, log_every = check_count("steps", steps, 1), check_count("log_every", log_every, 1)
    if steps % log_every:
        raise ValueError(f"log_every = {log_every} must divide steps = {steps}")
    lr = check_positive("lr", lr)
    config = (learner, x.shape[-1], width, hidden, steps // log_every, log_every)
    keys = jax.random.split(as_key(key), x.shape[0])
    arrays = [jnp.asarray(a, float) for a in (x, y, mask, x_validation, y_validation)]
    outputs = _train(config, jnp.asarray(lr, float), keys, *arrays, jnp.asarray(support))
    loss, mass, gap, train_accuracy, validation_accuracy = (np.asarray(o) for o in outputs)
    return TrainingRun(np.arange(0, steps + 1, log_every), loss, mass, gap, train_accuracy, validation_accuracy)


@eqx.filter_jit
def _train(config, lr, keys, x, y, mask, x_validation, y_validation, support):
    learner, T, width, hidden, logs, log_every = config
    optimiser = optax.adam(lr)

    def one(key, x, y, mask, x_validation, y_validation, support):
        params, static = eqx.partition(_new(learner, T, width, hidden, key), eqx.is_array)

        def loss(params):
            logits = jax.vmap(eqx.combine(params, static))(x)
            return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, y) * mask) / jnp.sum(mask)

        def step(carry, _):
            params, state = carry
            value, grads = jax.value_and_grad(loss)(params)
            updates, state = optimiser.update(grads, state, params)
            return (optax.apply_updates(params, updates), state), value

        def record(params):
            model = eqx.combine(params, static)
            return (loss(params), *_diagnostics(model, x, mask, support))

        def segment(carry, _):
            carry, _ = jax.lax.scan(step, carry, None, length=log_every)
            return carry, record(carry[0])

        carry = (params, optimiser.init(params))
        first = record(params)
        (params, _), logged = jax.lax.scan(segment, carry, None, length=logs)
        logged = [jnp.concatenate([jnp.atleast_1d(f), l]) for f, l in zip(first, logged, strict=True)]
        model = eqx.combine(params, static)
        ones = jnp.ones(y_validation.shape)
        return (*logged, _accuracy(model, x, y, mask), _accuracy(model, x_validation, y_validation, ones))

    inputs = (keys, x, y, mask, x_validation, y_validation, support)
    # Models in groups of _GROUP_ELEMENTS // (m T) at a time (vmapped within a group, one after the other
    # across groups): vmapping every model at once is memory-bound at large T, slower than one at a time.
    group = max(1, min(x.shape[0], _GROUP_ELEMENTS // (x.shape[1] * x.shape[2])))
    return jax.lax.map(lambda a: one(*a), inputs, batch_size=group)
