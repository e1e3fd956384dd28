"""The task interface: what the engine needs to know of a model, and nothing more.

A task is an immutable pytree (`eqx.Module`) holding its parameters. Its state is a point of a
small space of order parameters (the five overlaps for single-location regression) whose
coordinates are named by `state_names`. The engine (integration, maps, fixed points, SGD,
compare, verify, experiments, figures) calls only the methods below, in the spirit of
diffrax's `AbstractTerm`: it knows no task.

One parameter, named by `scheduled`, may hold a schedule (`flowsim.schedules`) instead of a
number; `at(t)` gives the task with that parameter evaluated at time t. The schedule is part of
the task: it travels from the caller to the vector field in this one object.
"""

import abc
from dataclasses import dataclass
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from flowsim._checks import POSITIVE, Allowed, InvalidInput
from flowsim._compile import compiled_method
from flowsim.schedules import AbstractSchedule, Constant

__all__ = [
    "AbstractTask",
    "Parameter",
    "canonical",
    "check_states",
    "distance_to_targets",
    "distance_up_to_symmetry",
    "images",
    "max_abs",
    "show_state",
    "symmetry_text",
    "task_jacobian",
    "task_risk",
    "task_vector_field",
]


@dataclass(frozen=True)
class Parameter:
    """A parameter of a task: its name, type, meaning and allowed values (shared by errors and the CLI).

    **Fields:** `name`; `kind` (int or float); `meaning` (a phrase for --help); `allowed` (an `Allowed`).
    `symbol`: how figure titles write it in mathtext (None: left out of titles).
    """

    name: str
    kind: type
    meaning: str
    allowed: Allowed
    symbol: str | None = None


class AbstractTask(eqx.Module):
    """A model whose training dynamics closes on a finite-dimensional state.

    **Class attributes a task defines:**

    - `state_names`: the names of the state's coordinates, in order.
    - `parameters`: its `Parameter`s, with their allowed values.
    - `scheduled`: the name of the parameter a schedule may drive (None if none).
    - `initialisations`: the names of the laws of initial states (`initial_states`).
    - `symmetries`: the symmetry group of the state as sign flips of its coordinates, shape
      (group, n), the identity first: states y and s * y have the same risk and dynamics.
    - `targets`: the global minimisers the convergence claims are about, shape (targets, n)
      (their images under the symmetries are targets too).
    - `target_label`: how reports name them (e.g. "+-(k*, v*)").

    **Methods a task defines:** `vector_field`, `risk`, `initial_states`; optionally `jacobian`
    (default: forward-mode autodiff of the field), `discrete_map` (the exact step of gradient
    descent, if the state closes under it), `unrealizable`, `approaching`, `restriction`,
    `sgd_step`, `sgd_noise`.
    """

    state_names: eqx.AbstractClassVar[tuple[str, ...]]
    parameters: eqx.AbstractClassVar[tuple[Parameter, ...]]
    scheduled: eqx.AbstractClassVar[str | None]
    initialisations: eqx.AbstractClassVar[tuple[str, ...]]
    symmetries: eqx.AbstractClassVar[np.ndarray]
    targets: eqx.AbstractClassVar[np.ndarray]
    target_label: eqx.AbstractClassVar[str]
    #: What `approaching` tests, in words (for reports).
    approach_text: ClassVar[str] = "none (no end point counts as approaching)"
    #: The distances to a target (max norm) that count an end point as reached (`verify_convergence`'s tol, checked
    #: before any flow), and that `approaching` takes.
    tolerance: ClassVar[Allowed] = POSITIVE
    #: What the task is, in words (for printed reports), and a title for figures (mathtext).
    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    #: Axis labels (mathtext) and short symbols of the coordinates, by name (default: the names).
    state_labels: ClassVar[dict[str, str]] = {}
    state_symbols: ClassVar[dict[str, str]] = {}
    #: Scalar functions of states (..., n) -> (...) worth drawing against time: name -> (label, function, scale).
    observables: ClassVar[dict] = {}
    #: What SGD figures draw against time: coordinates or observables, by name.
    panels: ClassVar[tuple[str, ...]] = ()
    #: The planes trajectory projections are drawn in, by coordinate names.
    projection_pairs: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The box a planar state lives in, ((low, high), (low, high)), for portraits and lattices.
    bounds: ClassVar[tuple[tuple[float, float], tuple[float, float]]] = ((-1.0, 1.0), (-1.0, 1.0))

    # --- the dynamics -------------------------------------------------------------------------

    @abc.abstractmethod
    def vector_field(self, t, y: Float[Array, " n"]) -> Float[Array, " n"]:
        """d/dt of the state under the gradient flow at time t."""

    @abc.abstractmethod
    def risk(self, t, y: Float[Array, " n"]) -> Float[Array, ""]:
        """The population risk at state y (and the scheduled parameter at time t)."""

    @compiled_method
    def jacobian(self, t, y: Float[Array, " n"]) -> Float[Array, "n n"]:
        """The Jacobian of `vector_field` in y, [i, j] = d field_i / d y_j."""
        return jax.jacfwd(lambda x: self.vector_field(t, x))(y)

    def discrete_map(self, t, y: Float[Array, " n"], alpha) -> Float[Array, " n"]:
        """The state after one step of size alpha of the discrete algorithm the flow is the limit of.

        **Raises:** NotImplementedError for a task without an exact map on its state.
        """
        raise NotImplementedError(f"{type(self).__name__} has no exact discrete map on its state")

    def risk_floor(self) -> float:
        """The irreducible part of the risk (label noise), subtracted in "excess risk" (default 0)."""
        return 0.0

    def flow_max_steps(self) -> int:
        """The default step budget of a solve of the flow (a stiff task needs more)."""
        return 100_000

    def flow_solver(self) -> dict:
        """Default solver options of a solve of the flow (`solve_flow`), which the caller's override.

        Default: none (the engine's Tsit5 at its tight tolerances). A task whose field is approximate or
        costly (an expectation by a rule, say) may name an implicit solver and tolerances matched to it.
        """
        return {}

    # --- the state space ----------------------------------------------------------------------

    @abc.abstractmethod
    def initial_states(self, key: PRNGKeyArray, n: int, kind: str) -> Float[Array, "n n_state"]:
        """n initial states drawn from the law named `kind` (one of `initialisations`)."""

    def unrealizable(self, ys: np.ndarray, *, atol: float = 1e-10) -> dict[int, str]:
        """Which rows of ys (shape (batch, n)) are not states of the task (to `atol`), and why.

        The default accepts every finite row; a task with constraints (realizable overlaps) says more.
        """
        ys = np.asarray(ys, dtype=float)
        return {int(i): "has a non-finite entry" for i in np.flatnonzero(~np.isfinite(ys).all(axis=-1))}

    def approaching(self, ys: np.ndarray, velocity: np.ndarray, tol: float, t: float = 0.0) -> np.ndarray:
        """Which end points, not yet within tol of a target, are shown to be on their way to one (default: none).

        **Arguments:** `ys`, end points (n, dimension); `velocity`, the field there (n, dimension); `tol`, the
        distance counted as reached; `t`, the time at which the field is frozen (a schedule's end).

        **Returns:** (n,) bool. A task says in `approach_text` how it shows it: by proof, or by a stated check.
        """
        return np.zeros(len(ys), bool)

    def lift(self, ys) -> np.ndarray:
        """For a restriction: its states (..., 2) as states of the full task (default: unchanged)."""
        return np.asarray(ys, dtype=float)

    def restriction(self) -> "AbstractTask":
        """The flow restricted to an invariant plane, as a task with a 2-D state (for phase portraits).

        **Raises:** NotImplementedError for a task without one.
        """
        raise NotImplementedError(f"{type(self).__name__} has no planar invariant restriction")

    # --- finite-sample SGD on the state -------------------------------------------------------

    def sgd_noise(self, key: PRNGKeyArray, batch: int):
        """The random numbers of one SGD step on a fresh mini-batch of `batch` samples (a pytree).

        **Raises:** NotImplementedError for a task without an SGD chain on its state.
        """
        raise NotImplementedError(f"{type(self).__name__} has no SGD chain on its state")

    def sgd_step(self, t, y: Float[Array, " n"], lr, noise, batch: int) -> Float[Array, " n"]:
        """The state after one SGD step of size lr at time t = lr * step, from `sgd_noise`'s numbers."""
        raise NotImplementedError(f"{type(self).__name__} has no SGD chain on its state")

    # --- the scheduled parameter --------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """The number of state coordinates."""
        return len(self.state_names)

    def _as_states(self, y) -> Array:
        """y as an array of states, its last axis the `dimension` state coordinates (checked: a shape is static).
        Its floating type is kept (float32 runs stay float32); integers become floats."""
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(float)
        if y.ndim == 0 or y.shape[-1] != self.dimension:
            raise InvalidInput(
                f"y must hold the {self.dimension} state values ({', '.join(self.state_names)}) on its last axis, "
                f"got shape {y.shape}"
            )
        return y

    @property
    def autonomous(self) -> bool:
        """Whether the flow does not depend on time: no scheduled parameter, or a fixed value in it."""
        return self.scheduled is None or not isinstance(getattr(self, self.scheduled), AbstractSchedule)

    def schedule(self) -> AbstractSchedule:
        """The scheduled parameter as a schedule (a fixed number as a `Constant`)."""
        if self.scheduled is None:
            raise InvalidInput(f"{type(self).__name__} has no scheduled parameter")
        value = getattr(self, self.scheduled)
        return value if isinstance(value, AbstractSchedule) else Constant(value)

    def at(self, t) -> "AbstractTask":
        """The task with its scheduled parameter evaluated at time t (itself if it has none)."""
        if self.autonomous:
            return self
        value = getattr(self, self.scheduled)(t)
        return eqx.tree_at(lambda task: getattr(task, self.scheduled), self, value)

    def with_schedule(self, schedule) -> "AbstractTask":
        """The same task with its scheduled parameter replaced by `schedule` (a schedule or a number)."""
        if self.scheduled is None:
            raise InvalidInput(f"{type(self).__name__} has no parameter a schedule can drive")
        return type(self)(**{**_fields(self), self.scheduled: schedule})

    def describe(self, *, math_text: bool = False) -> str:
        """The parameters as "name = value" pairs (a schedule by its value at t = 0 in mathtext, else its
        formula); with `math_text`, only those with a symbol, written with it (for figure titles)."""
        parts = []
        for parameter in self.parameters:
            if math_text and parameter.symbol is None:
                continue
            value = getattr(self, parameter.name)
            if isinstance(value, AbstractSchedule):
                shown = f"{float(value.initial):g}" if math_text else value.describe()
            else:
                shown = f"{float(value):g}"
            parts.append(f"{parameter.symbol if math_text else parameter.name} = {shown}")
        return ", ".join(parts)


def _fields(task) -> dict:
    import dataclasses

    return {field.name: getattr(task, field.name) for field in dataclasses.fields(task) if field.init}


# --- a task's methods as functions f(t, y, task), the form `integrate` and `evaluate` take ----


@eqx.filter_custom_jvp
def task_vector_field(t, y, task: AbstractTask):
    """`task.vector_field(t, y)`, with the task as the argument the engine's solvers pass along.

    Its derivative in y is the task's own `jacobian` (a generated closed form, for a task that has
    one), so that implicit solvers, which take the field's JVPs at every step, never trace the
    derivative of the field's thousands of operations; derivatives in t and in the task's
    parameters, where asked for, go through autodiff.
    """
    return task.vector_field(t, y)


@task_vector_field.def_jvp
def _task_vector_field_jvp(primals, tangents):
    t, y, task = primals
    t_dot, y_dot, task_dot = tangents
    value = task.vector_field(t, y)
    tangent = jnp.zeros_like(value)
    if y_dot is not None:
        tangent = tangent + task.jacobian(t, y) @ y_dot
    t_dot = None if task.autonomous else t_dot
    if t_dot is not None or jax.tree.leaves(task_dot):
        # Only the differentiated parts are traced (the field of an autonomous task has no t-derivative).
        asked = jax.tree.map(lambda dot: dot is not None, task_dot, is_leaf=lambda x: x is None)
        dynamic, static = eqx.partition(task, asked)
        t_dot = jnp.zeros_like(t) if t_dot is None else t_dot
        _, other = jax.jvp(
            lambda s, part: eqx.combine(part, static).vector_field(s, y), (t, dynamic), (t_dot, task_dot)
        )
        tangent = tangent + other
    return value, tangent


def task_risk(t, y, task: AbstractTask):
    """`task.risk(t, y)`, in the (t, y, args) form."""
    return task.risk(t, y)


def task_jacobian(t, y, task: AbstractTask):
    """`task.jacobian(t, y)`, in the (t, y, args) form."""
    return task.jacobian(t, y)


# --- the symmetry group, used by the engine wherever states are compared ----------------------


def images(task: AbstractTask, ys) -> np.ndarray:
    """Every image of ys (shape (..., n)) under the task's symmetries, shape (group, ..., n)."""
    signs = np.asarray(task.symmetries, dtype=float)
    ys = np.asarray(ys, dtype=float)
    return signs.reshape((len(signs),) + (1,) * (ys.ndim - 1) + (signs.shape[-1],)) * ys


def max_abs(a, b, axis: int = -1) -> np.ndarray:
    """max |a - b| along an axis; inf where any compared value is not finite (a diverged side is unboundedly far)."""
    difference = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    return np.where(np.isfinite(difference).all(axis=axis), difference.max(axis=axis, initial=0.0), np.inf)


def distance_up_to_symmetry(task: AbstractTask, a, b) -> np.ndarray:
    """Max-norm distance between states a and b (..., n): the nearest image of b; inf if not finite.

    Not a canonical representative on both sides: near a state with a zero coordinate the sign
    of a noisy coordinate would decide, and map one point but not the other.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    # b broadcast to the common shape first: its images gain a leading axis, which must not meet a's leading axes.
    b = np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape))
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    mirrored = images(task, b)
    # The group axis first, then b's axes aligned on the right with a's.
    mirrored = mirrored.reshape((len(mirrored),) + (1,) * max(a.ndim - b.ndim, 0) + b.shape)
    return np.min(max_abs(a, mirrored), axis=0)


def distance_to_targets(task: AbstractTask, ys) -> np.ndarray:
    """Max-norm distance of states (..., n) to the nearest target, up to the symmetries."""
    ys = np.asarray(ys, dtype=float)
    targets = np.asarray(task.targets, dtype=float)
    return np.min([distance_up_to_symmetry(task, ys, target) for target in targets], axis=0)


def canonical(task: AbstractTask, ys, *, zero: float = 1e-9) -> np.ndarray:
    """The representative of each state (..., n) under the symmetries: the lexicographically largest
    image, coordinates within `zero` of 0 counting as 0 (for (k, v) -> (-k, -v): the first of
    kappa, nu, theta, eta that is not 0 is made positive)."""
    candidates = images(task, ys)
    rounded = np.where(np.abs(candidates) > zero, candidates, 0.0)
    best = np.zeros(candidates.shape[1:-1], dtype=int)
    for g in range(1, len(candidates)):
        difference = rounded[g] - np.take_along_axis(rounded, best[None, ..., None], axis=0)[0]
        nonzero = difference != 0
        first = np.argmax(nonzero, axis=-1)
        leading = np.take_along_axis(difference, first[..., None], axis=-1)[..., 0]
        best = np.where(nonzero.any(axis=-1) & (leading > 0), g, best)
    return np.take_along_axis(candidates, best[None, ..., None], axis=0)[0]


def symmetry_text(task: AbstractTask) -> str:
    """The task's symmetries as maps of its state, e.g. "(a, b, c) -> (-a, -b, c)"; "none" if only the identity."""
    names = task.state_names
    maps = []
    for row in np.asarray(task.symmetries):
        if (row < 0).any():
            images = ", ".join(("-" if sign < 0 else "") + name for sign, name in zip(row, names, strict=True))
            maps.append(f"({', '.join(names)}) -> ({images})")
    return "; ".join(maps) or "none"


def show_state(task: AbstractTask, y) -> str:
    """A state as "(name=value, ...)"."""
    return "(" + ", ".join(f"{name}={value:.6g}" for name, value in zip(task.state_names, y, strict=True)) + ")"


def check_states(task: AbstractTask, y0, name: str = "y0") -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Initial states as (batch, n), which rows are states of the task, and why the others are not.

    **Raises:** ValueError if y0 is not of shape (n,) or (batch, n).
    """
    n = task.dimension
    array = np.asarray(y0, dtype=float)
    if array.ndim not in (1, 2) or array.shape[-1] != n:
        names = ", ".join(task.state_names)
        raise InvalidInput(f"{name} must have shape ({n},) or (batch, {n}) ({names}), got shape {array.shape}")
    array = array.reshape(-1, n)
    problems = task.unrealizable(array)
    valid = np.ones(len(array), bool)
    valid[list(problems)] = False
    reasons = {i: f"{name}[{i}] = {show_state(task, array[i])} {reason}" for i, reason in problems.items()}
    return array, valid, reasons
