"""Projected gradient dynamics of (k, v) on S^{d-1} x S^{d-1}, written on the overlaps.

Vectors of span{k*, v*, k, v} are represented by their coefficients in that
(generally non-orthogonal) family, and inner products by its Gram matrix, which
the overlaps fix. Then, from any risk R(kappa, nu, theta, eta, rho):

- grad_k R = R_kappa k* + R_eta v* + R_rho v and grad_v R = R_nu v* + R_theta k* + R_rho k
  (chain rule through the overlaps);
- the Riemannian flow dk/dt = -(I - k k^T) grad_k R, dv/dt = -(I - v v^T) grad_v R;
- each overlap derivative is an inner product, e.g. d kappa/dt = <dk/dt, k*> and
  d rho/dt = <dk/dt, v> + <k, dv/dt>;
- one step of projected gradient descent with renormalisation,
  k' = (k + alpha dk/dt) / |k + alpha dk/dt| (same for v), is exact on the overlaps:
  the new overlaps are inner products of the new vectors.

The five overlaps are the same for every task whose parameters are a key k and a value v
on the sphere, compared with targets k* and v* (single-location regression and its
softmax, linear and softplus attention variants), so they are defined here and the task
files import them. Nothing here depends on the task: it takes the risk as an expression.
"""

import sympy as sp

from .codegen import latex_equation, tidy

__all__ = [
    "ALPHA",
    "MANIFOLD",
    "OVERLAPS",
    "check_manifold_invariant",
    "eta",
    "flow",
    "flow_markdown",
    "gram",
    "invariance_of_manifold",
    "jacobian",
    "kappa",
    "nu",
    "pgd_map",
    "restrict_to_manifold",
    "rho",
    "tangent_velocities",
    "theta",
]

#: The overlaps <k,k*>, <v,v*>, <v,k*>, <k,v*>, <k,v> (docs/science.md section 3), in this order.
kappa, nu, theta, eta, rho = OVERLAPS = sp.symbols("kappa nu theta eta rho", real=True)
#: The step size of projected gradient descent (`pgd_map`).
ALPHA = sp.Symbol("alpha", positive=True)

#: M = {theta = eta = rho = 0}, as a substitution.
MANIFOLD = {theta: 0, eta: 0, rho: 0}

# Coefficient vectors in the family (k*, v*, k, v).
K_STAR, V_STAR, K, V = (sp.Matrix([int(i == j) for j in range(4)]) for i in range(4))


def gram() -> sp.Matrix:
    """The Gram matrix of (k*, v*, k, v) in terms of the overlaps."""
    return sp.Matrix(
        [
            [1, 0, kappa, theta],
            [0, 1, eta, nu],
            [kappa, eta, 1, rho],
            [theta, nu, rho, 1],
        ]
    )


def _inner(x: sp.Matrix, y: sp.Matrix) -> sp.Expr:
    return (x.T * gram() * y)[0, 0]


def tangent_velocities(risk: sp.Expr) -> tuple[sp.Matrix, sp.Matrix]:
    """The coefficient vectors of dk/dt and dv/dt under the projected gradient flow of `risk`."""
    r_kappa, r_nu, r_theta, r_eta, r_rho = (sp.diff(risk, m) for m in OVERLAPS)
    grad_k = r_kappa * K_STAR + r_eta * V_STAR + r_rho * V
    grad_v = r_nu * V_STAR + r_theta * K_STAR + r_rho * K
    dk = -(grad_k - _inner(K, grad_k) * K)
    dv = -(grad_v - _inner(V, grad_v) * V)
    return dk, dv


def flow(risk: sp.Expr) -> tuple[sp.Expr, ...]:
    """d/dt of (kappa, nu, theta, eta, rho) under the projected gradient flow of `risk`."""
    dk, dv = tangent_velocities(risk)
    return (
        _inner(dk, K_STAR),
        _inner(dv, V_STAR),
        _inner(dv, K_STAR),
        _inner(dk, V_STAR),
        _inner(dk, V) + _inner(K, dv),
    )


def pgd_map(risk: sp.Expr, alpha: sp.Symbol) -> tuple[sp.Expr, ...]:
    """The overlaps after one projected gradient step of size alpha with renormalisation.

    k' = (k + alpha dk/dt) / |.|, v' = (v + alpha dv/dt) / |.|, gradients at the
    current point (a simultaneous update of k and v), exactly as in R^d.
    """
    dk, dv = tangent_velocities(risk)
    new_k, new_v = K + alpha * dk, V + alpha * dv
    norm_k, norm_v = sp.sqrt(_inner(new_k, new_k)), sp.sqrt(_inner(new_v, new_v))
    return (
        _inner(new_k, K_STAR) / norm_k,
        _inner(new_v, V_STAR) / norm_v,
        _inner(new_v, K_STAR) / norm_v,
        _inner(new_k, V_STAR) / norm_k,
        _inner(new_k, new_v) / (norm_k * norm_v),
    )


def jacobian(field: tuple[sp.Expr, ...], variables: tuple[sp.Symbol, ...]) -> sp.Matrix:
    """The Jacobian matrix d field_i / d variable_j."""
    return sp.Matrix([[sp.diff(f, x) for x in variables] for f in field])


def restrict_to_manifold(field: tuple[sp.Expr, ...]) -> tuple[sp.Expr, sp.Expr]:
    """The (kappa, nu) components of a 5-D field on M = {theta = eta = rho = 0}."""
    return tuple(field[i].subs(MANIFOLD) for i in (0, 1))


def invariance_of_manifold(risk: sp.Expr, field: tuple[sp.Expr, ...]) -> dict[str, sp.Expr]:
    """The quantities whose vanishing proves that M is invariant, each simplified.

    On M the partial derivatives R_theta, R_eta, R_rho vanish and so do d theta/dt,
    d eta/dt, d rho/dt. Returns each expression restricted to M (all are zero).
    """
    checks = {f"dR/d{m}": sp.diff(risk, m) for m in (theta, eta, rho)}
    checks |= {f"d{m}/dt": field[i] for i, m in ((2, theta), (3, eta), (4, rho))}
    return {name: sp.simplify(expr.subs(MANIFOLD)) for name, expr in checks.items()}


def check_manifold_invariant(risk: sp.Expr) -> None:
    """Raise RuntimeError unless every quantity of `invariance_of_manifold` simplifies to zero on M."""
    nonzero = {k: v for k, v in invariance_of_manifold(risk, flow(risk)).items() if v != 0}
    if nonzero:
        raise RuntimeError(f"M is not invariant under the derived flow: {nonzero}")


def flow_markdown(risk: sp.Expr, symbol_names: dict) -> list[str]:
    """The Markdown section "Projected gradient flow on the overlaps", for docs/equations.md.

    The flow for any risk R (in its partial derivatives), the flow of `risk` on M with the
    table proving M invariant, and the exact PGD map for any risk R.

    **Arguments:**

    - `risk`: the task's risk in the overlaps.
    - `symbol_names`: LaTeX names of its symbols, as in `sp.latex`.

    **Returns:** the section's lines, starting with a blank line.
    """
    symbol_names = {ALPHA: r"\alpha", **symbol_names}
    generic = sp.Function("R")(*OVERLAPS)
    partials = {sp.Derivative(generic, m): sp.Symbol(f"R_{{{sp.latex(m)}}}") for m in OVERLAPS}

    def in_partials(expr):
        return sp.expand(expr.subs(partials))

    names = [sp.latex(m) for m in OVERLAPS]
    lines = [
        "",
        "## Projected gradient flow on the overlaps",
        "",
        "With $\\nabla_k R = R_\\kappa k^* + R_\\eta v^* + R_\\rho v$ and",
        "$\\nabla_v R = R_\\nu v^* + R_\\theta k^* + R_\\rho k$, the flow",
        "$\\dot k = -(I - kk^\\top)\\nabla_k R$, $\\dot v = -(I - vv^\\top)\\nabla_v R$ reads,",
        "for any risk $R$ (subscripts are partial derivatives):",
        "",
    ]
    for name, component in zip(names, flow(generic), strict=True):
        lines.append(latex_equation(rf"\dot{{{name}}}", in_partials(component), symbol_names))
    field = flow(risk)
    lines += ["### On the invariant manifold M = {θ = η = ρ = 0}", ""]
    for name, component in zip(names[:2], restrict_to_manifold(field), strict=True):
        lines.append(latex_equation(rf"\dot{{{name}}}", tidy(component), symbol_names))
    lines += [
        "**M is invariant.** Restricted to M, SymPy simplifies each of these to zero:",
        "",
        "| quantity on M | value |",
        "|---|---|",
    ]
    lines += [f"| {name} | {value} |" for name, value in invariance_of_manifold(risk, field).items()]
    lines += [
        "",
        "### Exact projected gradient descent on the overlaps",
        "",
        "One step $k' = (k + \\alpha \\dot k)/\\lVert\\cdot\\rVert$,",
        "$v' = (v + \\alpha\\dot v)/\\lVert\\cdot\\rVert$ (gradients at the current point)",
        "maps the overlaps to:",
        "",
    ]
    for name, component in zip(names, pgd_map(generic, ALPHA), strict=True):
        lines.append(latex_equation(f"{name}'", in_partials(component), symbol_names))
    return lines
