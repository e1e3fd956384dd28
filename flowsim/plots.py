"""Figures of the single-location regression flow: phase portrait on M, projections, basins.

Every function draws with matplotlib and returns the Figure; pyplot is imported only
when a figure is made, so importing flowsim never picks a backend. Sizes are chosen for a
course slide: no text below 11 pt, axes named by their overlap symbols. What a figure was
computed from (fixed points, attractors, labels, trajectories) is stored on the Figure as
`flowsim_*` attributes, so that callers and tests can check numbers, not pixels.
"""

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np

from flowsim.tasks.slr import _generated as generated
from flowsim.integrate import Trajectories
from flowsim.results import save_figure  # re-exported: every figure is written through it (atomic PNG + PDF)
from flowsim.tasks.slr import OVERLAP_NAMES, Problem, attractors, fixed_points_on_manifold, initial_overlaps, solve_flow

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["basin_map", "phase_portrait", "save_figure", "trajectory_projections"]

TITLE_SIZE, LABEL_SIZE, TICK_SIZE, LEGEND_SIZE = 14, 13, 12, 11

#: Axis labels of the overlaps, in mathtext.
SYMBOLS = {
    "kappa": r"$\kappa = \langle k, k^*\rangle$",
    "nu": r"$\nu = \langle v, v^*\rangle$",
    "theta": r"$\theta = \langle v, k^*\rangle$",
    "eta": r"$\eta = \langle k, v^*\rangle$",
    "rho": r"$\rho = \langle k, v\rangle$",
}
_SHORT = {"kappa": r"\kappa", "nu": r"\nu", "theta": r"\theta", "eta": r"\eta", "rho": r"\rho"}

#: How each kind of fixed point is drawn: sinks filled, sources hollow, saddles a cross.
FIXED_POINT_STYLE = {
    "sink": dict(marker="o", markersize=11, color="tab:green", markeredgecolor="black"),
    "source": dict(marker="o", markersize=11, markerfacecolor="white", markeredgecolor="tab:red", markeredgewidth=2),
    "saddle": dict(marker="X", markersize=12, color="tab:orange", markeredgecolor="black"),
    "non-hyperbolic": dict(marker="D", markersize=9, color="tab:gray", markeredgecolor="black"),
}
NULLCLINE_COLORS = {"kappa": "tab:blue", "nu": "tab:purple"}
TRAJECTORY_COLOR = "black"
UNASSIGNED_COLOR = "0.7"

#: Lower clip of the distance to M, so that trajectories on M stay on a log axis.
DISTANCE_FLOOR = 1e-16


def phase_portrait(
    problem: Problem,
    *,
    trajectories: int = 8,
    key=None,
    t_max: float = 200.0,
    grid: int = 41,
    ax: "Axes | None" = None,
) -> "Figure":
    """The 2-D flow on M = {theta = eta = rho = 0} in the (kappa, nu) square [-1, 1]^2.

    Draws streamlines of the flow, its nullclines inside the square (the edges
    kappa = +-1 and nu = +-1 are nullclines too: they are the frame), the fixed points by
    kind, and sample trajectories from the "manifold" initialisation.

    **Arguments:**

    - `problem`: the task (lam = problem.lam).
    - `trajectories`: how many sample trajectories to draw (0 for none).
    - `key`: a JAX PRNG key for their starts (default `jax.random.key(0)`).
    - `t_max`: how long they are integrated.
    - `grid`: points per side of the streamline grid.
    - `ax`: draw into these axes instead of a new figure.

    **Returns:** the Figure, with `flowsim_fixed_points` (the `FixedPoint`s drawn) and
    `flowsim_trajectories` (the `Trajectories` drawn, or None).
    """
    fig, ax = _figure_and_axes(ax, (8.5, 6.5))
    _draw_streamlines(ax, problem, grid)
    _draw_nullclines(ax, problem)
    solved = _draw_manifold_trajectories(ax, problem, trajectories, key, t_max) if trajectories > 0 else None
    points = fixed_points_on_manifold(problem)
    _draw_fixed_points(ax, points)
    ax.set(xlim=(-1.06, 1.06), ylim=(-1.06, 1.06), aspect="equal")
    ax.add_patch(_square())
    _label(ax, "kappa", "nu", f"Flow on M ($\\theta = \\eta = \\rho = 0$): {_parameters(problem)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=LEGEND_SIZE, frameon=False)
    fig.flowsim_fixed_points = points
    fig.flowsim_trajectories = solved
    return fig


def _draw_streamlines(ax, problem: Problem, grid: int) -> None:
    axis = np.linspace(-1.0, 1.0, grid)
    kappa, nu = np.meshgrid(axis, axis)  # streamplot wants rows along nu, columns along kappa
    velocity = _velocity_on_manifold(problem, kappa, nu)
    speed = np.hypot(velocity[..., 0], velocity[..., 1])
    # Line width by speed (square root: the speeds span orders of magnitude) shows where the flow is slow.
    width = 0.4 + 1.4 * np.sqrt(speed / max(speed.max(), 1e-300))
    ax.streamplot(
        axis, axis, velocity[..., 0], velocity[..., 1], color="0.55", linewidth=width, density=1.3, arrowsize=1.1
    )


#: Jitted: one compilation per grid shape is cheaper than compiling every operation eagerly.
_flow_on_manifold = jax.jit(generated.flow_on_manifold)


def _velocity_on_manifold(problem: Problem, kappa, nu) -> np.ndarray:
    """d/dt (kappa, nu) on M at the given points (broadcast), as a NumPy array (..., 2)."""
    parameters = (problem.d, problem.L, problem.lam, problem.gamma, problem.eps)
    return np.asarray(_flow_on_manifold(kappa, nu, *(float(value) for value in parameters)))


def _draw_nullclines(ax, problem: Problem) -> None:
    # An even number of points keeps kappa = 0 off the grid (the nu-nullcline lies on it, and a
    # contour through grid values exactly 0 is ambiguous); dropping the edges keeps the trivial
    # nullclines kappa = +-1, nu = +-1 from being drawn as spurious bits along the frame.
    axis = np.linspace(-1.0, 1.0, 402)[1:-1]
    kappa, nu = np.meshgrid(axis, axis)
    velocity = _velocity_on_manifold(problem, kappa, nu)
    for component, name in enumerate(("kappa", "nu")):
        color = NULLCLINE_COLORS[name]
        ax.contour(axis, axis, velocity[..., component], levels=[0.0], colors=color, linewidths=2.2, linestyles="--")
        ax.plot([], [], color=color, lw=2.2, ls="--", label=f"${_SHORT[name]}$-nullcline ($\\dot{_SHORT[name]} = 0$)")


def _draw_manifold_trajectories(ax, problem: Problem, count: int, key, t_max: float) -> Trajectories:
    starts = np.asarray(initial_overlaps(_key(key), problem.d, count, "manifold"))[:, :2]
    # Geometric saved times: the fast first approach to the nu = +-1 edges is resolved too.
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * t_max, t_max, 200)])
    solved = solve_flow(problem, starts, ts, on_manifold=True)
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
            # Corners lie on the frame: no clipping, drawn above everything.
            ax.plot(chosen[:, 0], chosen[:, 1], ls="none", label=kind, gid=kind, clip_on=False, zorder=6, **style)


def trajectory_projections(
    trajectories: Trajectories,
    pairs: Sequence[tuple[str, str]] = (("kappa", "nu"), ("theta", "eta"), ("kappa", "rho")),
    *,
    indices: Sequence[int] | None = None,
    ax: "Sequence[Axes] | None" = None,
) -> "Figure":
    """Trajectories of the 5-D flow projected on pairs of overlaps, and their distance to M.

    One panel per pair, then a panel of sqrt(theta^2 + eta^2 + rho^2) against time on a
    log axis (clipped below at 1e-16, so that trajectories on M stay visible). Parts that
    were not computed (NaN after a failure) are left out; a failed trajectory ends in a cross.

    **Arguments:**

    - `trajectories`: from `solve_flow` on the 5-D flow.
    - `pairs`: pairs of names from `OVERLAP_NAMES`.
    - `indices`: which trajectories to draw (default: all).
    - `ax`: draw into these len(pairs) + 1 axes instead of a new figure.

    **Returns:** the Figure.
    """
    ys = np.asarray(trajectories.ys)
    if ys.ndim != 3 or ys.shape[-1] != 5:
        raise ValueError(f"trajectory_projections needs trajectories of the 5-D flow, got ys of shape {ys.shape}")
    columns = [tuple(_overlap_index(name) for name in pair) for pair in pairs]
    chosen = range(len(ys)) if indices is None else [int(i) for i in indices]
    fig, axes = _panels(ax, len(pairs) + 1)
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
        distance = np.maximum(np.linalg.norm(path[:, 2:], axis=-1), DISTANCE_FLOOR)
        axes[-1].plot(ts[finite], distance, color=color, lw=1.6)
    for panel, (a, b) in zip(axes, pairs, strict=False):
        _label(panel, a, b)
    axes[-1].set_yscale("log")
    axes[-1].set_xlabel("time $t$", fontsize=LABEL_SIZE)
    axes[-1].set_ylabel(r"distance to M  $\sqrt{\theta^2 + \eta^2 + \rho^2}$", fontsize=LABEL_SIZE)
    _style(axes[-1])
    axes[0].plot([], [], "o", ms=6, mfc="white", mec="black", ls="none", label="start")
    axes[0].plot([], [], "o", ms=7, color="black", ls="none", label="end")
    axes[0].legend(fontsize=LEGEND_SIZE, loc="best")
    if ax is None:
        fig.suptitle(f"Trajectories of the 5-D flow ({len(chosen)} drawn)", fontsize=TITLE_SIZE)
    return fig


def _overlap_index(name: str) -> int:
    if name not in OVERLAP_NAMES:
        raise ValueError(f"unknown overlap {name!r}: choose from {OVERLAP_NAMES}")
    return OVERLAP_NAMES.index(name)


def _panels(ax, count: int):
    """(figure, list of `count` axes): the given ones, or a new grid with the spare cells removed."""
    if ax is not None:
        axes = list(ax)
        if len(axes) != count:
            raise ValueError(f"ax must hold {count} axes (one per pair, then the distance to M), got {len(axes)}")
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
    problem: Problem,
    *,
    n: int = 400,
    key=None,
    kind: str = "sphere",
    t_max: float = 500.0,
    schedule=None,
    pair: tuple[str, str] = ("kappa", "nu"),
    grid: bool = False,
    ax: "Axes | None" = None,
) -> "Figure":
    """Which attractor of the 5-D flow each start reaches, drawn at its initial overlaps.

    Integrates the 5-D flow from each start to t_max (stopping early at a steady state),
    groups the end points with `attractors` and colours each start by the attractor it
    reached; starts that ended away from every fixed point are grey ("not converged").

    **Arguments:**

    - `problem`: the task.
    - `n`: the number of starts (with `grid`, a side x side lattice, side = round(sqrt(n))).
    - `key`: a JAX PRNG key for random starts (default `jax.random.key(0)`).
    - `kind`: the initialisation, "sphere" or "manifold" (see `initial_overlaps`).
    - `t_max`: how long each start is integrated.
    - `schedule`: lam as a function of t; attractors are those of the field at lam(t_max).
    - `pair`: the two overlaps on the axes (with `grid`, ("kappa", "nu")).
    - `grid`: with kind="manifold", a regular lattice of cell centres of the (kappa, nu)
      square instead of random starts (an odd side puts one start on the saddle (0, 0)).
    - `ax`: draw into these axes instead of a new figure.

    **Returns:** the Figure, with `flowsim_attractors` (list of `Attractor`),
    `flowsim_labels` (attractor index per start, -1 = not converged), `flowsim_starts`
    (n, 5) and `flowsim_trajectories` (the `Trajectories`, saved at geometric times,
    e.g. for `trajectory_projections`).
    """
    if grid and (kind != "manifold" or tuple(pair) != ("kappa", "nu")):
        raise ValueError(
            f'grid=True draws a (kappa, nu) lattice on M: it needs kind="manifold" and that pair, got '
            f"kind={kind!r}, pair={pair!r}"
        )
    columns = tuple(_overlap_index(name) for name in pair)
    starts = _manifold_lattice(n) if grid else np.asarray(initial_overlaps(_key(key), problem.d, n, kind))
    # Geometric saved times resolve both the fast start and the slow approach to an attractor.
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * t_max, t_max, 100)])
    solved = solve_flow(problem, starts, ts, schedule=schedule, steady_state_tol=1e-10, max_steps=2_000_000)
    # A failed solve (out of steps) did not reach an end point: NaN leaves it unassigned.
    finals = np.where(np.asarray(solved.ok)[:, None], np.asarray(solved.y_final), np.nan)
    lam = float(schedule(t_max)) if schedule is not None else None
    found, labels = attractors(problem, finals, lam=lam)
    fig, ax = _figure_and_axes(ax, (11.5, 6.5))
    _draw_basins(ax, starts[:, columns], labels, found, lattice=grid)
    lam_text = f", $\\lambda(t_{{\\max}})$ = {lam:.3g}" if lam is not None else ""
    title = f"Basins: {len(starts)} {kind} starts, $t_{{\\max}}$ = {t_max:g}\n{_parameters(problem)}{lam_text}"
    _label(ax, *pair, title)
    if grid:
        ax.grid(False)  # grid lines would cut the lattice's cells
    ax.legend(
        title=r"reached $\pm(\kappa, \nu, \theta, \eta, \rho)$",
        title_fontsize=LEGEND_SIZE,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=LEGEND_SIZE,
        frameon=False,
    )
    fig.flowsim_attractors, fig.flowsim_labels = found, labels
    fig.flowsim_starts, fig.flowsim_trajectories = starts, solved
    return fig


def _key(key):
    return jax.random.key(0) if key is None else key


def _manifold_lattice(n: int) -> np.ndarray:
    """Cell centres of a side x side partition of the (kappa, nu) square, as overlaps on M."""
    side = max(1, round(math.sqrt(n)))
    axis = -1.0 + (np.arange(side) + 0.5) * 2.0 / side
    kappa, nu = np.meshgrid(axis, axis, indexing="ij")
    starts = np.zeros((side * side, 5))
    starts[:, 0], starts[:, 1] = kappa.ravel(), nu.ravel()
    return starts


def _draw_basins(ax, points: np.ndarray, labels: np.ndarray, found, *, lattice: bool) -> None:
    colors = [f"C{j % 10}" for j in range(len(found))]
    point_colors = [colors[label] if label >= 0 else UNASSIGNED_COLOR for label in labels]
    if lattice:
        from matplotlib.colors import to_rgba_array

        # Starts run over kappa (rows) then nu; an image wants nu along rows, from the bottom.
        side = round(math.sqrt(len(points)))
        image = to_rgba_array(point_colors).reshape(side, side, 4).transpose(1, 0, 2)
        ax.imshow(image, origin="lower", extent=(-1, 1, -1, 1), interpolation="nearest")
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
    overlaps = ", ".join(f"{value:.2f}" for value in np.round(attractor.point, 2) + 0.0)
    oracle = ", oracle" if attractor.is_oracle else ""
    return f"({overlaps}) {attractor.kind}{oracle}\n    risk {attractor.risk:.3g}, share {attractor.share:.0%}"


def _figure_and_axes(ax, size):
    if ax is not None:
        return ax.figure, ax
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, layout="constrained")
    return fig, ax


def _square():
    from matplotlib.patches import Rectangle

    return Rectangle((-1, -1), 2, 2, fill=False, edgecolor="black", lw=1.2, zorder=3)


def _parameters(problem: Problem) -> str:
    return f"$d$ = {problem.d}, $L$ = {problem.L}, $\\lambda$ = {float(problem.lam):g}"


def _label(ax, x: str, y: str, title: str | None = None) -> None:
    ax.set_xlabel(SYMBOLS[x], fontsize=LABEL_SIZE)
    ax.set_ylabel(SYMBOLS[y], fontsize=LABEL_SIZE)
    if title:
        ax.set_title(title, fontsize=TITLE_SIZE)
    _style(ax)


def _style(ax) -> None:
    ax.tick_params(labelsize=TICK_SIZE)
    ax.grid(True, color="0.9", lw=0.8, zorder=0)
