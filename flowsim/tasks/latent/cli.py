"""The command line of attention as latent-posterior inference: attention's error and risk against L."""

import numpy as np

from flowsim._checks import NOISE, NON_NEGATIVE, POSITIVE, SCALE, at_least
from flowsim.commands import parts
from flowsim.commands.options import Command, comma_separated, estimated, option, output_options, read_only
from flowsim.commands.tables import format_table
from flowsim.tasks import latent

__all__ = ["COMMANDS", "DESCRIPTION"]

DESCRIPTION = "attention as latent-posterior inference: its error against the input length L (Zhang et al., 2022)"

#: The tilted-Gaussian model of docs/science.md section 9 and its attention parameter (|a| = 1.14).
SIGMA_DIAGONAL = (1.0, 0.5, 0.5, 0.25)
A_DIRECTION = (0.8, -0.5, 0.3, 0.6)
DEFAULT_LS = ",".join(str(2**k) for k in range(4, 17))
#: The regression of the softmax-against-kernel comparison: v = B k + noise on unit-norm keys in R^3, at q.
REGRESSION_B = ((1.0, -0.5, 0.25), (0.0, 2.0, 1.0))
REGRESSION_QUERY = (1.0, 1.0, 0.0)


#: The names of the experiments' arguments as options, for their estimates' messages.
_NAMES = {"a": "--norms", "Ls": "--Ls", "replicates": "--replicates", "L": "--Ls", "n": "--ns", "n_test": "--n-test",
          "steps": "--steps", "seeds": "--seeds", "heads": "--heads", "n_train": "--n-train"}  # fmt: skip


def _common(parser, norms: str, what: str) -> None:
    option(parser, "--Ls", comma_separated(at_least(1)), DEFAULT_LS, "input lengths L, comma-separated")
    option(parser, "--norms", comma_separated(NON_NEGATIVE), norms, what)
    option(parser, "--replicates", int, 2000, "sequences per L", at_least(2))


def _error_options(parser) -> None:
    _common(parser, "0.5,1,1.5", "norms |a| of the attention parameter (along a = (.8, -.5, .3, .6) / |.|)")
    option(parser, "--kernel-max-L", int, 1024, "the largest L of the softmax-against-kernel comparison", at_least(0))
    option(parser, "--kernel-replicates", int, 200, "sequences per L of that comparison", at_least(2))
    read_only(
        parser,
        ["--kernel-replicates"],
        "where --kernel-max-L reaches one of --Ls (the comparison's lengths)",
        "raise --kernel-max-L",
        lambda args: any(L <= args.kernel_max_L for L in args.Ls),
    )
    option(parser, "--bandwidth", float, 0.5, "the Gaussian kernel's bandwidth h", SCALE)
    option(parser, "--ridge", float, 1e-3, "kernel attention's ridge lam", SCALE)
    output_options(parser, "latent error")


def _error_setting(args):
    """The model, the attention parameters and the Ls of the kernel comparison."""
    model = latent.TiltedGaussian(np.diag(SIGMA_DIAGONAL))
    direction = np.array(A_DIRECTION) / np.linalg.norm(A_DIRECTION)
    return model, np.outer(args.norms, direction), [L for L in args.Ls if L <= args.kernel_max_L]


def _error_estimate(args):
    model, a, regression_Ls = _error_setting(args)
    needs, costs = latent.attention_error_work(model, a, args.Ls, args.replicates, _NAMES)
    if regression_Ls:
        names = {"Ls": "--kernel-max-L", "replicates": "--kernel-replicates"}
        more = latent.regression_error_work(regression_Ls, args.kernel_replicates, len(REGRESSION_QUERY), names)
        needs, costs = needs + more[0], costs + more[1]
    return needs, costs


def _error(args) -> int:
    import jax

    record = parts.record(args)
    model, a, regression_Ls = _error_setting(args)
    key = jax.random.key(args.seed)
    regression = None
    if regression_Ls:
        what = f"softmax against kernel attention at L <= {args.kernel_max_L}, {args.kernel_replicates} sequences each"
        with record.phase("regression", what):
            regression = latent.regression_error(
                jax.random.fold_in(key, 1), REGRESSION_B, 0.0, 0.5, REGRESSION_QUERY, regression_Ls,
                bandwidth=args.bandwidth, ridge=args.ridge, replicates=args.kernel_replicates,
            )  # fmt: skip
        record.write_csv("regression_error.csv", latent.regression_error_table(regression))
    with record.phase("error", f"L E||attn_a - lim||^2 at {len(args.Ls)} L, {args.replicates} sequences each"):
        result = latent.attention_error(key, model, np.zeros(model.d), a, args.Ls, args.replicates)
    table = latent.attention_error_table(result)
    record.write_csv("attention_error.csv", table)
    parts.save(record, latent.attention_error_figure(result, regression), "attention_error")
    rows = zip(
        [f"{x:.3g}" for x in table["a_norm"]], table["L"], [f"{x:.4g}" for x in table["scaled_mse"]],
        [f"{x:.2g}" for x in table["stderr"]], [f"{x:.4g}" for x in table["predicted_limit"]], strict=True,
    )  # fmt: skip
    print(format_table(("|a|", "L", "L MSE", "stderr", "predicted limit"), rows))
    return parts.finish(record)


def _risk_options(parser) -> None:
    _common(parser, "0,0.5,1", "norms |a| of the attention parameter")
    option(parser, "--d", int, 4, "dimension of the latent location", at_least(1))
    option(parser, "--sigma", float, 1.0, "the keys' noise sigma (--sigma / --tau in [1e-6, 1e6])", SCALE)
    option(parser, "--tau", float, 1.0, "the prior's scale tau", SCALE)
    output_options(parser, "latent risk")


def _risk_model(args):
    latent.check_noise_ratio(args.sigma, args.tau, "--sigma / --tau")
    return latent.ConjugateLocation(args.d, args.tau, args.sigma)


def _risk_estimate(args):
    return latent.location_risk_work(_risk_model(args), args.norms, args.Ls, args.replicates, _NAMES | {"d": "--d"})


def _risk(args) -> int:
    import jax

    record = parts.record(args)
    model = _risk_model(args)
    with record.phase("risk", f"attention and the posterior mean at {len(args.Ls)} L, {args.replicates} each"):
        result = latent.location_risk(jax.random.key(args.seed), model, args.norms, args.Ls, args.replicates)
    table = latent.location_risk_table(result)
    record.write_csv("location_risk.csv", table)
    parts.save(record, latent.location_risk_figure(result), "location_risk")
    rows = zip(
        [f"{x:.3g}" for x in table["a_norm"]], table["L"], [f"{x:.4g}" for x in table["attention_risk"]],
        [f"{x:.4g}" for x in table["bayes_risk"]], [f"{x:.4f}" for x in table["ratio_to_bayes"]],
        [f"{x:.4f}" for x in table["ratio_limit"]], strict=True,
    )  # fmt: skip
    print(format_table(("|a|", "L", "attention risk", "Bayes risk", "ratio", "ratio limit"), rows))
    return parts.finish(record)


def _learn_options(parser) -> None:
    option(parser, "--Ls", comma_separated(at_least(1)), "16,64,256,1024", "input lengths L, comma-separated")
    option(parser, "--ns", comma_separated(at_least(1)), "125,500,2000", "training-set sizes n, comma-separated")
    option(parser, "--d", int, 4, "dimension of the latent location", at_least(2))
    option(parser, "--sigma", float, 1.0, "the keys' noise sigma", SCALE)
    option(parser, "--tau", float, 1.0, "the prior's scale tau", SCALE)
    option(parser, "--eps", float, 0.1, "the label noise eps", NOISE)
    option(parser, "--lr", float, 0.05, "gradient descent's step size (the flow's clock is lr * step)", POSITIVE)
    option(parser, "--steps", int, 400, "gradient-descent steps", at_least(10))
    option(parser, "--seeds", int, 4, "runs per (L, n)", at_least(1))
    output_options(parser, "latent learn")


def _learn_estimate(args):
    task = latent.Readout(args.d, args.tau, args.sigma, args.eps)
    names = _NAMES | {"n_test": None}  # the held-out sequences are the experiment's, not an option
    return latent.readout_learning_work(task, args.Ls, args.ns, steps=args.steps, seeds=args.seeds, names=names)


def _learn(args) -> int:
    import jax

    record = parts.record(args)
    task = latent.Readout(args.d, args.tau, args.sigma, args.eps)
    what = f"gradient descent at {len(args.Ls)} L x {len(args.ns)} n, {args.seeds} seeds, against the flow"
    with record.phase("learn", what):
        result = latent.readout_learning(
            task, jax.random.key(args.seed), args.Ls, args.ns, lr=args.lr, steps=args.steps, seeds=args.seeds
        )
    for failure in result.failures():
        record.fail(f"diverged: {failure.reason}", seed=failure.index, step=failure.step, t=failure.time)
    table = latent.readout_learning_table(result)
    record.write_csv("readout_learning.csv", table)
    parts.save(record, latent.readout_learning_figure(result), "readout_learning")
    columns = ("train_risk", "test_risk", "deviation_from_flow", "bayes_risk")
    rows = zip(table["L"], table["n"], *([f"{x:.4g}" for x in table[c]] for c in columns), strict=True)
    print(format_table(("L", "n", "train risk", "test risk", "deviation", "Bayes risk"), rows))
    return parts.finish(record)


#: The mixture of the multi-head experiment: two components at the origin with scales 1 and 1.6 (the keys' mean
#: cannot tell them apart), a third at (1.5, 0) with scale 1.
MIXTURE_LOCATIONS = ((0.0, 0.0), (0.0, 0.0), (1.5, 0.0))
MIXTURE_SCALES = (1.0, 1.6, 1.0)


def _mixture_options(parser) -> None:
    option(parser, "--Ls", comma_separated(at_least(1)), "4,8,16,32,64,128,256", "input lengths L, comma-separated")
    option(parser, "--heads", comma_separated(at_least(1)), "1,2,3", "numbers of heads, comma-separated")
    option(parser, "--tilt", float, 1.0, "|a| of the tilted heads", POSITIVE)
    option(parser, "--n-train", int, 4000, "sequences the read-out is fitted on", at_least(1))
    option(parser, "--n-test", int, 4000, "held-out sequences (two at least: the standard error)", at_least(2))
    output_options(parser, "latent mixture")


def _mixture_model():
    return latent.LocationMixture(np.array(MIXTURE_LOCATIONS), sigma=np.array(MIXTURE_SCALES))


def _mixture_estimate(args):
    return latent.mixture_posterior_work(
        _mixture_model(), args.Ls, args.heads, args.n_train, args.n_test, latent.MIXTURE_STEPS, _NAMES
    )


def _mixture(args) -> int:
    import jax

    record = parts.record(args)
    mixture = _mixture_model()
    with record.phase("mixture", f"heads {args.heads} against the exact posterior at {len(args.Ls)} L"):
        result = latent.mixture_posterior(
            jax.random.key(args.seed), mixture, args.Ls, args.heads, tilt=args.tilt, n_train=args.n_train,
            n_test=args.n_test,
        )  # fmt: skip
    table = latent.mixture_posterior_table(result)
    record.write_csv("mixture_posterior.csv", table)
    parts.save(record, latent.mixture_posterior_figure(result), "mixture_posterior")
    columns = ("total_variation", "stderr", "prior_total_variation")
    rows = zip(table["heads"], table["L"], *([f"{x:.4g}" for x in table[c]] for c in columns), strict=True)
    print(format_table(("heads", "L", "TV to the posterior", "stderr", "prior's TV"), rows))
    return parts.finish(record)


#: name, what it does (its --help), the function that runs it, the function that adds its options.
COMMANDS = (
    Command(
        "error",
        "attention's error against L on the tilted-Gaussian model, against its predicted 1/L constant",
        estimated(_error, _error_estimate),
        _error_options,
    ),
    Command(
        "risk",
        "attention's and the posterior mean's risk against L on the conjugate location model, and their ratio",
        estimated(_risk, _risk_estimate),
        _risk_options,
    ),
    Command(
        "mixture",
        "multi-head attention with a linear read-out against the exact posterior of a location-scale mixture",
        estimated(_mixture, _mixture_estimate),
        _mixture_options,
    ),
    Command(
        "learn",
        "the supervised read-out <w, attn_a>: gradient descent on n sequences of length L against the L = oo flow, "
        "the train-test gap and the test-risk floor",
        estimated(_learn, _learn_estimate),
        _learn_options,
    ),
)
