"""The scaling law: the critical sample size m*(T) over a range of T, against the limits and three fits.

For each T: m*(T) of the attention head (and of the MLP on the bits, for contrast) with bootstrap
intervals, the information limit log2 C(T, s) and the median ERM identifiability m_50%. Then m* is fitted
against ln T, T and a power of T, each with its R^2 and residuals, reported side by side: over a decade
of T the three are hard to tell apart, over two decades or more they are not.
"""

import time
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import numpy as np

from flowsim._checks import as_key, at_least, check_count
from flowsim.tasks.sparse._critical import critical_sample_size, success_rates
from flowsim.tasks.sparse._data import SparseTarget
from flowsim.tasks.sparse._limits import erm_identifiability, information_limit
from flowsim.tasks.sparse._train import LEARNERS

__all__ = [
    "DEFAULT_TS",
    "MLP_SPAN",
    "MLP_TS",
    "PAPER_POINTS",
    "Fit",
    "Sweep",
    "fit_scaling",
    "sweep",
    "sweep_figure",
    "sweep_table",
]

#: The default input lengths of the head: 16 to 2048, two decades and more.
DEFAULT_TS = (16, 32, 64, 128, 256, 512, 1024, 2048)
#: The MLP's default input lengths and search span: it needs samples growing like T (measured 72 to 543 over
#: T = 16 ... 128), beyond the head's span of 8 log2 C(T, s); at T = 2048 its padded training sets would
#: not fit in memory.
MLP_TS = (16, 32, 64, 128)
MLP_SPAN = 64.0
#: Edelman et al.'s critical sample sizes for the 3-AND, read off their figure by eye (T, m*): about 50 at
#: T = 100 and about 111 at T = 1000 (a one-layer Transformer; their protocol, not this head's).
PAPER_POINTS = ((100, 50.0), (1000, 111.0))


class Fit(NamedTuple):
    """A fit of m* against T: its law, parameters (a, b), R^2 on the m* scale and residuals m* - fitted."""

    law: str
    a: float
    b: float
    r2: float
    residuals: np.ndarray

    def __call__(self, T):
        T = np.asarray(T, float)
        if self.law == "a + b ln T":
            return self.a + self.b * np.log(T)
        if self.law == "a + b T":
            return self.a + self.b * T
        return self.a * T**self.b


def fit_scaling(T, m) -> dict[str, Fit]:
    """Least-squares fits of m* against ln T, T and a power of T (the last on log-log axes).

    **Returns:** {"log": ..., "linear": ..., "power": ...}, each a `Fit` with R^2 = 1 - SS_res / SS_tot on m*.
    """
    T, m = np.asarray(T, float), np.asarray(m, float)
    if len(T) < 3 or not np.isfinite(m).all():
        raise ValueError(f"fitting needs at least 3 finite values of m*, got {m.tolist()}")

    def r2(fitted):
        return 1.0 - np.sum((m - fitted) ** 2) / np.sum((m - m.mean()) ** 2)

    fits = {}
    for name, law, x in (("log", "a + b ln T", np.log(T)), ("linear", "a + b T", T)):
        b, a = np.polyfit(x, m, 1)
        fits[name] = Fit(law, float(a), float(b), float(r2(a + b * x)), m - (a + b * x))
    b, log_a = np.polyfit(np.log(T), np.log(m), 1)
    fitted = np.exp(log_a) * T**b
    fits["power"] = Fit("a T^b", float(np.exp(log_a)), float(b), float(r2(fitted)), m - fitted)
    return fits


class Sweep(eqx.Module):
    """The result of `sweep`.

    **Fields:** `Ts` (every T of the sweep, sorted); `s`; `results` ({learner: tuple of `CriticalSize`, one per
    T it was swept at}); `erm` (median ERM identifiability per T of `Ts`); `information` (log2 C(T, s) per T);
    `fits` ({learner: fits of its m*(T) over the T whose m* is finite, if there are at least 3}); `seconds`
    (per learner).
    """

    Ts: np.ndarray
    s: int
    results: dict
    erm: np.ndarray
    information: np.ndarray
    fits: dict
    seconds: dict


def sweep(
    key,
    Ts=DEFAULT_TS,
    *,
    s: int = 3,
    learners: tuple[str, ...] = ("head",),
    learner_Ts: dict | None = None,
    spans: dict | None = None,
    erm_trials: int = 200,
    log: Callable[[str], None] | None = None,
    **search,
) -> Sweep:
    """m*(T) of each learner over the input lengths, with the limits and the fits.

    **Arguments:**

    - `key`: a PRNG key or seed; `Ts`: the input lengths (each >= s + 1); `s`: the AND's support size.
    - `learners`: of `LEARNERS`; `learner_Ts`: {learner: its own input lengths} for some (default: `Ts`).
    - `spans`: {learner: the search's m_high / m_low} for some (default: `critical_sample_size`'s 8).
    - `erm_trials`: trials of the ERM identifiability at each T.
    - `log`: called with a line per (learner, T) as it finishes.
    - `search`: passed to `critical_sample_size` (seeds, candidates, rounds, steps, lr, ...).

    **Returns:** a `Sweep`.
    """
    key = as_key(key)
    s = check_count("s", s, 1)
    for learner in learners:
        if learner not in LEARNERS:
            raise ValueError(f"learners must hold names of {LEARNERS}, got {learner!r}")
    learner_Ts, spans = learner_Ts or {}, spans or {}
    swept = {
        learner: [at_least(s + 1).check(f"Ts of {learner}", T) for T in learner_Ts.get(learner, Ts)]
        for learner in learners
    }
    every_T = np.array(sorted({T for Ts_ in swept.values() for T in Ts_}))
    erm = np.array([np.median(erm_identifiability(SparseTarget(int(T), s), key, erm_trials)) for T in every_T])
    results, seconds, fits = {}, {}, {}
    for learner in learners:
        began, found = time.perf_counter(), []
        options = search | ({"span": spans[learner]} if learner in spans else {})
        for T in swept[learner]:
            target = SparseTarget(int(T), s)
            found.append(critical_sample_size(target, jax.random.fold_in(key, int(T)), learner=learner, **options))
            if log is not None:
                log(f"{learner}, T = {T}: m* = {found[-1].critical:g} {found[-1].interval}")
        results[learner], seconds[learner] = tuple(found), time.perf_counter() - began
        T_learner = np.array(swept[learner])
        critical = np.array([result.critical for result in found])
        finite = np.isfinite(critical)  # a T where no m up to m_high succeeded is left out of the fits
        if finite.sum() >= 3:
            fits[learner] = fit_scaling(T_learner[finite], critical[finite])
    information = np.array([information_limit(int(T), s) for T in every_T])
    return Sweep(every_T, s, results, erm, information, fits, seconds)


def sweep_table(result: Sweep) -> dict[str, np.ndarray]:
    """One row per learner and T it was swept at: m*, its interval, the ERM median and the information limit."""
    rows = [(learner, r) for learner, found in result.results.items() for r in found]
    at = {int(T): i for i, T in enumerate(result.Ts)}
    return {
        "learner": np.array([learner for learner, _ in rows]),
        "T": np.array([r.T for _, r in rows]),
        "critical_m": np.array([r.critical for _, r in rows]),
        "interval_low": np.array([r.interval[0] for _, r in rows]),
        "interval_high": np.array([r.interval[1] for _, r in rows]),
        "erm_median": np.array([result.erm[at[r.T]] for _, r in rows]),
        "information_limit": np.array([result.information[at[r.T]] for _, r in rows]),
    }


def sweep_figure(result: Sweep):
    """Three panels: m*(T) with intervals, the limits, the fits and the paper's points; the head's success
    rate at each (T, m) tried; its attention mass on the support over training at the largest m tried, per T.

    **Returns:** a matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2), layout="constrained")
    ax = axes[0]
    for learner, found in result.results.items():
        Ts = np.array([r.T for r in found])
        grid = np.geomspace(Ts.min(), Ts.max(), 200)  # each learner's fits over its own range of T
        critical = np.array([r.critical for r in found])
        finite = np.isfinite(critical)
        with np.errstate(invalid="ignore"):  # inf - inf where m* was not reached
            spread = np.array([[c - r.interval[0], r.interval[1] - c] for c, r in zip(critical, found, strict=True)]).T
        spread = np.where(np.isfinite(spread), spread, 0.0)[:, finite]
        line = ax.errorbar(
            Ts[finite],
            critical[finite],
            yerr=spread,
            marker="o",
            capsize=3,
            label=f"{learner}: m* (95 % bootstrap)",
        )
        for r in (r for r, ok in zip(found, finite, strict=True) if not ok):  # not learned up to the largest m tried
            ax.annotate(
                "", (r.T, r.m[-1] * 1.3), (r.T, r.m[-1]), arrowprops={"arrowstyle": "->", "color": line[0].get_color()}
            )
        if not finite.all():
            ax.plot([], [], marker=r"$\uparrow$", ls="", ms=10, color=line[0].get_color(),
                    label=f"{learner}: not learned up to the largest m tried (arrow's base)")  # fmt: skip
        for fit, style in zip(result.fits.get(learner, {}).values(), ("--", "-.", ":"), strict=False):
            ax.plot(
                grid,
                fit(grid),
                style,
                color=line[0].get_color(),
                lw=1,
                label=f"{learner}: {fit.law}, R² = {fit.r2:.3f}",
            )
    ax.plot(result.Ts, result.erm, "k^-", label="ERM identifiability (median)")
    ax.plot(result.Ts, result.information, "k:", label="information limit log2 C(T, s)")
    ax.plot(*zip(*PAPER_POINTS, strict=True), "s", color="tab:brown", label="Edelman et al., read off their figure")
    ax.set(xscale="log", yscale="log", xlabel="input length T", ylabel="samples m")
    ax.set_title(f"Critical sample size, {result.s}-AND")
    ax.legend(fontsize=7)
    if "head" in result.results:
        found = result.results["head"]
        T = np.concatenate([np.full(len(r.m), r.T) for r in found])
        m = np.concatenate([r.m for r in found])
        rates = np.concatenate([success_rates(r.success) for r in found])
        image = axes[1].scatter(T, m, c=rates, cmap="viridis", vmin=0, vmax=1, marker="s", s=40, edgecolors="none")
        axes[1].plot([r.T for r in found], [r.critical for r in found], "r_", ms=18, mew=2, label="m*")
        axes[1].set(xscale="log", yscale="log", xlabel="input length T", ylabel="sample size m tried")
        axes[1].set_title("head: success rate of each size tried")
        axes[1].legend(fontsize=8, loc="upper left")
        fig.colorbar(image, ax=axes[1], label="share of seeds with validation accuracy >= 0.99")
        for r in found:
            axes[2].plot(r.steps, np.nanmedian(r.mass[-1], axis=0), label=f"T = {r.T}, m = {int(r.m[-1])}")
        axes[2].set(xlabel="Adam step", ylabel="attention mass on the support (median over seeds)", ylim=(0, 1))
        axes[2].set_title("head: attention moving onto the support")
        axes[2].legend(fontsize=7)
    return fig
