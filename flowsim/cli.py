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
