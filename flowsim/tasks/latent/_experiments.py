"""Experiments of docs/science.md section 9, each a result, a table and a figure.

- `attention_error`: L E||attn_a - lim||^2 against L for several a, on the tilted-Gaussian model, against
  its predicted limit e^{a^T Sigma a}(tr Sigma + ||Sigma a||^2) (the plateau of L MSE; MSE ~ L^{-1}).
- `regression_error`: softmax attention (Nadaraya-Watson on unit-norm keys) against kernel (CME) attention as
  estimators of the regression of the values on the keys.
- `location_risk`: on the conjugate location model, the risk of attention's estimate attn_a - sigma^2 a
  and of the posterior mean against L, and their ratio against its predicted limit.

Monte Carlo is vectorised over replicates (in chunks: a chunk of sequences at the largest L is what fits
in memory), one compiled program per L.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import SCALE, InvalidInput, as_key, check_count, check_positive, check_shape
from flowsim._memory import Cost, Need, check_work, float_bytes
from flowsim.results import long_table
from flowsim.tasks.latent._attention import _multihead_attention, kernel_attention, softmax_attention
from flowsim.tasks.latent._models import ConjugateLocation, TiltedGaussian

__all__ = [
    "MIXTURE_STEPS",
    "AttentionError",
    "LocationRisk",
    "MixturePosterior",
    "RegressionError",
    "attention_error",
    "attention_error_figure",
    "attention_error_table",
    "attention_error_work",
    "location_risk",
    "location_risk_figure",
    "location_risk_table",
    "location_risk_work",
    "mixture_posterior",
    "mixture_posterior_figure",
    "mixture_posterior_table",
    "mixture_posterior_work",
    "regression_error",
    "regression_error_table",
    "regression_error_work",
]

#: Sequence elements (replicates x L) drawn at once: a chunk of replicates at a time beyond it.
_CHUNK_ELEMENTS = 2**20


#: Seconds per unit of work, measured on the 2-core CPU of BENCHMARKS.md (section "Estimates before work"; the
#: estimates err long on a faster machine): softmax attention's Monte Carlo per (attention parameter x sequence x
#: token x dimension), kernel attention per (sequence x L^3) of its Cholesky solves, and compiling one program.
ATTENTION_SECONDS = 2.0e-8
KERNEL_SECONDS = 2.0e-9
COMPILE_SECONDS = 1.0
#: The read-out's Adam per (step x training sequence x feature x component).
READOUT_SECONDS = 2.0e-9
#: Adam steps of the mixture experiment's read-out.
MIXTURE_STEPS = 1000
#: The largest exponent a^T Sigma a (or sigma^2 |a|^2) whose e^{...} in the predicted constants is a float64.
_LARGEST_TILT = 700.0


def _chunk(L: int, replicates: int) -> int:
    return max(1, min(replicates, _CHUNK_ELEMENTS // L))


def _monte_carlo_work(what: str, Ls, replicates: int, width: int, outputs: int, names: dict) -> tuple[list, list]:
    """Memory and time of a Monte Carlo over chunks of sequences (`_over_chunks`) at each L.

    `width`: values per token (keys, values and intermediates); `outputs`: errors kept per sequence;
    `names`: {"Ls": ..., "replicates": ...} as the caller's user knows them (e.g. the options).
    """
    Ls = [int(L) for L in Ls]
    L = max(Ls)
    chunk = _chunk(L, replicates)
    needs = [
        Need(
            f"a chunk of sequences ({chunk} x L {L} x {width} values)",
            float_bytes(chunk, L, width),
            f"lower the largest L ({names['Ls']})" + (f" or {names['d']}" if names.get("d") else ""),
        ),
        Need(  # the chunks' outputs, joined, and their copy on the host
            f"the squared errors ({outputs} x {replicates} sequences, three copies)",
            float_bytes(3, outputs, replicates),
            f"lower {names['replicates']}",
        ),
    ]
    costs = [
        Cost(
            f"{what} ({outputs} x {replicates} sequences x {sum(Ls)} tokens in all x {width} values)",
            ATTENTION_SECONDS * outputs * replicates * sum(Ls) * width,
            f"lower {names['replicates']} or the Ls ({names['Ls']})",
        ),
        Cost(f"compiling ({len(Ls)} programs, one per L)", COMPILE_SECONDS * len(Ls), f"give fewer Ls ({names['Ls']})"),
    ]
    return needs, costs


def _check_tilts(tilts, name: str, what: str) -> None:
    """Refuse attention parameters whose predicted constant e^{tilt} overflows (it would read inf)."""
    for norm, tilt in tilts:
        if not tilt <= _LARGEST_TILT:
            raise InvalidInput(
                f"{name} must give {what} <= {_LARGEST_TILT:g} (its e^(...) in the predicted limit a float64), got "
                f"{what} = {tilt:.4g} at |a| = {norm:g}"
            )


def _over_chunks(errors, key, L: int, replicates: int):
    """`errors(key, chunk)` (a pytree of arrays (..., chunk)) over enough chunks of sequences for `replicates`:
    the same pytree with the chunks joined, (..., replicates)."""
    chunk = _chunk(L, replicates)
    outputs = jax.lax.map(lambda k: errors(k, chunk), jax.random.split(key, -(-replicates // chunk)))
    return jax.tree.map(lambda x: jnp.moveaxis(x, 0, -2).reshape(*x.shape[1:-1], -1)[..., :replicates], outputs)


def _mean_and_stderr(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the last axis."""
    return values.mean(-1), values.std(-1, ddof=1) / np.sqrt(values.shape[-1])


class AttentionError(eqx.Module):
    """The result of `attention_error`.

    **Fields:** `Ls` (L,); `a` (the attention parameters, (A, d)); `scaled_mse` and `stderr` (L E||attn_a -
    lim||^2 and its standard error, (A, L)); `predicted` (its L -> oo limit, (A,)); `replicates`.
    """

    Ls: np.ndarray
    a: np.ndarray
    scaled_mse: np.ndarray
    stderr: np.ndarray
    predicted: np.ndarray
    replicates: int


@functools.partial(jax.jit, static_argnames=("L", "replicates"))
def _squared_errors(model, location, a, key, L: int, replicates: int):
    """||attn_a - lim||^2 for each a (rows of `a`) on the same `replicates` sequences: (A, replicates)."""
    limits = jax.vmap(model.attention_limit, in_axes=(None, 0))(location, a)

    def errors(key, chunk):
        keys, values = model.draw(key, location, L, chunk)
        attended = jax.vmap(softmax_attention, in_axes=(0, None, None))(a, keys, values)  # (A, chunk, d_v)
        return jnp.sum((attended - limits[:, None, :]) ** 2, axis=-1)

    return _over_chunks(errors, key, L, replicates)


def attention_error_work(model: TiltedGaussian, a, Ls, replicates: int, names=None) -> tuple[list, list]:
    """The memory and time `attention_error` needs (`flowsim._memory.check_work`), checked before any work.

    Also refuses attention parameters whose predicted limit overflows (a^T Sigma a > 700). `names`: how the
    caller's user knows the arguments ({"a": ..., "Ls": ..., "replicates": ...}; default the arguments' names).
    """
    names = {"a": "a", "Ls": "Ls", "replicates": "replicates"} | (names or {})
    a = np.atleast_2d(np.asarray(a, dtype=float))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, in one line
        tilts = [(np.linalg.norm(row), float(row @ model.Sigma @ row)) for row in a]
    _check_tilts(tilts, names["a"], "a^T Sigma a")
    width = 2 * (model.d + model.B.shape[0]) + len(a)  # keys, values, their draws, and the scores
    return _monte_carlo_work("softmax attention", Ls, replicates, width, len(a), names)


def attention_error(key, model: TiltedGaussian, location, a, Ls, replicates: int = 2000) -> AttentionError:
    """L E||attn_a - B(location + Sigma a) - c||^2 by Monte Carlo at each L, for each attention parameter.

    **Arguments:**

    - `key`: a PRNG key or seed; `model`: the tilted-Gaussian model; `location`: mu_z, (d,).
    - `a`: the attention parameters, (A, d) (or (d,)); `Ls`: the input lengths; `replicates`: sequences per L.

    **Returns:** an `AttentionError`.
    """
    key, replicates = as_key(key), check_count("replicates", replicates, 2)
    a = np.atleast_2d(np.asarray(a, dtype=float))
    if a.shape[1] != model.d or not np.isfinite(a).all():
        raise InvalidInput(f"a must be finite attention parameters of shape (A, {model.d}), got shape {a.shape}")
    Ls = np.array([check_count("Ls", L, 1) for L in Ls])
    location = check_shape("location", location, (model.d,), "(d,) = ")
    check_work("attention_error", *attention_error_work(model, a, Ls, replicates))
    location = jnp.asarray(location)
    scaled, stderr = [], []
    for L in Ls:
        errors = np.asarray(
            _squared_errors(model, location, jnp.asarray(a), jax.random.fold_in(key, int(L)), int(L), replicates)
        )
        mean, se = _mean_and_stderr(int(L) * errors)
        scaled.append(mean)
        stderr.append(se)
    predicted = np.array([float(model.error_constant(jnp.asarray(row))) for row in a])
    return AttentionError(Ls, a, np.array(scaled).T, np.array(stderr).T, predicted, replicates)


def attention_error_table(result: AttentionError) -> dict[str, np.ndarray]:
    """One row per (a, L): |a|, L MSE, its standard error, the predicted limit."""
    norms = np.linalg.norm(result.a, axis=-1)
    values = {"scaled_mse": result.scaled_mse, "stderr": result.stderr, "predicted_limit": result.predicted[:, None]}
    return long_table([{"a_norm": norms}, {"L": result.Ls}], values)


def attention_error_figure(result: AttentionError, regression: "RegressionError | None" = None):
    """The MSE against L with the predicted constant / L lines; L MSE against L with its plateau; with
    `regression`, a third panel: softmax against kernel (CME) attention as regression estimators."""
    import matplotlib.pyplot as plt

    panels = 2 if regression is None else 3
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.8), layout="constrained")
    for row, (scaled, se, limit) in enumerate(zip(result.scaled_mse, result.stderr, result.predicted, strict=True)):
        label = f"|a| = {np.linalg.norm(result.a[row]):.2f}"
        line = axes[0].errorbar(result.Ls, scaled / result.Ls, yerr=2 * se / result.Ls, fmt="o", ms=4, label=label)
        colour = line[0].get_color()
        axes[0].plot(result.Ls, limit / result.Ls, "-", color=colour, lw=1)
        axes[1].errorbar(result.Ls, scaled, yerr=2 * se, fmt="o-", ms=4, color=colour, label=label)
        axes[1].axhline(limit, color=colour, ls="--", lw=1)
    axes[0].set(xscale="log", yscale="log", xlabel="input length L", ylabel=r"$E\|attn_a - \lim\|^2$")
    axes[0].set_title("Attention's error (lines: the predicted limit / L)")
    axes[1].set(xscale="log", xlabel="input length L", ylabel=r"$L \cdot E\|attn_a - \lim\|^2$")
    axes[1].set_title(r"Its plateau (dashed: $e^{a^T\Sigma a}(\mathrm{tr}\,\Sigma + \|\Sigma a\|^2)$)")
    if regression is not None:
        for name, mse, se in (
            ("softmax, a = q/h² (Nadaraya-Watson)", regression.softmax, regression.softmax_stderr),
            (f"kernel (CME), ridge {regression.ridge:g}", regression.kernel, regression.kernel_stderr),
        ):
            axes[2].errorbar(regression.Ls, mse, yerr=2 * se, fmt="o-", ms=4, label=name)
        axes[2].set(xscale="log", yscale="log", xlabel="input length L", ylabel=r"$E\|estimate - E[v \mid k = q]\|^2$")
        axes[2].set_title(f"Regression of v on unit-norm keys, h = {regression.bandwidth:g}")
    for ax in axes:
        ax.legend(fontsize=9)
    counted = f"{result.replicates} sequences per point" + (
        "" if regression is None else f" ({regression.replicates} in the regression panel)"
    )
    fig.text(0.5, -0.02, f"{counted}; error bars: 2 standard errors", ha="center")
    return fig


def regression_error_table(result: "RegressionError") -> dict[str, np.ndarray]:
    """One row per L: the squared errors of softmax and kernel attention, with their standard errors."""
    return {
        "L": result.Ls,
        "softmax_mse": result.softmax,
        "softmax_stderr": result.softmax_stderr,
        "kernel_mse": result.kernel,
        "kernel_stderr": result.kernel_stderr,
    }


class LocationRisk(eqx.Module):
    """The result of `location_risk`.

    **Fields:** `Ls`; `a_norms`; `attention` and `attention_stderr` (E||attn_a - sigma^2 a - z||^2, (A, L));
    `posterior` and `posterior_stderr` (the posterior mean's, (L,)); `bayes` (the closed form, (L,));
    `ratio_limit` (the predicted limit of attention over Bayes, (A,)); `replicates`.
    """

    Ls: np.ndarray
    a_norms: np.ndarray
    attention: np.ndarray
    attention_stderr: np.ndarray
    posterior: np.ndarray
    posterior_stderr: np.ndarray
    bayes: np.ndarray
    ratio_limit: np.ndarray
    replicates: int


@functools.partial(jax.jit, static_argnames=("L", "replicates"))
def _location_errors(model, a, key, L: int, replicates: int):
    """Squared errors of attention's estimates (one per row of a) and of the posterior mean: (A, n), (n,)."""

    def errors(key, chunk):
        z, keys = model.sample(key, L, chunk)
        attended = jax.vmap(softmax_attention, in_axes=(0, None, None))(a, keys, keys)  # values = keys
        estimate = jax.vmap(model.attention_estimate)(attended, a)
        posterior = model.posterior_mean(keys)
        return jnp.sum((estimate - z) ** 2, -1), jnp.sum((posterior - z) ** 2, -1)

    return _over_chunks(errors, key, L, replicates)


def location_risk_work(model: ConjugateLocation, a_norms, Ls, replicates: int, names=None) -> tuple[list, list]:
    """The memory and time `location_risk` needs (`flowsim._memory.check_work`), checked before any work.

    Also refuses |a| whose predicted ratio overflows (sigma^2 |a|^2 > 700). `names`: as in `attention_error_work`.
    """
    names = {"a": "a_norms", "Ls": "Ls", "replicates": "replicates", "d": "d"} | (names or {})
    norms = np.atleast_1d(np.asarray(a_norms, dtype=float))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, in one line
        tilts = [(norm, model.sigma**2 * norm**2) for norm in norms]
    _check_tilts(tilts, names["a"], "sigma^2 |a|^2")
    return _monte_carlo_work("attention and the posterior mean", Ls, replicates, 3 * model.d, len(norms) + 1, names)


def location_risk(key, model: ConjugateLocation, a_norms, Ls, replicates: int = 2000) -> LocationRisk:
    """The risks of attention (a = |a| e_1: the model is rotation invariant) and of the posterior mean against L.

    **Arguments:** `key`; `model`: the conjugate location model; `a_norms`: the |a| to try; `Ls`;
    `replicates`: sequences per L.

    **Returns:** a `LocationRisk`.
    """
    key, replicates = as_key(key), check_count("replicates", replicates, 2)
    a_norms = np.atleast_1d(np.asarray(a_norms, dtype=float))
    if not (np.isfinite(a_norms).all() and (a_norms >= 0).all()):
        raise InvalidInput(f"a_norms must be finite numbers >= 0, got {a_norms.tolist()}")
    Ls = np.array([check_count("Ls", L, 1) for L in Ls])
    check_work("location_risk", *location_risk_work(model, a_norms, Ls, replicates))
    a = jnp.zeros((len(a_norms), model.d)).at[:, 0].set(a_norms)
    attention, attention_se, posterior, posterior_se = [], [], [], []
    for L in Ls:
        errors, post = _location_errors(model, a, jax.random.fold_in(key, int(L)), int(L), replicates)
        for store, se_store, values in ((attention, attention_se, errors), (posterior, posterior_se, post)):
            mean, se = _mean_and_stderr(np.asarray(values))
            store.append(mean)
            se_store.append(se)
    bayes = np.array([float(model.bayes_risk(int(L))) for L in Ls])
    ratio = np.array([float(model.attention_ratio_limit(n)) for n in a_norms])
    return LocationRisk(
        Ls, a_norms, np.array(attention).T, np.array(attention_se).T, np.array(posterior), np.array(posterior_se),
        bayes, ratio, replicates,
    )  # fmt: skip


def location_risk_table(result: LocationRisk) -> dict[str, np.ndarray]:
    """One row per (|a|, L): attention's risk, the posterior mean's, the Bayes risk, their ratio, its limit."""
    values = {  # long_table broadcasts the per-L columns (L,) and the per-|a| limit (A, 1) to the grid
        "attention_risk": result.attention,
        "attention_stderr": result.attention_stderr,
        "posterior_mean_risk": result.posterior,
        "bayes_risk": result.bayes,
        "ratio_to_bayes": result.attention / result.bayes,
        "ratio_limit": result.ratio_limit[:, None],
    }
    return long_table([{"a_norm": result.a_norms}, {"L": result.Ls}], values)


def location_risk_figure(result: LocationRisk):
    """Two panels: the risks against L (attention per |a|, posterior mean, Bayes closed form); attention's risk
    over the Bayes risk against L with its predicted limits."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained")
    axes[0].plot(result.Ls, result.bayes, "k-", lw=2, label="Bayes risk (closed form)")
    axes[0].errorbar(
        result.Ls, result.posterior, yerr=2 * result.posterior_stderr, fmt="ks", ms=4, label="posterior mean"
    )
    for norm, risk, se, limit in zip(
        result.a_norms, result.attention, result.attention_stderr, result.ratio_limit, strict=True
    ):
        line = axes[0].errorbar(result.Ls, risk, yerr=2 * se, fmt="o", ms=4, label=f"attention, |a| = {norm:g}")
        colour = line[0].get_color()
        axes[1].errorbar(result.Ls, risk / result.bayes, yerr=2 * se / result.bayes, fmt="o-", ms=4, color=colour,
                         label=f"|a| = {norm:g}")  # fmt: skip
        axes[1].axhline(limit, color=colour, ls="--", lw=1)
    axes[0].set(xscale="log", yscale="log", xlabel="input length L", ylabel="risk of the estimate of z")
    axes[0].set_title("Estimating the latent location")
    axes[1].set(xscale="log", xlabel="input length L", ylabel="attention's risk / Bayes risk")
    axes[1].set_title(r"Ratio (dashed: $e^{\sigma^2|a|^2}(1 + \sigma^2|a|^2/d)$)")
    for ax in axes:
        ax.legend(fontsize=9)
    return fig


class RegressionError(eqx.Module):
    """The result of `regression_error`.

    **Fields:** `Ls`; `softmax` and `kernel` (E||estimate - (Bq + c)||^2 of softmax attention with a = q / h^2,
    the Nadaraya-Watson estimator, and of kernel (CME) attention, (L,)); `softmax_stderr`, `kernel_stderr`;
    `bandwidth`, `ridge`, `replicates`.
    """

    Ls: np.ndarray
    softmax: np.ndarray
    softmax_stderr: np.ndarray
    kernel: np.ndarray
    kernel_stderr: np.ndarray
    bandwidth: float
    ridge: float
    replicates: int


@functools.partial(jax.jit, static_argnames=("L", "replicates"))
def _regression_errors(B, c, noise, query, bandwidth, ridge, key, L: int, replicates: int):
    key_k, key_v = jax.random.split(key)
    keys = jax.random.normal(key_k, (replicates, L, query.shape[0]))
    keys = keys / jnp.linalg.norm(keys, axis=-1, keepdims=True)  # uniform on the unit sphere
    values = keys @ B.T + c + noise * jax.random.normal(key_v, (replicates, L, B.shape[0]))
    target = B @ query + c
    softmax = softmax_attention(query / bandwidth**2, keys, values)
    kernel = jax.vmap(kernel_attention, in_axes=(None, 0, 0, None, None))(query, keys, values, bandwidth, ridge)
    return jnp.sum((softmax - target) ** 2, -1), jnp.sum((kernel - target) ** 2, -1)


def regression_error_work(Ls, replicates: int, d: int, names=None) -> tuple[list, list]:
    """The memory and time `regression_error` needs (`flowsim._memory.check_work`): its Gram matrices (an L x L
    solve per sequence) dominate. `names`: {"Ls": ..., "replicates": ...} as the caller's user knows them."""
    names = {"Ls": "the largest L of kernel attention", "replicates": "replicates"} | (names or {})
    Ls = [int(L) for L in Ls]
    L = max(Ls)
    needs = [
        Need(
            f"the Gram matrices ({replicates} sequences x L {L} x L {L})",
            float_bytes(2, replicates, L, L),
            f"lower {names['Ls']} or {names['replicates']}",
        )
    ]
    costs = [
        Cost(
            f"kernel attention's solves ({replicates} sequences x sum of L^3 {sum(L**3 for L in Ls):.3g})",
            KERNEL_SECONDS * replicates * sum(L**3 + L**2 * d for L in Ls),
            f"lower {names['Ls']} or {names['replicates']}",
        ),
        Cost(f"compiling ({len(Ls)} programs, one per L)", COMPILE_SECONDS * len(Ls), f"lower {names['Ls']}"),
    ]
    return needs, costs


def regression_error(key, B, c, noise: float, query, Ls, *, bandwidth: float = 0.5, ridge: float = 1e-3,
                     replicates: int = 200) -> RegressionError:  # fmt: skip
    """Softmax attention against kernel (CME) attention as estimators of the regression E[v | k = q] = Bq + c,
    on keys uniform on the unit sphere and values v = Bk + c + noise N(0, I).

    On unit-norm keys softmax attention with a = q / h^2 is the Nadaraya-Watson estimator of bandwidth h; kernel
    attention is the kernel ridge regression with the same Gaussian kernel and ridge `ridge` (an L x L solve:
    keep L to a few thousand).

    **Arguments:** `key`; `B` (d_v, d), `c` (d_v,), `noise` >= 0; `query` (d,), normalised here; `Ls`;
    `bandwidth` h > 0; `ridge` > 0; `replicates`: sequences per L.

    **Returns:** a `RegressionError`.
    """
    key, replicates = as_key(key), check_count("replicates", replicates, 2)
    B = np.atleast_2d(np.asarray(B, dtype=float))
    query = np.asarray(query, dtype=float)
    if query.shape != (B.shape[1],) or not np.linalg.norm(query) > 0:
        raise InvalidInput(f"query must be a non-zero vector of shape ({B.shape[1]},), got {query.tolist()}")
    bandwidth, ridge = SCALE.check("bandwidth", bandwidth), SCALE.check("ridge", ridge)
    Ls = np.array([check_count("Ls", L, 1) for L in Ls])
    check_work("regression_error", *regression_error_work(Ls, replicates, B.shape[1]))
    arrays = [
        jnp.asarray(x) for x in (B, np.broadcast_to(np.asarray(c, float), B.shape[:1]), query / np.linalg.norm(query))
    ]
    softmax, kernel = [], []
    for L in Ls:
        errors = _regression_errors(*arrays[:2], noise, arrays[2], bandwidth, ridge, jax.random.fold_in(key, int(L)),
                                    int(L), replicates)  # fmt: skip
        softmax.append(_mean_and_stderr(np.asarray(errors[0])))
        kernel.append(_mean_and_stderr(np.asarray(errors[1])))
    (s_mean, s_se), (k_mean, k_se) = (np.array(x).T for x in (softmax, kernel))
    return RegressionError(Ls, s_mean, s_se, k_mean, k_se, bandwidth, ridge, replicates)


class MixturePosterior(eqx.Module):
    """The result of `mixture_posterior`.

    **Fields:** `Ls`; `heads` (the numbers of heads tried); `head_parameters` (every head's a, (H_max, d));
    `tv` and `tv_stderr` (mean total variation between the read-out's posterior and the exact one on held-out
    sequences, (heads, L)); `prior_tv` (the prior's, (L,)).
    """

    Ls: np.ndarray
    heads: np.ndarray
    head_parameters: np.ndarray
    tv: np.ndarray
    tv_stderr: np.ndarray
    prior_tv: np.ndarray


def _fit_readout(features, targets, steps: int, lr: float):
    """Multinomial logistic regression of the exact posteriors on standardised features (full-batch Adam on the
    soft cross-entropy); returns the fitted posterior map."""
    import optax

    mean, scale = features.mean(0), features.std(0) + 1e-12
    x = (features - mean) / scale
    params = (jnp.zeros((x.shape[1], targets.shape[1])), jnp.zeros(targets.shape[1]))
    optimiser = optax.adam(lr)

    def loss(params):
        return jnp.mean(optax.softmax_cross_entropy(x @ params[0] + params[1], targets))

    def step(carry, _):
        params, state = carry
        updates, state = optimiser.update(jax.grad(loss)(params), state, params)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, optimiser.init(params)), None, length=steps)
    return lambda f: jax.nn.softmax(((f - mean) / scale) @ params[0] + params[1], axis=-1)


def mixture_posterior_work(mixture, Ls, heads, n_train: int, n_test: int, steps: int, names=None):
    """The memory and time `mixture_posterior` needs (`flowsim._memory.check_work`), checked before any work.

    `names`: how the caller's user knows the arguments ({"Ls", "heads", "n_train", "n_test", "steps"}).
    """
    names = {name: name for name in ("Ls", "heads", "n_train", "n_test", "steps")} | (names or {})
    Ls, heads = [int(L) for L in Ls], [int(H) for H in heads]
    L, H = max(Ls), max(heads)
    d, K = mixture.locations.shape[1], len(mixture.weights)
    n = n_train + n_test
    sizes = f"lower {names['n_train']} or {names['n_test']}"
    needs = [
        Need(f"the sequences ((n {n_train} + {n_test}) x L {L} x d {d}, twice)", float_bytes(2, n, L, d),
             f"{sizes}, or the largest L ({names['Ls']})"),
        Need(f"the heads' outputs ((n {n_train} + {n_test}) x {H} heads x d {d}, three copies)",
             float_bytes(3, n, H, d), f"{sizes}, or the most heads ({names['heads']})"),
    ]  # fmt: skip
    costs = [
        Cost(
            f"the heads' attention ({n} sequences x {sum(Ls)} tokens in all x {H} heads x d {d})",
            ATTENTION_SECONDS * n * sum(Ls) * (H + 2) * d,
            f"{sizes}, or the Ls ({names['Ls']})",
        ),
        Cost(
            f"the read-outs' fits ({steps} steps x n {n_train} x {sum(heads) * d} features in all x {K} components, "
            f"at {len(Ls)} L)",
            READOUT_SECONDS * len(Ls) * steps * n_train * sum(heads) * d * K,
            f"lower {names['n_train']}, {names['steps']} or the heads ({names['heads']})",
        ),
        Cost(
            f"compiling ({len(Ls) * (len(heads) + 2)} programs)",
            COMPILE_SECONDS * len(Ls) * (len(heads) + 2),
            f"give fewer Ls or heads ({names['Ls']}, {names['heads']})",
        ),
    ]
    return needs, costs


def mixture_posterior(
    key, mixture, Ls, heads=(1, 2, 3), *, tilt: float = 1.0, n_train: int = 4000, n_test: int = 4000,
    steps: int = MIXTURE_STEPS, lr: float = 0.05,
) -> MixturePosterior:  # fmt: skip
    """Multi-head attention with a linear read-out against the exact posterior of a mixture, per L and heads.

    Head 1 is uniform attention (a = 0, the keys' mean); head h > 1 tilts by `tilt` along a coordinate axis, and
    its output minus the first head's estimates scale^2 * a: the heads see the components' scales, which the mean
    alone cannot. The read-out (`_fit_readout`) is fitted to the exact posteriors of n_train sequences and
    evaluated on n_test others.

    **Arguments:** `key`; `mixture`: a `LocationMixture`; `Ls`; `heads`: numbers of heads (each >= 1); `tilt` > 0;
    `n_train`; `n_test` (>= 2, for the standard error); `steps`, `lr`: the read-out's Adam.

    **Returns:** a `MixturePosterior`.
    """
    key = as_key(key)
    Ls = np.array([check_count("Ls", L, 1) for L in Ls])
    heads = np.array([check_count("heads", h, 1) for h in heads])
    tilt = check_positive("tilt", tilt)
    n_train, steps = (check_count(n, v, 1) for n, v in (("n_train", n_train), ("steps", steps)))
    n_test = check_count("n_test", n_test, 2)  # the standard error of the mean distance needs two
    check_work("mixture_posterior", *mixture_posterior_work(mixture, Ls, heads, n_train, n_test, steps))
    d = mixture.locations.shape[1]
    directions = [np.zeros(d)] + [tilt * np.sign(0.5 - (h // d) % 2) * np.eye(d)[h % d] for h in range(heads.max() - 1)]
    A = np.stack(directions)
    prior = jnp.asarray(mixture.weights)
    tv, tv_se, prior_tv = np.empty((len(heads), len(Ls))), np.empty((len(heads), len(Ls))), np.empty(len(Ls))
    for j, L in enumerate(Ls):
        key_train, key_test = jax.random.split(jax.random.fold_in(key, int(L)))
        _, train_keys = mixture.sample(key_train, int(L), n_train)
        _, test_keys = mixture.sample(key_test, int(L), n_test)
        exact_train, exact_test = mixture.posterior(train_keys), mixture.posterior(test_keys)
        prior_tv[j] = float(0.5 * jnp.mean(jnp.sum(jnp.abs(exact_test - prior), -1)))
        # Unchecked (the public function's finiteness check is a copy to the host): the data are the experiment's.
        train_all = _multihead_attention(jnp.asarray(A), train_keys, train_keys)  # (n, H_max, d)
        test_all = _multihead_attention(jnp.asarray(A), test_keys, test_keys)
        for i, H in enumerate(heads):
            fitted = _fit_readout(train_all[:, :H].reshape(n_train, -1), exact_train, steps, lr)
            distance = 0.5 * np.asarray(jnp.sum(jnp.abs(fitted(test_all[:, :H].reshape(n_test, -1)) - exact_test), -1))
            tv[i, j], tv_se[i, j] = _mean_and_stderr(distance)
    return MixturePosterior(Ls, heads, A, tv, tv_se, prior_tv)


def mixture_posterior_table(result: MixturePosterior) -> dict[str, np.ndarray]:
    """One row per (heads, L): the total variation to the exact posterior, its standard error, the prior's."""
    values = {"total_variation": result.tv, "stderr": result.tv_stderr, "prior_total_variation": result.prior_tv}
    return long_table([{"heads": result.heads}, {"L": result.Ls}], values)


def mixture_posterior_figure(result: MixturePosterior):
    """The total variation to the exact posterior against L, one line per number of heads, and the prior's."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
    ax.plot(result.Ls, result.prior_tv, "k--", label="the prior (no data)")
    for H, tv, se in zip(result.heads, result.tv, result.tv_stderr, strict=True):
        ax.errorbar(
            result.Ls, tv, yerr=2 * se, fmt="o-", ms=4, label=f"{H} head{'s' if H > 1 else ''} + linear read-out"
        )
    ax.set(xscale="log", yscale="log", xlabel="input length L", ylabel="mean total variation to the exact posterior")
    ax.set_title("Multi-head attention against the mixture posterior")
    ax.legend(fontsize=9)
    return fig
