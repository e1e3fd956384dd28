"""Figures: the numbers behind them (fixed points, nullclines, attractors, shares) and the files written.

Compilation dominates on a small machine, so the figures share compiled functions: every basin
map uses N starts and the same t_max (one compiled 5-D solve, one compiled Newton polish), and
the projections are drawn from the trajectories of the sphere basin map.

The problem has lam = 0.1: at d = 80, lam = 0.3 the sinks +-(1, 1) of the flow on M have a
kappa eigenvalue of -0.0027 (kappa is still 0.955 at t = 200), at lam = 0.1 it is -0.36, so
that every start converges well within t_max.
"""

import dataclasses
import io

import jax
import matplotlib
import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.contour import ContourSet
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.text import Text

from flowsim import Status, Trajectories, figures, slr

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PROBLEM = slr.Problem(d=80, L=5, lam=0.1)
#: The flow on M in (kappa, nu), at points (..., 2): one compilation.
_flow_on_manifold = jax.jit(lambda points: PROBLEM.restriction().vector_field(0.0, points))
N, T_MAX = 16, 500.0
ORACLE = np.array([1.0, 1.0, 0.0, 0.0, 0.0])


@pytest.fixture(scope="module")
def portrait():
    # N trajectories: their starts are drawn by the basin maps' compiled draw (n is static).
    fig = figures.phase_portrait(PROBLEM, trajectories=N, key=jax.random.key(2), t_max=200.0, grid=31)
    yield fig
    plt.close(fig)


@pytest.fixture(scope="module")
def sphere_basin():
    fig = figures.basin_map(PROBLEM, n=N, key=jax.random.key(1), kind="sphere", t_max=T_MAX)
    yield fig
    plt.close(fig)


def _assert_saved(fig, folder, name):
    paths = figures.save_figure(fig, folder / "figures" / name)
    assert [path.name for path in paths] == [f"{name}.png", f"{name}.pdf"]
    for path, magic in zip(paths, (b"\x89PNG", b"%PDF"), strict=True):
        content = path.read_bytes()
        assert len(content) > 5000 and content.startswith(magic)


def _assert_readable(fig):
    """Every visible text on the figure (drawn: saved first) is at least 11 pt, as on a slide."""
    sizes = [text.get_fontsize() for text in fig.findobj(Text) if text.get_visible() and text.get_text().strip()]
    assert sizes and min(sizes) >= 11


# ---------------------------------------------------------------------------------------------
# Phase portrait on M


def test_phase_portrait_fixed_points(portrait, tmp_path):
    expected = {(-1, -1): "sink", (1, 1): "sink", (-1, 1): "source", (1, -1): "source", (0, 0): "saddle"}
    points = portrait.flowsim_fixed_points
    assert len(points) == 5
    for point in points:
        corner = tuple(round(float(x)) for x in point.point)
        np.testing.assert_allclose(point.point, corner, atol=1e-12)
        assert point.kind == expected[corner]
    # What is drawn is what was found: the markers of each kind sit on those points.
    ax = portrait.axes[0]
    for kind in ("sink", "source", "saddle"):
        (line,) = [line for line in ax.lines if line.get_gid() == kind]
        drawn = sorted(zip(*line.get_data(), strict=True))
        # The found points themselves (the saddle may be found at 1e-42 rather than at 0: within the 1e-12 above).
        assert drawn == sorted(tuple(float(x) for x in p.point) for p in points if p.kind == kind)
    legend = {text.get_text() for text in ax.get_legend().get_texts()}
    assert {"sink", "source", "saddle", "trajectory", "start"} <= legend
    assert sum("nullcline" in label for label in legend) == 2
    assert "d$ = 80" in ax.get_title() and "lambda$ = 0.1" in ax.get_title()
    _assert_saved(portrait, tmp_path, "phase_portrait")
    _assert_readable(portrait)


def test_phase_portrait_nullclines_and_trajectories(portrait):
    ax = portrait.axes[0]
    kappa_set, nu_set = [c for c in ax.collections if isinstance(c, ContourSet)]

    def field(points):
        return np.asarray(_flow_on_manifold(points))

    # The kappa-nullcline is the curve nu = erf(c kappa) across the square: d kappa/dt vanishes on it.
    kappa_points = np.concatenate(kappa_set.allsegs[0])
    assert np.ptp(kappa_points[:, 0]) > 1.9
    assert np.max(np.abs(field(kappa_points)[:, 0])) < 1e-3 * np.max(np.abs(field(kappa_points * [1, 0.5])[:, 0]))
    # The nu-nullcline inside the square is kappa = 0.
    nu_points = np.concatenate(nu_set.allsegs[0])
    assert np.max(np.abs(nu_points[:, 0])) < 1e-12 and np.ptp(nu_points[:, 1]) > 1.9
    # The sample trajectories all reach a sink +-(1, 1) by t = 200.
    solved = portrait.flowsim_trajectories
    assert solved.ys.shape == (N, 201, 2) and bool(np.all(solved.ok))
    ends = np.asarray(solved.ys[:, -1])
    np.testing.assert_allclose(np.abs(ends), 1.0, atol=1e-6)
    assert np.all(np.sign(ends[:, 0]) == np.sign(ends[:, 1]))


# ---------------------------------------------------------------------------------------------
# Basins


def test_basin_map_on_sphere_shares_sum_to_one(sphere_basin, tmp_path):
    found, labels = sphere_basin.flowsim_attractors, sphere_basin.flowsim_labels
    assert labels.shape == (N,) and set(labels) <= set(range(-1, len(found)))
    for j, attractor in enumerate(found):
        assert attractor.count == np.sum(labels == j) and attractor.share == attractor.count / N
        assert attractor.kind == "sink"
    assert sum(a.share for a in found) + np.mean(labels == -1) == pytest.approx(1.0, abs=1e-15)
    assert any(a.is_target for a in found)
    # Each start is drawn at its initial (kappa, nu) in the colour of the attractor it reached.
    ax = sphere_basin.axes[0]
    (scatter,) = ax.collections
    np.testing.assert_array_equal(scatter.get_offsets(), sphere_basin.flowsim_starts[:, :2])
    expected = [to_rgb(f"C{label}") if label >= 0 else to_rgb(figures.UNASSIGNED_COLOR) for label in labels]
    np.testing.assert_allclose(scatter.get_facecolors()[:, :3], expected)
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert len(legend) == len(found) + bool(np.any(labels == -1))
    assert all(f"share {a.share:.0%}" in text for a, text in zip(found, legend, strict=False))
    _assert_saved(sphere_basin, tmp_path, "basin_sphere")
    _assert_readable(sphere_basin)


@pytest.mark.parametrize("grid", [False, True])
def test_basin_map_on_manifold_reaches_the_oracle(grid, portrait, tmp_path):
    """On M every start (off the saddle's stable curve) reaches +-(k*, v*), the sink of the phase portrait."""
    fig = figures.basin_map(PROBLEM, n=N, key=jax.random.key(3), kind="manifold", t_max=T_MAX, grid=grid)
    (oracle,) = fig.flowsim_attractors
    assert oracle.is_target and oracle.share == 1.0 and oracle.kind == "sink"
    np.testing.assert_allclose(oracle.point, ORACLE, atol=1e-9)
    (sink,) = [point for point in portrait.flowsim_fixed_points if tuple(point.point.round()) == (1, 1)]
    assert oracle.risk == pytest.approx(sink.value, rel=1e-12)
    np.testing.assert_array_equal(fig.flowsim_labels, 0)
    starts = fig.flowsim_starts
    np.testing.assert_array_equal(starts[:, 2:], 0.0)
    if grid:  # cell centres of a 4 x 4 partition of the square, drawn as a 4 x 4 image
        np.testing.assert_allclose(np.unique(starts[:, :2]), [-0.75, -0.25, 0.25, 0.75])
        assert fig.axes[0].images[0].get_array().shape == (4, 4, 4)
    _assert_saved(fig, tmp_path, f"basin_manifold_grid_{grid}")
    plt.close(fig)


def test_basin_map_rejects_bad_arguments():
    with pytest.raises(ValueError, match='kind="manifold"'):
        figures.basin_map(PROBLEM, n=4, kind="sphere", grid=True)
    with pytest.raises(ValueError, match="unknown coordinate 'zeta'"):
        figures.basin_map(PROBLEM, n=4, pair=("kappa", "zeta"))


# ---------------------------------------------------------------------------------------------
# Projections of 5-D trajectories


def test_trajectory_projections_of_a_basin_map(sphere_basin, tmp_path):
    solved = sphere_basin.flowsim_trajectories
    fig = figures.trajectory_projections(solved, PROBLEM, indices=range(5))
    assert len(fig.axes) == 4
    *pairs, distance = fig.axes
    assert distance.get_yscale() == "log" and all(ax.get_yscale() == "linear" for ax in pairs)
    assert "kappa" in pairs[0].get_xlabel() and "nu" in pairs[0].get_ylabel() and "rho" in pairs[2].get_ylabel()
    ys = np.asarray(solved.ys)
    for i, line in enumerate(distance.get_lines()):
        np.testing.assert_allclose(line.get_xdata(), solved.ts)
        np.testing.assert_allclose(line.get_ydata(), np.maximum(np.linalg.norm(ys[i, :, 2:], axis=-1), 1e-16))
    _assert_saved(fig, tmp_path, "projections")
    _assert_readable(fig)
    plt.close(fig)


def test_trajectory_projections_key_the_colours_with_labels(sphere_basin):
    solved = sphere_basin.flowsim_trajectories
    fig = figures.trajectory_projections(solved, PROBLEM, indices=[2, 0, 1], labels=["a", "b", "c"])
    (key,) = fig.legends
    assert [text.get_text() for text in key.get_texts()] == ["a", "b", "c"]
    # Each label has the colour of its trajectory's curve.
    curves = fig.axes[-1].get_lines()
    assert [to_rgb(handle.get_color()) for handle in key.legend_handles] == [to_rgb(c.get_color()) for c in curves]
    plt.close(fig)
    with pytest.raises(ValueError, match="one label per trajectory drawn"):
        figures.trajectory_projections(solved, PROBLEM, indices=[0, 1], labels=["a"])


def _handmade_trajectories():
    """Two trajectories without a solve: one on M (distance 0), one failed after two saved times."""
    ts = np.array([0.0, 1.0, 2.0, 3.0])
    on_m = np.array([[0.1, 0.2, 0, 0, 0], [0.3, 0.4, 0, 0, 0], [0.5, 0.6, 0, 0, 0], [0.7, 0.8, 0, 0, 0]])
    failed = np.full((4, 5), np.nan)
    failed[:2] = [[0.1, 0.1, 0.3, 0.0, 0.4], [0.2, 0.1, 0.0, 0.0, 1e-3]]
    ys = np.stack([on_m, failed])
    status = np.array([Status.SUCCESS, Status.MAX_STEPS])
    return Trajectories(ts, ys, np.zeros((2, 4)), status, np.array([3.0, 1.0]), ys[:, 1], np.array([3, 9]))


def test_trajectory_projections_skip_failed_parts_and_clip_the_distance():
    fig, axes = plt.subplots(1, 3)
    pairs = [("kappa", "nu"), ("theta", "rho")]
    out = figures.trajectory_projections(_handmade_trajectories(), PROBLEM, pairs=pairs, ax=axes)
    assert out is fig and len(fig.axes) == 3 and axes[-1].get_yscale() == "log"
    on_m, failed = axes[-1].get_lines()
    np.testing.assert_array_equal(on_m.get_ydata(), 1e-16)  # distance 0, clipped for the log axis
    np.testing.assert_allclose(failed.get_xdata(), [0.0, 1.0])  # the NaN part after the failure is left out
    np.testing.assert_allclose(failed.get_ydata(), [0.5, 1e-3])
    path, _, end = axes[1].get_lines()[3:6]  # the failed trajectory in the (theta, rho) panel
    np.testing.assert_allclose(np.column_stack(path.get_data()), [[0.3, 0.4], [0.0, 1e-3]])
    assert end.get_marker() == "X"
    plt.close(fig)


def test_trajectory_projections_reject_bad_arguments():
    solved = _handmade_trajectories()
    on_manifold = dataclasses.replace(solved, ys=solved.ys[..., :2], y_final=solved.y_final[:, :2])
    with pytest.raises(ValueError, match="5-D flow"):
        figures.trajectory_projections(on_manifold, PROBLEM)
    with pytest.raises(ValueError, match="3 axes"):
        figures.trajectory_projections(solved, PROBLEM, pairs=[("kappa", "nu"), ("theta", "eta")], ax=[None])
    with pytest.raises(ValueError, match="unknown coordinate"):
        figures.trajectory_projections(solved, PROBLEM, pairs=[("kappa", "mu")])


class _CountedLayout(ConstrainedLayoutEngine):
    """Constrained layout that counts its runs."""

    runs = 0

    def execute(self, fig):
        self.runs += 1
        return super().execute(fig)


def test_save_figure_lays_the_figure_out_once_and_keeps_its_layout_engine(tmp_path):
    engine = _CountedLayout()
    fig, ax = plt.subplots(layout=engine)
    ax.plot([1, 10], [1e-3, 10])
    ax.set(yscale="log", xlabel="step", ylabel=r"$R - \varepsilon^2$")
    fig.savefig(io.BytesIO(), format="png", dpi=150, bbox_inches="tight")
    png_alone, engine.runs = engine.runs, 0
    figures.save_figure(fig, tmp_path / "risk")
    # PNG and PDF are written with the one layout the PNG's drawing computed; the figure lays out again when drawn.
    assert engine.runs == png_alone == 1
    assert fig.get_layout_engine() is engine
    fig.canvas.draw()
    plt.close(fig)
    assert engine.runs == 2


def test_save_figure_keeps_dots_and_drops_an_image_suffix(tmp_path):
    fig = plt.figure()
    written = figures.save_figure(fig, tmp_path / "deep" / "basin_lam0.1.png")
    plt.close(fig)
    assert written == [tmp_path / "deep" / "basin_lam0.1.png", tmp_path / "deep" / "basin_lam0.1.pdf"]
    assert all(path.stat().st_size > 0 for path in written)
