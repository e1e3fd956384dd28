"""A phase diagram of specialisation: where the population flow of two heads ends, over lam0 x d (docs/heads.md).

For each initial inverse temperature lam0 of the authors' schedule lam0 / (1 + rate step), frozen after step `until`
(Marion et al., appendix E.3), and each dimension d, the flow of `slr.HeadsProblem` runs from n starts uniform on
the spheres to the experiment's horizon; its end states are classified by `classify_heads` (specialised, collapsed,
partial, none). Beside the shares, the **plateau**: from a uniform start every overlap with a target is of order
1/sqrt(d), and the heads sit near the symmetric, uninformative saddle until the overlaps have grown to the rule's
thresholds; the plateau's length is the first saved time at which some head takes a location (`head_locations`).
"""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import numpy as np

from flowsim._checks import POSITIVE, InvalidInput, as_key, check_count
from flowsim._memory import check_work
from flowsim.integrate import solve_flow
from flowsim.schedules import InverseTimeDecay
from flowsim.tasks.slr._family import marion_slr
from flowsim.tasks.slr._heads_outcome import (
    K_THRESHOLD,
    OUTCOMES,
    V_THRESHOLD,
    check_threshold,
    classify_heads,
    head_locations,
)
from flowsim.tasks.slr._heads_problem import HeadsProblem
from flowsim.tasks.slr._heads_state import sphere_states

__all__ = ["SpecialisationDiagram", "specialisation_diagram", "specialisation_figure", "two_head_problem"]


class SpecialisationDiagram(eqx.Module):
    """Where the two-head flow ends over lam0 x d (`specialisation_diagram`).

    **Fields:**

    - `lams` (a,), `ds` (b,): the grid; `n`: starts per cell; `times` (saves,): the saved times, up to the horizon.
    - `outcomes` (a, b, n): each start's end classified (an index into `OUTCOMES`; -1 where the solve failed).
    - `shares` (a, b, 4): each outcome's share of the cell's solved starts.
    - `plateau` (a, b, n): the first saved time at which some head takes a location (inf if none does by the end).
    - the experiment's other settings: `L`, `gamma`, `eps`, `rate`, `lr`, `until`, `k_threshold`, `v_threshold`.
    """

    lams: np.ndarray
    ds: np.ndarray
    n: int
    times: np.ndarray
    outcomes: np.ndarray
    shares: np.ndarray
    plateau: np.ndarray
    L: int
    gamma: float
    eps: float
    rate: float
    lr: float
    until: float
    k_threshold: float
    v_threshold: float

    def median_plateau(self) -> np.ndarray:
        """(a, b): the median plateau of each cell (inf where fewer than half its starts leave it)."""
        return np.median(self.plateau, axis=-1)

    def plateau_slope(self, lam_index: int) -> tuple[float, float]:
        """The least-squares slope and intercept of the median plateau against ln d at lams[lam_index] (cells where
        at least half the starts leave the plateau), or NaNs where fewer than two such cells."""
        median = self.median_plateau()[lam_index]
        finite = np.isfinite(median)
        if finite.sum() < 2:
            return math.nan, math.nan
        slope, intercept = np.polyfit(np.log(self.ds[finite]), median[finite], 1)
        return float(slope), float(intercept)


def two_head_problem(lam0: float, d: int, L: int, gamma: float, eps: float, rate: float, lr: float, until: float):
    """The authors' two-head task (H = S = 2, erf, Marion et al.'s tokens) with their schedule from `lam0`."""
    schedule = InverseTimeDecay(lam0, rate, lr, until=until)
    return HeadsProblem(marion_slr(d, L, gamma, eps, locations=2), heads=2, lam=schedule)


def specialisation_diagram(
    lams=(0.5, 1.0, 2.0, 4.0),
    ds=(20, 40, 80, 160, 320),
    *,
    n: int = 100,
    key=0,
    L: int = 10,
    gamma: float = math.sqrt(0.5),
    eps: float = 0.1,
    rate: float = 2e-4,
    lr: float = 1e-3,
    until: float = 25_000,
    steps: int = 100_000,
    saves: int = 201,
    k_threshold: float = K_THRESHOLD,
    v_threshold: float = V_THRESHOLD,
    unit: Callable | None = None,
    log: Callable[[str], None] | None = None,
    force: bool = False,
) -> SpecialisationDiagram:
    """The share of each outcome of the two-head flow (H = S = 2, erf) from uniform starts, over lam0 x d.

    **Arguments:**

    - `lams`: the schedule's initial lam0 (each > 0); `ds`: dimensions (integers >= 8).
    - `n`: starts per cell (>= 1); `key`: a PRNG key or seed (cell (i, j) draws from `fold_in(key, i * len(ds) + j)`).
    - `L`, `gamma`, `eps`: the data (Marion et al.'s tokens, S = 2 locations); `rate`, `lr`, `until`, `steps`: the
      schedule lam0 / (1 + rate step), frozen after step `until`, on the clock t = lr step, to t = lr * steps (the
      authors': 2e-4, 1e-3, 25 000, 100 000).
    - `saves`: saved times, evenly spaced (the plateau's resolution); the thresholds: `classify_heads`'.
    - `unit`: a store of finished work (`flowsim.results.RunRecord.unit`): each cell is one unit.
    - `log`: called with a line per cell; `force`: run even if estimated to take hours.

    **Returns:** a `SpecialisationDiagram`.
    """
    lams = np.array([float(POSITIVE.check("lams", lam)) for lam in np.atleast_1d(lams)])
    ds = np.array([check_count("ds", d, 8) for d in np.atleast_1d(ds)])
    if lams.size == 0 or ds.size == 0:
        raise InvalidInput("lams and ds must each hold at least one value")
    n, saves, steps = check_count("n", n, 1), check_count("saves", saves, 2), check_count("steps", steps, 1)
    k_threshold = check_threshold("k_threshold", k_threshold)
    v_threshold = check_threshold("v_threshold", v_threshold)
    key = as_key(key)
    times = np.linspace(0.0, lr * steps, saves)
    one = two_head_problem(float(lams[0]), int(ds[0]), L, gamma, eps, rate, lr, until)
    cost = one.flow_cost(lams.size * ds.size * n, float(times[-1]), "lower n, or take fewer lams or ds")
    check_work("specialisation_diagram", (), [cost], force=force)
    store = unit if unit is not None else (lambda name, compute: compute())
    outcomes = np.full((lams.size, ds.size, n), -1)
    plateau = np.full((lams.size, ds.size, n), np.inf)
    for i, lam0 in enumerate(lams):
        for j, d in enumerate(ds):
            problem = two_head_problem(float(lam0), int(d), L, gamma, eps, rate, lr, until)
            layout = problem.layout

            def compute(problem=problem, cell=i * ds.size + j):
                starts = sphere_states(jax.random.fold_in(key, cell), problem.layout, problem.d, n)
                solved = solve_flow(problem, starts, times)
                return {"ys": np.asarray(solved.ys), "ok": np.asarray(solved.ok)}

            cell = store(f"lam0={lam0:g}-d={d}", compute)
            ys, ok = cell["ys"], cell["ok"] & np.isfinite(cell["ys"][:, -1]).all(axis=-1)
            ends = classify_heads(np.where(ok[:, None], ys[:, -1], 0.0), layout, k_threshold, v_threshold)
            outcomes[i, j] = np.where(ok, ends, -1)
            taken = (head_locations(np.nan_to_num(ys), layout, k_threshold, v_threshold) >= 0).any(axis=-1)
            first = np.argmax(taken, axis=-1)
            plateau[i, j] = np.where(taken.any(axis=-1) & ok, times[first], np.inf)
            if log is not None:
                solved = outcomes[i, j][outcomes[i, j] >= 0]
                said = ", ".join(f"{name} {np.mean(solved == c):.2f}" for c, name in enumerate(OUTCOMES))
                log(f"lam0 {lam0:g}, d {d}: {said}; median plateau {np.median(plateau[i, j]):.3g}")
    solved = outcomes >= 0
    counts = np.stack([(outcomes == c).sum(axis=-1) for c in range(len(OUTCOMES))], axis=-1)
    shares = counts / np.maximum(solved.sum(axis=-1, keepdims=True), 1)
    return SpecialisationDiagram(
        lams, ds, n, times, outcomes, shares, plateau, L, gamma, eps, rate, lr, until, k_threshold, v_threshold
    )


def specialisation_figure(diagram: SpecialisationDiagram):
    """The diagram as a figure: each outcome's share over lam0 x d (one panel per outcome), and the median plateau
    against d for each lam0.

    **Returns:** a matplotlib Figure (`flowsim_diagram`: the diagram).
    """
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(2, 3, figsize=(13.0, 7.5), layout="constrained")
    axes = grid.ravel()
    for c, (ax, name) in enumerate(zip(axes, OUTCOMES, strict=False)):
        image = ax.imshow(diagram.shares[..., c], origin="lower", vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for i in range(diagram.lams.size):
            for j in range(diagram.ds.size):
                share = diagram.shares[i, j, c]
                ax.text(j, i, f"{share:.2f}", ha="center", va="center", color="w" if share < 0.6 else "k", fontsize=8)
        ax.set(
            xticks=range(diagram.ds.size), xticklabels=[str(d) for d in diagram.ds], xlabel="d",
            yticks=range(diagram.lams.size), yticklabels=[f"{lam:g}" for lam in diagram.lams], ylabel=r"$\lambda_0$",
            title=f"{name} (share of {diagram.n} starts)",
        )  # fmt: skip
    fig.colorbar(image, ax=axes[: len(OUTCOMES)], shrink=0.6)
    ax = axes[len(OUTCOMES)]
    median = diagram.median_plateau()
    for i, lam in enumerate(diagram.lams):
        ax.plot(diagram.ds, median[i], "o-", label=rf"$\lambda_0$ = {lam:g}")
    ax.set(xscale="log", xlabel="d", ylabel="median plateau (flow time)", title="time to leave the plateau")
    ax.set_xticks(diagram.ds, [str(d) for d in diagram.ds])
    ax.minorticks_off()
    ax.legend(fontsize=8)
    for ax in axes[len(OUTCOMES) + 1 :]:
        ax.axis("off")
    fig.flowsim_diagram = diagram
    return fig
