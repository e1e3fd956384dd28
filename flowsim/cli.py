"""The `flowsim` command line."""

import argparse
import sys

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    import jax

    from flowsim import slr

    problem = slr.Problem(d=args.d, L=args.L, lam=args.lam, gamma=args.gamma, eps=args.eps)
    key_truth, key_bayes, key_random = jax.random.split(jax.random.key(args.seed), 3)
    truth = slr.ground_truth(key_truth, problem.d)
    k, v = jax.random.normal(key_random, (2, problem.d))
    k, v = k / jax.numpy.linalg.norm(k), v / jax.numpy.linalg.norm(v)
    random_overlaps = slr.overlaps(k, v, truth)
    bayes = slr.bayes_risk(problem, truth, key_bayes, args.bayes_samples)
    rows = [
        ("oracle (k, v) = (k*, v*)", f"{float(slr.oracle_risk(problem)):.6f}", "closed form"),
        ("best linear predictor", f"{slr.linear_risk(problem):.6f}", "closed form"),
        ("Bayes predictor", f"{bayes.mean:.3e} ± {bayes.stderr:.1e}", f"Monte Carlo, n = {bayes.n}"),
        (
            "random (k, v) on the sphere",
            f"{float(slr.population_risk(problem, random_overlaps)):.6f}",
            "closed form",
        ),
        ("null predictor T = 0", f"{problem.eps**2 + problem.gamma**2:.6f}", "eps^2 + gamma^2"),
    ]
    print(
        f"Single-location regression: d = {problem.d}, L = {problem.L}, lam = {problem.lam}, "
        f"gamma = {problem.gamma:.4g}, eps = {problem.eps}, seed = {args.seed}"
    )
    print(f"Population risk E[(Y - T)^2] (Bayes risk >= eps^2 = {problem.eps**2:g})\n")
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    header = ("predictor", "risk", "how")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _verify(args: argparse.Namespace) -> int:
    import jax

    from flowsim import slr

    for name, value, minimum in (("n", args.n, 1), ("t-max", args.t_max, 0), ("tol", args.tol, 0)):
        if not value > minimum:
            raise ValueError(f"--{name} must be > {minimum}, got {value}")
    report = slr.verify_convergence(
        slr.default_settings(args.d, args.L),
        key=jax.random.key(args.seed),
        n=args.n,
        t_max=args.t_max,
        tol=args.tol,
        min_share=args.min_share,
        progress=args.progress,
    )
    print(slr.format_report(report))
    return 0 if report.claim_holds else 1


def _compare_init(text: str):
    """--init: "sphere", "manifold", or five comma-separated overlaps kappa,nu,theta,eta,rho."""
    if text in ("sphere", "manifold"):
        return text
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 5:
        raise ValueError(f"--init must be sphere, manifold or five comma-separated overlaps, got {text!r}")
    return values


def _compare(args: argparse.Namespace) -> int:
    import math
    from pathlib import Path

    import jax
    import matplotlib.pyplot as plt

    from flowsim import schedules, slr
    from flowsim.plots import save_figure

    # Checked before anything is compiled, in the options' names (InverseTimeDecay would
    # otherwise report a bad --lr as its step_size).
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {args.lr}")
    if not (math.isfinite(args.decay) and args.decay >= 0):
        raise ValueError(f"--decay must be a finite number >= 0, got {args.decay}")
    if not (math.isfinite(args.attractor_tol) and args.attractor_tol > 0):
        raise ValueError(f"--attractor-tol must be a finite number > 0, got {args.attractor_tol}")
    problem = slr.Problem(d=args.d, L=args.L, lam=args.lam, gamma=args.gamma, eps=args.eps)
    schedule = schedules.InverseTimeDecay(args.lam, args.decay, args.lr) if args.decay > 0 else None
    run = slr.run_sgd(
        problem,
        jax.random.key(args.seed),
        init=_compare_init(args.init),
        lr=args.lr,
        steps=args.steps,
        batch=args.batch,
        schedule=schedule,
        log_every=args.log_every,
        seeds=args.seeds,
    )
    comparison = slr.compare(
        run, problem, schedule=schedule, reference=args.reference, attractor_tol=args.attractor_tol
    )
    lam = f"{args.lam}/(1 + {args.decay:g} step)" if schedule is not None else f"{args.lam}"
    print(
        f"Online SGD: d = {problem.d}, L = {problem.L}, lam = {lam}, gamma = {problem.gamma:.4g}, "
        f"eps = {problem.eps}, init = {args.init}, lr = {args.lr:g}, batch = {args.batch}, "
        f"steps = {args.steps}, seed = {args.seed}\n"
    )
    print(comparison.table())
    figure = slr.overlay_figure(comparison)
    paths = save_figure(figure, Path(args.out) / "compare")
    plt.close(figure)
    print(f"\nOverlay of SGD and the reference: {paths[0]} and {paths[1]}")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    import jax

    from flowsim import slr

    if args.seeds < 1:
        raise ValueError(f"--seeds must be an integer >= 1, got {args.seeds}")
    start = time.perf_counter()
    length = "quick" if args.quick else "full"
    print(f"Reproducing the five reference experiments ({length} length, {args.seeds} seeds, seed {args.seed})")

    def log(line: str) -> None:
        print(f"  [{time.perf_counter() - start:6.1f} s] {line}", file=sys.stderr, flush=True)

    out = Path(args.out)
    results = slr.reproduce(jax.random.key(args.seed), quick=args.quick, seeds=args.seeds, out=out, log=log)
    print()
    print(slr.summary_table(results))
    print(f"\nFigures (PNG and PDF, one per experiment) in {out}/ ({time.perf_counter() - start:.1f} s in all)")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line and exit status 2, without the usage block."""

    def error(self, message):
        self.exit(2, f"flowsim: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="flowsim", description="Dynamics of simplified attention layers.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    demo = commands.add_parser(
        "demo",
        help="risks of the oracle, linear, Bayes and random predictors at the paper's defaults",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument("--d", type=int, default=400, help="token dimension (integer >= 2)")
    demo.add_argument("--L", type=int, default=10, help="number of tokens (integer >= 1)")
    demo.add_argument("--lam", type=float, default=0.1, help="inverse temperature (> 0)")
    demo.add_argument("--gamma", type=float, default=0.5**0.5, help="informative-token scale (> 0)")
    demo.add_argument("--eps", type=float, default=0.0, help="label-noise level (>= 0)")
    demo.add_argument("--seed", type=int, default=0, help="PRNG seed")
    demo.add_argument("--bayes-samples", type=int, default=20_000, help="Monte Carlo samples (>= 2)")
    demo.set_defaults(run=_demo)

    verify = commands.add_parser(
        "verify",
        help="integrate the flow from many starts and check the convergence claims "
        "(exit status 1 if 'almost every start on M converges to +-(k*, v*)' fails)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    verify.add_argument("--d", type=int, default=400, help="token dimension (integer >= 3)")
    verify.add_argument("--L", type=int, default=10, help="number of tokens (integer >= 1)")
    verify.add_argument("--n", type=int, default=64, help="starts per initialisation and setting (>= 1)")
    verify.add_argument("--t-max", type=float, default=1000.0, help="integration horizon (> 0)")
    verify.add_argument("--tol", type=float, default=1e-3, help="distance to +-(k*, v*) counted as converged")
    verify.add_argument("--min-share", type=float, default=0.99, help="share of starts on M that must converge")
    verify.add_argument("--seed", type=int, default=0, help="PRNG seed")
    verify.add_argument("--progress", action="store_true", help="show a progress meter for each solve")
    verify.set_defaults(run=_verify)

    compare = commands.add_parser(
        "compare",
        help="run online SGD in R^d and compare it with the gradient flow from the same start: "
        "print the deviations and draw the overlay",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    compare.add_argument("--d", type=int, default=20, help="token dimension (integer >= 4 with given overlaps)")
    compare.add_argument("--L", type=int, default=10, help="number of tokens (integer >= 1)")
    compare.add_argument("--lam", type=float, default=1.0, help="inverse temperature (> 0), lam at step 0")
    compare.add_argument("--decay", type=float, default=0.0, help="schedule lam / (1 + decay * step) (>= 0)")
    compare.add_argument("--gamma", type=float, default=0.5**0.5, help="informative-token scale (> 0)")
    compare.add_argument("--eps", type=float, default=0.1, help="label-noise level (>= 0)")
    compare.add_argument(
        "--init", default="sphere", help="sphere, manifold, or overlaps kappa,nu,theta,eta,rho (all seeds)"
    )
    compare.add_argument("--lr", type=float, default=5e-4, help="SGD step size (> 0); flow time t = lr * step")
    compare.add_argument("--steps", type=int, default=20_000, help="SGD steps (>= 1)")
    compare.add_argument("--batch", type=int, default=32, help="samples per step (>= 1)")
    compare.add_argument("--log-every", type=int, default=200, help="log every this many steps (divides --steps)")
    compare.add_argument("--seeds", type=int, default=8, help="independent runs (>= 1)")
    compare.add_argument("--reference", choices=("flow", "map"), default="flow", help="gradient flow or PGD map")
    compare.add_argument("--attractor-tol", type=float, default=0.1, help="end-point distance for 'same attractor'")
    compare.add_argument("--seed", type=int, default=0, help="PRNG seed")
    compare.add_argument("--out", default="flowsim-out/compare", help="folder of the overlay figure (PNG and PDF)")
    compare.set_defaults(run=_compare)

    reproduce = commands.add_parser(
        "reproduce",
        help="run the paper's five reference experiments (SPEC.md section 6): print the summary table "
        "and draw the four-panel figure of each",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    reproduce.add_argument(
        "--quick", action="store_true", help="reduced lengths (6000 population steps, 2000 SGD steps)"
    )
    reproduce.add_argument("--seeds", type=int, default=30, help="runs per experiment (>= 1)")
    reproduce.add_argument("--seed", type=int, default=0, help="PRNG seed")
    reproduce.add_argument("--out", default="flowsim-out/reproduce", help="folder of the figures (PNG and PDF)")
    reproduce.set_defaults(run=_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `flowsim` command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except ValueError as error:
        print(f"flowsim {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
