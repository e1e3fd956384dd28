"""Single-location regression: the population risk from the model's definition, and the task's generated files.

Model (docs/science.md sections 1-2). Tokens X_1..X_L in R^d; the informative one
X_J ~ N(s k*, gamma^2 I) with s = sqrt(d/2), the others N(0, I); label
Y = <X_J, v*> + xi, xi ~ N(0, eps^2); predictor T = sum_l erf(lam <X_l, k>) <X_l, v>.

Only the projections of a token on (k, v, v*) enter the loss. Conditioning on
the key projection z = <Z, k> of a token's Gaussian part Z, the other projections
are <Z, v> = rho z + r_v and <Z, v*> = eta z + r_*, with (r_v, r_*) centred,
independent of z, and covariance [[1 - rho^2, nu - rho eta], [nu - rho eta, 1 - eta^2]].

By exchangeability the risk given J is the same for every J; take J = 1 and
expand (Y - T)^2 over ordered token pairs (l, m):
  (J, J): 1 pair; (J, noise) and (noise, J): 2(L - 1); (noise, same noise): L - 1;
  (noise, other noise): (L - 1)(L - 2); the label pairs with the informative token
  and with each noise token.
Two independent copies of a noise token represent "different noise tokens".

The task's files (`OUTPUT_FILES`, written by `outputs` through derivations/build.py): the JAX
module flowsim/tasks/slr/_generated.py (the risk, the projected gradient flow on the overlaps
and on M, their Jacobians and the PGD map) and docs/equations.md (the same in LaTeX).
"""

import sympy as sp

from . import flow
from .codegen import GeneratedFunction, latex_equation, render_module, tidy
from .flow import ALPHA, OVERLAPS, eta, kappa, nu, rho, theta
from .gaussian import GaussianBlock, expectation
from .lemmas import ErfDerivative

__all__ = ["OUTPUT_FILES", "OVERLAPS", "PARAMETERS", "outputs", "population_risk", "risk_pieces"]

d, L, lam, gamma = sp.symbols("d L lam gamma", positive=True)
eps = sp.Symbol("eps", nonnegative=True)
PARAMETERS = (d, L, lam, gamma, eps)
#: s = sqrt(d/2), the informative token's mean along k*; kept as a symbol for readability.
s = sp.Symbol("s", positive=True)


def _token(name: str, mean_k: sp.Expr, mean_v: sp.Expr, scale: sp.Expr, with_label: bool):
    """Projections (<X,k>, <X,v>, <X,v*>) of a token and its Gaussian block."""
    z, r_v, r_star = sp.symbols(f"z_{name} r_v{name} r_star{name}", real=True)
    if with_label:
        residuals = (r_v, r_star)
        covariance = ((1 - rho**2, nu - rho * eta), (nu - rho * eta, 1 - eta**2))
        label = scale * (eta * z + r_star)
    else:
        residuals, covariance, label = (r_v,), ((1 - rho**2,),), None
    block = GaussianBlock(key=z, residuals=residuals, covariance=covariance)
    on_k = mean_k + scale * z
    on_v = mean_v + scale * (rho * z + r_v)
    return block, on_k, on_v, label


def _attention_term(on_k: sp.Expr, on_v: sp.Expr) -> sp.Expr:
    """One token's contribution erf(lam <X, k>) <X, v> to the predictor T."""
    return ErfDerivative(0, lam * on_k) * on_v


def risk_pieces() -> dict[str, sp.Expr]:
    """The population risk as named expectations, weighted by their pair counts.

    **Returns:** a dict from a description of each group of token pairs to its
    contribution; their sum is E[(Y - T)^2] as a function of the overlaps.
    """
    informative, on_k, on_v, label_signal = _token("J", s * kappa, s * theta, gamma, True)
    noise, n_on_k, n_on_v, _ = _token("1", 0, 0, 1, False)
    other_noise, m_on_k, m_on_v, _ = _token("2", 0, 0, 1, False)
    xi = sp.Symbol("xi", real=True)
    label_noise = GaussianBlock(key=None, residuals=(xi,), covariance=((eps**2,),))
    blocks = [informative, noise, other_noise, label_noise]

    residual = label_signal + xi - _attention_term(on_k, on_v)  # Y minus the informative token's term
    noise_term = _attention_term(n_on_k, n_on_v)
    other_noise_term = _attention_term(m_on_k, m_on_v)
    return {
        "label and informative token": expectation(residual**2, blocks),
        "label and informative token with a noise token": -2 * (L - 1) * expectation(residual * noise_term, blocks),
        "noise token with itself": (L - 1) * expectation(noise_term**2, blocks),
        "two different noise tokens": (L - 1) * (L - 2) * expectation(noise_term * other_noise_term, blocks),
    }


def population_risk() -> sp.Expr:
    """The population risk E[(Y - T)^2] in the overlaps, d, L, lam, gamma, eps (s = sqrt(d/2))."""
    return sum(risk_pieces().values())


# The task's generated files.

#: Paths of the task's generated files, relative to the repository root.
GENERATED_MODULE = "flowsim/tasks/slr/_generated.py"
EQUATIONS = "docs/equations.md"
OUTPUT_FILES = (GENERATED_MODULE, EQUATIONS)

_MODULE_DOC = "Single-location regression: equations generated from derivations/slr.py and derivations/flow.py."
_LATEX_NAMES = {lam: r"\lambda", eps: r"\varepsilon"}
_PRELUDE = (("s", "jnp.sqrt(d / 2)"),)
_PARAMETERS_DOC = """- `d, L, lam, gamma, eps`: dimension, sequence length, inverse temperature,
  informative-token scale and label-noise level."""

_RISK_DOC = f"""Population risk E[(Y - T)^2] of single-location regression.

**Arguments:**

- `kappa, nu, theta, eta, rho`: the overlaps <k,k*>, <v,v*>, <v,k*>, <k,v*>, <k,v>.
{_PARAMETERS_DOC}

All arguments broadcast against each other.

**Returns:** the full risk, eps^2 and noise-token variance included.
"""


def outputs() -> dict[str, str]:
    """Derive the task's equations.

    **Returns:** the text of each file of `OUTPUT_FILES`, by path relative to the repository root.

    **Raises:** RuntimeError if M = {theta = eta = rho = 0} is not invariant under the derived flow.
    """
    pieces = risk_pieces()
    risk = tidy(sum(pieces.values()))
    flow.check_manifold_invariant(risk)
    module = render_module(_MODULE_DOC, _functions(risk))
    return {GENERATED_MODULE: module, EQUATIONS: _equations_markdown(pieces, risk)}


def _doc(summary: str, returns: str, overlaps: str = "kappa, nu, theta, eta, rho", extra: str = "") -> str:
    return (
        f"{summary}\n\n**Arguments:**\n\n- `{overlaps}`: the overlaps.\n{_PARAMETERS_DOC}\n{extra}"
        f"\nAll arguments broadcast against each other.\n\n**Returns:** {returns}\n"
    )


def _functions(risk: sp.Expr) -> list[GeneratedFunction]:
    field = flow.flow(risk)
    field_on_m = flow.restrict_to_manifold(field)
    on_m = (kappa, nu)
    jac = flow.jacobian(field, OVERLAPS)
    jac_on_m = flow.jacobian(field_on_m, on_m)

    def rows(matrix):
        return tuple(tuple(matrix.row(i)) for i in range(matrix.rows))

    def make(name, arguments, outputs, doc):
        return GeneratedFunction(name, arguments, outputs, doc, _PRELUDE)

    return [
        make("risk", OVERLAPS + PARAMETERS, risk, _RISK_DOC),
        make(
            "flow",
            OVERLAPS + PARAMETERS,
            field,
            _doc(
                "The projected gradient flow on the overlaps: d/dt (kappa, nu, theta, eta, rho).",
                "shape (..., 5).",
            ),
        ),
        make(
            "flow_on_manifold",
            on_m + PARAMETERS,
            field_on_m,
            _doc("The flow on M = {theta = eta = rho = 0}: d/dt (kappa, nu).", "shape (..., 2).", "kappa, nu"),
        ),
        make(
            "jacobian",
            OVERLAPS + PARAMETERS,
            rows(jac),
            _doc("Jacobian of `flow`: entry [i, j] = d flow_i / d m_j.", "shape (..., 5, 5)."),
        ),
        make(
            "jacobian_on_manifold",
            on_m + PARAMETERS,
            rows(jac_on_m),
            _doc("Jacobian of `flow_on_manifold` in (kappa, nu).", "shape (..., 2, 2).", "kappa, nu"),
        ),
        make(
            "pgd_map",
            (*OVERLAPS, *PARAMETERS, ALPHA),
            flow.pgd_map(risk, ALPHA),
            _doc(
                "One step of projected gradient descent with renormalisation, exact on the overlaps.",
                "the overlaps after the step, shape (..., 5).",
                extra="- `alpha`: the step size.\n",
            ),
        ),
    ]


def _equations_markdown(pieces: dict[str, sp.Expr], risk: sp.Expr) -> str:
    lines = [
        "<!-- Generated by `python -m derivations`. Do not edit: change derivations/ and regenerate. -->",
        "# Equations",
        "",
        "Every equation below is derived by SymPy in `derivations/` from the model's definition",
        "and the lemma table of `derivations/lemmas.py`; the same expressions are compiled into",
        "`flowsim/tasks/slr/_generated.py`.",
        "",
        "Notation: overlaps $\\kappa = \\langle k, k^*\\rangle$, $\\nu = \\langle v, v^*\\rangle$,",
        "$\\theta = \\langle v, k^*\\rangle$, $\\eta = \\langle k, v^*\\rangle$,",
        "$\\rho = \\langle k, v\\rangle$;",
        "$s = \\sqrt{d/2}$; $\\zeta(a; b) = \\mathbb{E}[\\operatorname{erf}(a + bZ)^2]"
        " = 1 - 8\\,T\\big(\\sqrt{2}a/\\sqrt{1+2b^2},\\, 1/\\sqrt{1+4b^2}\\big)$ with Owen's $T$.",
        "",
        "## Single-location regression: population risk",
        "",
        "Expanding $(Y - T)^2$ over ordered token pairs (informative token $J$, noise tokens),",
        "each group of pairs contributes:",
        "",
    ]
    for name, piece in pieces.items():
        lines += [f"**{name}**", "", latex_equation(r"\quad", tidy(piece), _LATEX_NAMES), ""]
    total = latex_equation(r"R(\kappa, \nu, \theta, \eta, \rho)", risk, _LATEX_NAMES)
    lines += ["**Total**", "", total]
    lines += flow.flow_markdown(risk, _LATEX_NAMES)
    lines += [
        "The Jacobians of the 5-D flow and of the flow on M are their symbolic derivatives; all of",
        "the above are compiled into `flowsim/tasks/slr/_generated.py`.",
    ]
    return "\n".join(lines)
