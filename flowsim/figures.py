"""Figures of any task's dynamics: planar phase portraits, trajectory projections, basins, SGD against the flow.

Every function draws with matplotlib and returns the Figure; pyplot is imported only when a
figure is made, so importing flowsim never picks a backend. Sizes are chosen for a course slide:
no text below 11 pt, axes named by the task's symbols (`AbstractTask.state_labels`). What a
figure was computed from (fixed points, attractors, labels, trajectories) is stored on the Figure
as `flowsim_*` attributes, so that callers and tests can check numbers, not pixels.
"""

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np

from flowsim._checks import InvalidInput, as_key
from flowsim._task import task_vector_field
from flowsim.compare import REFERENCE_NAMES, Comparison
from flowsim.fixedpoints import attractors, fixed_points
from flowsim.integrate import Trajectories, check_finite, evaluate, solve_flow
from flowsim.results import save_figure  # re-exported: every figure is written through it (atomic PNG + PDF)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["basin_map", "comparison_figure", "phase_portrait", "save_figure", "sgd_figure", "trajectory_projections"]

TITLE_SIZE, LABEL_SIZE, TICK_SIZE, LEGEND_SIZE = 14, 13, 12, 11

#: How each kind of fixed point is drawn: sinks filled, sources hollow, saddles a cross.
FIXED_POINT_STYLE = {
    "sink": dict(marker="o", markersize=11, color="tab:green", markeredgecolor="black"),
    "source": dict(marker="o", markersize=11, markerfacecolor="white", markeredgecolor="tab:red", markeredgewidth=2),
    "saddle": dict(marker="X", markersize=12, color="tab:orange", markeredgecolor="black"),
    "non-hyperbolic": dict(marker="D", markersize=9, color="tab:gray", markeredgecolor="black"),
}
#: The nullclines of a planar flow's first and second coordinate.
NULLCLINE_COLORS = ("tab:blue", "tab:purple")
TRAJECTORY_COLOR = "black"
UNASSIGNED_COLOR = "0.7"

#: Lower clip of quantities on a log axis (e.g. the distance to an invariant manifold), so that
#: trajectories on which they vanish stay visible.
LOG_FLOOR = 1e-16


def _label_of(task, name: str) -> str:
    return task.state_labels.get(name, name)


def _symbol_of(task, name: str) -> str:
    return task.state_symbols.get(name, name)


def _planar(task):
    """The task itself if its state is planar, else its planar invariant restriction."""
    return task if task.dimension == 2 else task.restriction()


def phase_portrait(
    task,
    *,
    trajectories: int = 8,
    key=None,
    t_max: float = 200.0,
    grid: int = 41,
    ax: "Axes | None" = None,
) -> "Figure":
    """The phase portrait of a planar flow (a task with a 2-D state, or a task's planar restriction).

    Draws streamlines of the flow in the box `planar.bounds`, its nullclines inside the box, the
    fixed points in the box by kind (Newton from a 9 x 9 lattice of the box) and sample trajectories from the
    restriction's first initialisation.

    **Arguments:**

    - `task`: an `AbstractTask` (at its scheduled parameter's value at t = 0).
    - `trajectories`: how many sample trajectories to draw (0 for none).
    - `key`: a JAX PRNG key or an integer seed for their starts (default `jax.random.key(0)`).
    - `t_max`: how long they are integrated.
    - `grid`: points per side of the streamline grid.
    - `ax`: draw into these axes instead of a new figure.

    **Returns:** the Figure, with `flowsim_fixed_points` (the `FixedPoint`s drawn) and
    `flowsim_trajectories` (the `Trajectories` drawn, or None).

    **Raises:** `InvalidInput` if the risk or field is not finite on the 9 x 9 lattice (`check_finite`).
    """
    planar = _planar(task)
    (x_low, x_high), (y_low, y_high) = planar.bounds
    lattice = np.stack(np.meshgrid(np.linspace(x_low, x_high, 9), np.linspace(y_low, y_high, 9), indexing="ij"), -1)
    check_finite(planar, lattice.reshape(-1, 2))  # before anything is drawn: a NaN field draws a blank figure
    fig, ax = _figure_and_axes(ax, (8.5, 6.5))
    _draw_streamlines(ax, planar, grid)
    _draw_nullclines(ax, planar)
    solved = _draw_planar_trajectories(ax, planar, trajectories, key, t_max) if trajectories > 0 else None
    margin = 0.03 * max(x_high - x_low, y_high - y_low)
    # Only the box's fixed points: Newton may walk out along an asymptote where the field vanishes only in the
    # limit (saturated softmax weights at |a| ~ 1e4 ... 1e9 in the SLR family's plane), a root no portrait shows.
    points = [
        point
        for point in fixed_points(planar, lattice.reshape(-1, 2))
        if x_low - margin <= point.point[0] <= x_high + margin and y_low - margin <= point.point[1] <= y_high + margin
    ]
    _draw_fixed_points(ax, points)
    ax.set(xlim=(x_low - margin, x_high + margin), ylim=(y_low - margin, y_high + margin), aspect="equal")
    ax.add_patch(_box(planar.bounds))
    x, y = planar.state_names
    _label(planar, ax, x, y, f"{planar.title}: {_parameters(planar)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=LEGEND_SIZE, frameon=False)
    fig.flowsim_fixed_points = points
    fig.flowsim_trajectories = solved
    return fig


def _draw_streamlines(ax, planar, grid: int) -> None:
    (x_low, x_high), (y_low, y_high) = planar.bounds
    x_axis, y_axis = np.linspace(x_low, x_high, grid), np.linspace(y_low, y_high, grid)
    x, y = np.meshgrid(x_axis, y_axis)  # streamplot wants rows along y, columns along x
    velocity = _velocity(planar, x, y)
    speed = np.hypot(velocity[..., 0], velocity[..., 1])
    # Line width by speed (square root: the speeds span orders of magnitude) shows where the flow is slow.
    width = 0.4 + 1.4 * np.sqrt(speed / max(speed.max(), 1e-300))
    ax.streamplot(
        x_axis, y_axis, velocity[..., 0], velocity[..., 1], color="0.55", linewidth=width, density=1.3, arrowsize=1.1
    )


#: Grid points whose field is evaluated at once: a task whose field takes an expectation by a rule holds
#: arrays of the rule's size per point (a 400 x 400 grid at once would need tens of GB).
_GRID_CHUNK = 256
#: Grid points per compiled call: every grid (streamlines, nullclines) is cut into such blocks, so that one
#: compiled program serves every grid size.
_GRID_BLOCK = 4096


def _field_on_points(t, points, task):
    """The planar field at points (_GRID_BLOCK, 2), _GRID_CHUNK points at a time."""
    return jax.lax.map(lambda y: task_vector_field(t, y, task), points, batch_size=_GRID_CHUNK)


def _velocity(planar, x, y) -> np.ndarray:
    """The planar field at the points (x, y) (2-D grids), as a NumPy array (..., 2)."""
    points = np.stack([x.ravel(), y.ravel()], axis=-1)
    blocks = -(-len(points) // _GRID_BLOCK)
    padded = np.concatenate([points, np.repeat(points[:1], blocks * _GRID_BLOCK - len(points), axis=0)])
    values = [np.asarray(evaluate(_field_on_points, 0.0, block, planar)) for block in np.split(padded, blocks)]
    return np.concatenate(values)[: len(points)].reshape(*x.shape, 2)


def _draw_nullclines(ax, planar) -> None:
    # An even number of points keeps the middle of the box off the grid (a nullcline may lie on it,
    # and a contour through grid values exactly 0 is ambiguous); dropping the edges keeps nullclines
    # along the frame (kappa = +-1 and nu = +-1 on M) from being drawn as spurious bits.
    (x_low, x_high), (y_low, y_high) = planar.bounds
    x_axis, y_axis = np.linspace(x_low, x_high, 402)[1:-1], np.linspace(y_low, y_high, 402)[1:-1]
    x, y = np.meshgrid(x_axis, y_axis)
    velocity = _velocity(planar, x, y)
    for component, (name, color) in enumerate(zip(planar.state_names, NULLCLINE_COLORS, strict=True)):
        ax.contour(
            x_axis, y_axis, velocity[..., component], levels=[0.0], colors=color, linewidths=2.2, linestyles="--"
        )
        symbol = _symbol_of(planar, name)
        ax.plot([], [], color=color, lw=2.2, ls="--", label=f"${symbol}$-nullcline ($\\dot{{{symbol}}} = 0$)")


def _draw_planar_trajectories(ax, planar, count: int, key, t_max: float) -> Trajectories:
    starts = np.asarray(planar.initial_states(_key(key), count, planar.initialisations[0]))
    # Geometric saved times: a fast first approach (e.g. to the edges nu = +-1 of M) is resolved too.
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * t_max, t_max, 200)])
    solved = solve_flow(planar, starts, ts)
    ys = np.asarray(solved.ys)
    for i in range(count):
        path = ys[i][np.isfinite(ys[i]).all(axis=-1)]
        ax.plot(
            path[:, 0], path[:, 1], color=TRAJECTORY_COLOR, lw=1.8, zorder=4, label="trajectory" if i == 0 else None
        )
        start = dict(marker="o", ms=6, mfc="white", mec=TRAJECTORY_COLOR, mew=1.5, ls="none", zorder=5)
        ax.plot(*starts[i], label="start" if i == 0 else None, **start)
    return solved


def _draw_fixed_points(ax, points) -> None:
    for kind, style in FIXED_POINT_STYLE.items():
        chosen = np.array([point.point for point in points if point.kind == kind]).reshape(-1, 2)
        if len(chosen):
            # Fixed points may lie on the frame: no clipping, drawn above everything.
            ax.plot(chosen[:, 0], chosen[:, 1], ls="none", label=kind, gid=kind, clip_on=False, zorder=6, **style)


def trajectory_projections(
    trajectories: Trajectories,
    task,
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    indices: Sequence[int] | None = None,
    labels: Sequence[str] | None = None,
    ax: "Sequence[Axes] | None" = None,
) -> "Figure":
    """Trajectories of a task's flow projected on pairs of coordinates, and its observables against time.

    One panel per pair, then one panel per observable of the task (`AbstractTask.observables`,
    e.g. the distance to M on a log axis, clipped below at 1e-16 so that trajectories on M stay
    visible). Parts that were not computed (NaN after a failure) are left out; a failed trajectory
    ends in a cross.

    **Arguments:**

    - `trajectories`: from `solve_flow` on `task`.
    - `task`: the task they were solved for.
    - `pairs`: pairs of names from `task.state_names` (default `task.projection_pairs`).
    - `indices`: which trajectories to draw (default: all).
    - `labels`: one label per trajectory drawn (e.g. where it ends), shown in a key of the colours
      below the panels; default: no key (the colours repeat after ten trajectories).
    - `ax`: draw into these len(pairs) + len(observables) axes instead of a new figure.

    **Returns:** the Figure.
    """
    ys = np.asarray(trajectories.ys)
    if ys.ndim != 3 or ys.shape[-1] != task.dimension:
        raise InvalidInput(
            f"trajectory_projections needs trajectories of the {task.dimension}-D flow of {type(task).__name__}, "
            f"got ys of shape {ys.shape}"
        )
    pairs = task.projection_pairs if pairs is None else pairs
    columns = [tuple(_state_index(task, name) for name in pair) for pair in pairs]
    observables = list(task.observables.items())
    chosen = range(len(ys)) if indices is None else [int(i) for i in indices]
    if labels is not None and len(labels) != len(chosen):
        raise InvalidInput(f"labels must give one label per trajectory drawn ({len(chosen)}), got {len(labels)}")
    fig, axes = _panels(ax, len(pairs) + len(observables), "one per pair, then one per observable")
    ok = np.asarray(trajectories.ok)
    ts = np.asarray(trajectories.ts)
    for n, i in enumerate(chosen):
        finite = np.isfinite(ys[i]).all(axis=-1)
        path, color = ys[i][finite], f"C{n % 10}"
        if not len(path):
            continue
        for panel, (a, b) in zip(axes, columns, strict=False):
            panel.plot(path[:, a], path[:, b], color=color, lw=1.6)
            panel.plot(path[0, a], path[0, b], marker="o", ms=6, mfc="white", mec=color, mew=1.5)
            panel.plot(path[-1, a], path[-1, b], marker="o" if ok[i] else "X", ms=7, color=color)
        for panel, (_, (_, function, scale)) in zip(axes[len(pairs) :], observables, strict=True):
            values = function(path)
            panel.plot(ts[finite], np.maximum(values, LOG_FLOOR) if scale == "log" else values, color=color, lw=1.6)
    for panel, (a, b) in zip(axes, pairs, strict=False):
        _label(task, panel, a, b)
    for panel, (_, (label, _, scale)) in zip(axes[len(pairs) :], observables, strict=True):
        panel.set_yscale(scale)
        panel.set_xlabel("time $t$", fontsize=LABEL_SIZE)
        panel.set_ylabel(label, fontsize=LABEL_SIZE)
        _style(panel)
    axes[0].plot([], [], "o", ms=6, mfc="white", mec="black", ls="none", label="start")
    axes[0].plot([], [], "o", ms=7, color="black", ls="none", label="end")
    axes[0].legend(fontsize=LEGEND_SIZE, loc="best")
    if labels is not None:
        from matplotlib.lines import Line2D

        key = [Line2D([], [], color=f"C{n % 10}", lw=2.5, label=label) for n, label in enumerate(labels)]
        fig.legend(handles=key, loc="outside lower center", ncols=2, fontsize=LEGEND_SIZE, frameon=False)
    if ax is None:
        fig.suptitle(f"Trajectories of the {task.dimension}-D flow ({len(chosen)} drawn)", fontsize=TITLE_SIZE)
    return fig


def _state_index(task, name: str) -> int:
    if name not in task.state_names:
        raise InvalidInput(f"unknown coordinate {name!r}: choose from {task.state_names}")
    return task.state_names.index(name)


def _panels(ax, count: int, what: str):
    """(figure, list of `count` axes): the given ones, or a new grid with the spare cells removed."""
    if ax is not None:
        axes = list(ax)
        if len(axes) != count:
            raise InvalidInput(f"ax must hold {count} axes ({what}), got {len(axes)}")
        return axes[0].figure, axes
    import matplotlib.pyplot as plt

    columns = 2 if count in (2, 4) else min(count, 3)
    rows = math.ceil(count / columns)
    fig, grid = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.6 * rows), layout="constrained", squeeze=False)
    axes = list(grid.ravel())
    for spare in axes[count:]:
        fig.delaxes(spare)
    return fig, axes[:count]


def basin_map(
    task,
    *,
    n: int = 400,
    key=None,
    kind: str | None = None,
    t_max: float = 500.0,
    pair: tuple[str, str] | None = None,
    grid: bool = False,
    ax: "Axes | None" = None,
) -> "Figure":
    """Which attractor of the flow each start reaches, drawn at its initial state.

    Integrates the flow from each start to t_max (stopping early at a steady state), groups the
    end points with `attractors` (the field frozen at t_max, the end of a schedule) and colours
    each start by the attractor it reached; starts that ended away from every fixed point are grey
    ("not converged").

    **Arguments:**

    - `task`: an `AbstractTask` (its schedule included).
    - `n`: the number of starts (with `grid`, a side x side lattice, side = round(sqrt(n))).
    - `key`: a JAX PRNG key or an integer seed for random starts (default `jax.random.key(0)`).
    - `kind`: the initialisation (default the task's first).
    - `t_max`: how long each start is integrated.
    - `pair`: the two coordinates on the axes (default the first two; with `grid`, the planar
      restriction's).
    - `grid`: a regular lattice of cell centres of the planar restriction's box
      (`AbstractTask.restriction`), lifted to the task's state, instead of random starts (an odd side
      puts one start on the box's centre); a `kind` given with it must be one of the restriction's.
    - `ax`: draw into these axes instead of a new figure.

    **Returns:** the Figure, with `flowsim_attractors` (list of `Attractor`), `flowsim_labels`
    (attractor index per start, -1 = not converged), `flowsim_starts` (n, dimension) and
    `flowsim_trajectories` (the `Trajectories`, saved at geometric times, e.g. for
    `trajectory_projections`).
    """
    planar = task.restriction() if grid else None
    # The lattice lies in the restriction's plane: a kind of start outside it would be silently ignored.
    if grid and kind is not None and kind not in planar.initialisations:
        raise InvalidInput(
            f"grid=True draws a lattice of the plane {planar.state_names}, starts of "
            f'kind="{planar.initialisations[0]}": got kind={kind!r}'
        )
    kind = task.initialisations[0] if kind is None else kind
    pair = tuple(pair) if pair is not None else tuple((planar or task).state_names[:2])
    if grid and pair != tuple(planar.state_names):
        raise InvalidInput(
            f"grid=True draws a lattice of the plane {planar.state_names}: it needs that pair, got {pair!r}"
        )
    columns = tuple(_state_index(task, name) for name in pair)
    starts = task_lattice(planar, n) if grid else np.asarray(task.initial_states(_key(key), n, kind))
    # Geometric saved times resolve both the fast start and the slow approach to an attractor.
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * t_max, t_max, 100)])
    solved = solve_flow(task, starts, ts, steady_state_tol=1e-10, max_steps=2_000_000)
    # A failed solve (out of steps) did not reach an end point: NaN leaves it unassigned.
    finals = np.where(np.asarray(solved.ok)[:, None], np.asarray(solved.y_final), np.nan)
    found, labels = attractors(task, finals, t=t_max)
    fig, ax = _figure_and_axes(ax, (11.5, 6.5))
    _draw_basins(ax, starts[:, columns], labels, found, bounds=planar.bounds if grid else None)
    scheduled = task.scheduled
    value = f", ${scheduled}(t_{{\\max}})$ = {float(task.schedule()(t_max)):.3g}" if scheduled else ""
    how = "lattice" if grid else kind
    title = f"Basins: {len(starts)} {how} starts, $t_{{\\max}}$ = {t_max:g}\n{_parameters(task)}{value}"
    _label(task, ax, *pair, title)
    if grid:
        ax.grid(False)  # grid lines would cut the lattice's cells
    ax.legend(
        title=f"reached {_state_tuple(task)}",
        title_fontsize=LEGEND_SIZE,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=LEGEND_SIZE,
        frameon=False,
    )
    fig.flowsim_attractors, fig.flowsim_labels = found, labels
    fig.flowsim_starts, fig.flowsim_trajectories = starts, solved
    return fig


def _state_tuple(task) -> str:
    """The state as a tuple of symbols in mathtext, with +- if the task has a sign symmetry."""
    symbols = ", ".join(_symbol_of(task, name) for name in task.state_names)
    sign = r"\pm" if len(task.symmetries) > 1 else ""
    return f"${sign}({symbols})$"


def _key(key):
    return jax.random.key(0) if key is None else as_key(key)


def task_lattice(planar, n: int) -> np.ndarray:
    """Cell centres of a side x side partition of a planar restriction's box, lifted to the full state."""
    side = max(1, round(math.sqrt(n)))
    (x_low, x_high), (y_low, y_high) = planar.bounds
    x = x_low + (np.arange(side) + 0.5) * (x_high - x_low) / side
    y = y_low + (np.arange(side) + 0.5) * (y_high - y_low) / side
    points = np.stack(np.meshgrid(x, y, indexing="ij"), axis=-1).reshape(-1, 2)
    return np.asarray(planar.lift(points))


def _draw_basins(ax, points: np.ndarray, labels: np.ndarray, found, *, bounds) -> None:
    colors = [f"C{j % 10}" for j in range(len(found))]
    point_colors = [colors[label] if label >= 0 else UNASSIGNED_COLOR for label in labels]
    if bounds is not None:
        from matplotlib.colors import to_rgba_array

        # Starts run over the first coordinate (rows) then the second; an image wants the second
        # along rows, from the bottom.
        side = round(math.sqrt(len(points)))
        image = to_rgba_array(point_colors).reshape(side, side, 4).transpose(1, 0, 2)
        (x_low, x_high), (y_low, y_high) = bounds
        ax.imshow(image, origin="lower", extent=(x_low, x_high, y_low, y_high), interpolation="nearest")
    else:
        ax.scatter(points[:, 0], points[:, 1], c=point_colors, s=40, alpha=0.85, linewidths=0)
    for attractor, color in zip(found, colors, strict=True):
        ax.plot([], [], "o", ms=9, color=color, ls="none", label=_attractor_label(attractor))
    unassigned = int(np.sum(labels < 0))
    if unassigned:
        ax.plot(
            [], [], "o", ms=9, color=UNASSIGNED_COLOR, ls="none", label=f"not converged: {unassigned / len(labels):.0%}"
        )


def _attractor_label(attractor) -> str:
    # + 0.0 turns -0.0 into 0.0, so that a rounded zero never prints as "-0.00".
    state = ", ".join(f"{value:.2f}" for value in np.round(attractor.point, 2) + 0.0)
    target = ", target" if attractor.is_target else ""
    return f"({state}) {attractor.kind}{target}\n    risk {attractor.risk:.3g}, share {attractor.share:.0%}"


def sgd_figure(task, times, runs, risks, *, references=None, reference_risks=None, reference_label=None, title=""):
    """SGD trajectories (thin, one colour per seed) against t, over their reference (dashed) if given.

    Panels: the task's `panels` (coordinates or observables, e.g. kappa, nu and the distance to M
    on a log axis) and the population risk.

    **Arguments:**

    - `task`: the task trained on.
    - `times`: the logged times, (logs,).
    - `runs`, `risks`: the logged states (seeds, logs, n) and risks (seeds, logs).
    - `references`, `reference_risks`, `reference_label`: the deterministic reference, same shapes.
    - `title`: the figure's title.

    **Returns:** the Figure.
    """
    import matplotlib.pyplot as plt

    panels = [_panel(task, name) for name in task.panels] + [("population risk", None, "linear")]
    fig, axes = plt.subplots(2, math.ceil(len(panels) / 2), figsize=(11, 8.5), layout="constrained", squeeze=False)
    for ax, (label, function, scale) in zip(axes.ravel(), panels, strict=False):
        for seed in range(len(runs)):
            color = f"C{seed % 10}"
            sides = [(runs[seed], risks[seed], dict(lw=0.9, alpha=0.8))]
            if references is not None:
                sides.append((references[seed], reference_risks[seed], dict(lw=1.8, ls="--")))
            for states, risk, style in sides:
                values = risk if function is None else function(states)
                ax.plot(times, np.maximum(values, LOG_FLOOR) if scale == "log" else values, color=color, **style)
        ax.set_yscale(scale)
        ax.set_xlabel("time $t$ = lr $\\cdot$ step", fontsize=LABEL_SIZE)
        ax.set_ylabel(label, fontsize=LABEL_SIZE)
        _style(ax)
    if references is not None:
        axes.flat[0].plot([], [], color="black", lw=0.9, label="SGD")
        axes.flat[0].plot([], [], color="black", lw=1.8, ls="--", label=reference_label)
        axes.flat[0].legend(fontsize=LEGEND_SIZE, loc="best")
    fig.suptitle(title, fontsize=TITLE_SIZE)
    return fig


def _panel(task, name: str):
    """(label, function of the states, scale) of a coordinate or an observable of the task."""
    if name in task.observables:
        return task.observables[name]
    index = _state_index(task, name)
    return _label_of(task, name), lambda states: states[..., index], "linear"


def comparison_figure(comparison: Comparison, task, *, seeds=None, title: str | None = None) -> "Figure":
    """An SGD run over its reference (`compare`): the task's panels and the population risk against t.

    **Arguments:**

    - `comparison`: from `compare`; `task`: the run's task (`run.task`).
    - `seeds`: which seeds to draw (default: all).
    - `title`: the figure's title (default: a summary of the comparison).

    **Returns:** the Figure, with `flowsim_comparison` set to `comparison`.
    """
    chosen = range(len(comparison.sgd)) if seeds is None else [int(i) for i in seeds]
    reference = REFERENCE_NAMES[comparison.reference]
    if title is None:
        title = (
            f"SGD (lr = {comparison.lr:g}) vs {reference}: max |d state| = "
            f"{comparison.max_deviation.max():.3g}, same attractor {int(comparison.same_attractor.sum())}"
            f"/{len(comparison.same_attractor)}"
            + ("" if comparison.symmetry == "none" else f" (up to {comparison.symmetry})")
        )
    fig = sgd_figure(
        task,
        comparison.times,
        comparison.sgd[chosen],
        comparison.sgd_risk[chosen],
        references=comparison.ys[chosen],
        reference_risks=comparison.risk[chosen],
        reference_label=reference,
        title=title,
    )
    fig.flowsim_comparison = comparison
    return fig


def _figure_and_axes(ax, size):
    if ax is not None:
        return ax.figure, ax
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, layout="constrained")
    return fig, ax


def _box(bounds):
    from matplotlib.patches import Rectangle

    (x_low, x_high), (y_low, y_high) = bounds
    return Rectangle((x_low, y_low), x_high - x_low, y_high - y_low, fill=False, edgecolor="black", lw=1.2, zorder=3)


def _parameters(task) -> str:
    """The parameters for a title, in mathtext."""
    return task.describe(math_text=True)


def _label(task, ax, x: str, y: str, title: str | None = None) -> None:
    ax.set_xlabel(_label_of(task, x), fontsize=LABEL_SIZE)
    ax.set_ylabel(_label_of(task, y), fontsize=LABEL_SIZE)
    if title:
        ax.set_title(title, fontsize=TITLE_SIZE)
    _style(ax)


def _style(ax) -> None:
    ax.tick_params(labelsize=TICK_SIZE)
    ax.grid(True, color="0.9", lw=0.8, zorder=0)
