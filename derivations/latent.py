"""Attention as latent-posterior inference: the closed forms of docs/science.md section 9.

Everything starts from the Gaussian density and the definition of softmax attention,
attn_a = sum_l e^{<a, k_l>} v_l / sum_l e^{<a, k_l>}:

- **Tilting.** For x ~ N(mu, s2) in one dimension, integrating the density gives E[e^{alpha x}] =
  e^{alpha mu + alpha^2 s2 / 2} and the tilted mean E[x e^{alpha x}] / E[e^{alpha x}] = mu + s2 alpha. In the
  eigenbasis of Sigma the coordinates of k ~ N(mu, Sigma) are independent and e^{<a, k>} factorises, so the
  tilted law is N(mu + Sigma a, Sigma): as L -> oo, attention tends to B(mu + Sigma a) + c for v = Bk + c.
- **The 1/L constant.** attn_a is a ratio of two means over the tokens; to first order in their
  fluctuations (the series below) attn_a - m = mean_l(w_l (v_l - m)) / E[w], so
  L E||attn_a - m||^2 -> E[w^2 ||v - m||^2] / E[w]^2 with w = e^{<a, k>}. The coordinates' integrals give
  e^{q} (t + r) with q = a^T Sigma a, t = tr(B Sigma B^T), r = ||B Sigma a||^2 (checked here symbolically
  at d = 3 with a general B).
- **The conjugate location model** z ~ N(0, tau^2 I_d), k_l | z ~ N(z, sigma^2 I_d): the log posterior of z
  is a quadratic whose curvature gives the posterior precision 1/tau^2 + L/sigma^2, so the posterior mean
  is L tau^2 / (sigma^2 + L tau^2) times the keys' mean and the Bayes risk is d sigma^2 tau^2 / (sigma^2 +
  L tau^2). Attention's estimate attn_a - sigma^2 a of z has risk e^{q} (t + r) / L to first order, with
  Sigma = sigma^2 I and B = I: its ratio to the Bayes risk tends to e^{sigma^2 |a|^2}(1 + sigma^2 |a|^2 / d).
"""

import functools

import sympy as sp

from .codegen import GeneratedFunction, latex_equation, render_module

__all__ = ["OUTPUT_FILES", "attention_limit_error", "conjugate_posterior", "outputs", "tilting"]

x, alpha = sp.symbols("x alpha", real=True)
mu = sp.Symbol("mu", real=True)
s2 = sp.Symbol("s2", positive=True)
q, t, r = sp.symbols("q t r", nonnegative=True)
d, L, sigma, tau, a_norm = sp.symbols("d L sigma tau a_norm", positive=True)


def _expectation(integrand: sp.Expr) -> sp.Expr:
    """E[integrand(x)] for x ~ N(mu, s2), by integrating against the density."""
    density = sp.exp(-((x - mu) ** 2) / (2 * s2)) / sp.sqrt(2 * sp.pi * s2)
    return sp.simplify(sp.integrate(integrand * density, (x, -sp.oo, sp.oo), conds="none"))


@functools.cache
def tilting() -> dict[str, sp.Expr]:
    """One coordinate of the tilted Gaussian: its normaliser, tilted mean, and the two ratios the 1/L constant
    needs (g = E[e^{2 alpha x}] / E[e^{alpha x}]^2 and f = E[e^{2 alpha x} (x - m)^2] / E[e^{alpha x}]^2)."""
    weight = sp.exp(alpha * x)
    normaliser = _expectation(weight)
    mean = sp.simplify(_expectation(x * weight) / normaliser)
    g = sp.simplify(_expectation(weight**2) / normaliser**2)
    f = sp.simplify(_expectation(weight**2 * (x - mean) ** 2) / normaliser**2)
    shift = sp.simplify(_expectation(x * weight**2) / _expectation(weight**2) - mean)
    return {"normaliser": normaliser, "mean": mean, "g": g, "f": f, "shift_at_2a": shift}


def _first_order_ratio() -> sp.Expr:
    """attn - m to first order in the fluctuations of numerator (N) and denominator (D) means."""
    W, m, dN, dD, h = sp.symbols("W m dN dD h", real=True)
    ratio = (m * W + h * dN) / (W + h * dD)
    first = sp.series(ratio, h, 0, 2).removeO().subs(h, 1)
    return sp.simplify(first - m)  # = (dN - m dD) / W: the mean of w_l (v_l - m) over E[w]


@functools.cache
def attention_limit_error(dimension: int = 3) -> sp.Expr:
    """L E||attn_a - lim||^2 as L -> oo, as e^q (t + r); checked at `dimension` coordinates with a general B."""
    lemma = tilting()
    W, m, dN, dD = sp.symbols("W m dN dD", real=True)
    if sp.simplify(_first_order_ratio() - (dN - m * dD) / W) != 0:
        raise AssertionError("the first-order expansion of a ratio of means is not (dN - m dD) / W")
    if sp.simplify(lemma["mean"] - (mu + s2 * alpha)) != 0:
        raise AssertionError(f"the tilted mean is {lemma['mean']}, not mu + s2 alpha")
    # In Sigma's eigenbasis: variances s_i, coordinates alpha_i of a. Under the weight w^2 = e^{2<a, k>}
    # (normalised by E[w]^2) coordinate i contributes the ratio g_i; the second moments of k - m under it
    # are f_i / g_i on the diagonal and the product of the shifts (Sigma a)_i (Sigma a)_j off it.
    variances = sp.symbols(f"s_1:{dimension + 1}", positive=True)
    coordinates = sp.symbols(f"alpha_1:{dimension + 1}", real=True)
    B = sp.Matrix(dimension, dimension, lambda i, j: sp.Symbol(f"B_{i + 1}{j + 1}", real=True))
    per = [{s2: v, alpha: c} for v, c in zip(variances, coordinates, strict=True)]
    g_all = sp.Mul(*(lemma["g"].subs(p) for p in per))
    shifts = [lemma["shift_at_2a"].subs(p) for p in per]
    moment = sp.Matrix(
        dimension,
        dimension,
        lambda i, j: (
            sp.simplify(lemma["f"].subs(per[i]) / lemma["g"].subs(per[i])) if i == j else shifts[i] * shifts[j]
        ),
    )
    constant = g_all * (B * moment * B.T).trace()
    Sigma = sp.diag(*variances)
    a = sp.Matrix(coordinates)
    invariants = {
        q: (a.T * Sigma * a)[0, 0],
        t: (B * Sigma * B.T).trace(),
        r: ((B * Sigma * a).T * (B * Sigma * a))[0, 0],
    }
    claimed = sp.exp(q) * (t + r)
    if sp.simplify(sp.expand(constant - claimed.subs(invariants))) != 0:
        raise AssertionError("the 1/L constant is not e^q (t + r)")
    return claimed


def conjugate_posterior() -> dict[str, sp.Expr]:
    """The conjugate location model, one coordinate: posterior precision, the posterior mean's shrinkage of the
    keys' mean, the Bayes risk over d coordinates, attention's first-order risk and the ratio's limit."""
    z, mean_k = sp.symbols("z kbar", real=True)
    # log p(z | k_1..k_L) up to a constant: the prior and the L keys, which enter through their mean
    # (sum_l (k_l - z)^2 = L (z - kbar)^2 + terms without z).
    log_posterior = -(z**2) / (2 * tau**2) - L * (z - mean_k) ** 2 / (2 * sigma**2)
    precision = sp.simplify(-sp.diff(log_posterior, z, 2))
    mode = sp.solve(sp.diff(log_posterior, z), z)[0]
    shrinkage = sp.simplify(mode / mean_k)
    bayes = sp.simplify(d / precision)
    # Attention with Sigma = sigma^2 I, B = I: q = sigma^2 |a|^2, t = d sigma^2, r = sigma^4 |a|^2.
    constant = attention_limit_error().subs({q: sigma**2 * a_norm**2, t: d * sigma**2, r: sigma**4 * a_norm**2})
    ratio = sp.simplify(sp.limit(constant / L / bayes, L, sp.oo))
    return {"precision": precision, "shrinkage": shrinkage, "bayes_risk": bayes, "ratio_limit": ratio}


#: The read-out's overlaps: |w|^2, <w, beta>, <w, a>, |a|^2, <a, beta> (|beta| = 1).
READOUT_STATE = sp.symbols("w_sq w_beta w_a a_sq a_beta", real=True)
eps = sp.Symbol("eps", nonnegative=True)
_FLOW_SYMBOLS = (
    r"\lVert w\rVert^2",
    r"\langle w, \beta\rangle",
    r"\langle w, a\rangle",
    r"\lVert a\rVert^2",
    r"\langle a, \beta\rangle",
)


def readout_risk() -> sp.Expr:
    """The L -> oo population risk of the read-out y_hat = <w, attn_a(K, K)> of y = <beta, z> + eps xi on the
    conjugate location model, in the overlaps: attention tends to the tilted mean z + sigma^2 a (`tilting`), and
    E(<u, z> + b - eps xi)^2 = tau^2 |u|^2 + b^2 + eps^2 for z ~ N(0, tau^2 I), with u = w - beta."""
    w_sq, w_beta, w_a, _, _ = READOUT_STATE
    shift = tilting()["mean"].subs({mu: 0, s2: sigma**2, alpha: 1})  # the tilt per unit of a: sigma^2
    u_sq = w_sq - 2 * w_beta + 1  # |w - beta|^2
    return sp.expand(tau**2 * u_sq + (shift * w_a) ** 2 + eps**2)


def readout_flow() -> tuple[sp.Expr, ...]:
    """The gradient flow dw/dt = -grad_w R, da/dt = -grad_a R of a risk R of the overlaps, on the overlaps.

    Vectors are combinations of the basis (w, a, beta) with the Gram matrix of the overlaps: grad_w R =
    2 R_{w_sq} w + R_{w_beta} beta + R_{w_a} a and grad_a R = R_{w_a} w + 2 R_{a_sq} a + R_{a_beta} beta, and the
    overlaps' derivatives are inner products of these with the basis."""
    w_sq, w_beta, w_a, a_sq, a_beta = READOUT_STATE
    gram = sp.Matrix([[w_sq, w_a, w_beta], [w_a, a_sq, a_beta], [w_beta, a_beta, 1]])
    risk = readout_risk()
    R = {name: sp.diff(risk, name) for name in READOUT_STATE}
    w, a, beta = sp.eye(3)[:, 0], sp.eye(3)[:, 1], sp.eye(3)[:, 2]
    w_dot = -(2 * R[w_sq] * w + R[w_beta] * beta + R[w_a] * a)
    a_dot = -(R[w_a] * w + 2 * R[a_sq] * a + R[a_beta] * beta)

    def inner(x, y):
        return (x.T * gram * y)[0, 0]

    derivatives = (
        2 * inner(w, w_dot),
        inner(w_dot, beta),
        inner(w_dot, a) + inner(w, a_dot),
        2 * inner(a, a_dot),
        inner(a_dot, beta),
    )
    return tuple(sp.factor(sp.expand(x)) for x in derivatives)


#: Paths of the generated files, relative to the repository root.
GENERATED_MODULE = "flowsim/tasks/latent/_generated.py"
EQUATIONS = "docs/equations-latent.md"
OUTPUT_FILES = (GENERATED_MODULE, EQUATIONS)

_MODULE_DOC = """Closed forms of attention as latent-posterior inference (derivations/latent.py; docs/science.md, 9).

q = a^T Sigma a, t = tr(B Sigma B^T), r = ||B Sigma a||^2 for keys k ~ N(mu, Sigma) and values v = Bk + c.
"""


def outputs() -> dict[str, str]:
    """The generated module and the LaTeX page, by path."""
    constant = attention_limit_error()
    conjugate = conjugate_posterior()
    functions = [
        GeneratedFunction(
            "attention_error_constant",
            (q, t, r),
            constant,
            "lim_{L -> oo} L E||attn_a - B(mu + Sigma a) - c||^2, from the invariants q, t, r.",
        ),
        GeneratedFunction(
            "posterior_shrinkage",
            (L, sigma, tau),
            conjugate["shrinkage"],
            "The conjugate location model's posterior mean over the keys' mean: L tau^2 / (sigma^2 + L tau^2).",
        ),
        GeneratedFunction(
            "bayes_risk",
            (d, L, sigma, tau),
            conjugate["bayes_risk"],
            "The conjugate location model's Bayes risk E||E[z | keys] - z||^2.",
        ),
        GeneratedFunction(
            "attention_bayes_ratio_limit",
            (d, sigma, a_norm),
            conjugate["ratio_limit"],
            "lim_{L -> oo} of attention's risk (estimate attn_a - sigma^2 a) over the Bayes risk.",
        ),
        GeneratedFunction(
            "readout_risk",
            (*READOUT_STATE, tau, sigma, eps),
            readout_risk(),
            "The L -> oo population risk of the read-out <w, attn_a> in the overlaps (|beta| = 1).",
        ),
        GeneratedFunction(
            "readout_flow",
            (*READOUT_STATE, tau, sigma, eps),
            readout_flow(),
            "d/dt of the overlaps (w_sq, w_beta, w_a, a_sq, a_beta) under the gradient flow of `readout_risk`.",
        ),
    ]
    names = {s2: r"\sigma^2", a_norm: r"\lVert a \rVert", mu: r"\mu"}
    flow_names = dict(zip(READOUT_STATE, _FLOW_SYMBOLS, strict=True)) | {eps: r"\varepsilon"}
    lemma = tilting()
    page = "\n".join(
        [
            "# Equations: attention as latent-posterior inference",
            "",
            "Generated by `python -m derivations` from `derivations/latent.py`; do not edit. The science is in",
            "[docs/science.md, section 9](science.md#section-9-attention-as-latent-posterior-inference).",
            "One coordinate of the keys, $x \\sim \\mathcal{N}(\\mu, \\sigma^2)$, tilted by $e^{\\alpha x}$:",
            "",
            latex_equation(r"\frac{E[x e^{\alpha x}]}{E[e^{\alpha x}]}", lemma["mean"], names),
            "The constant of attention's error, with $q = a^\\top \\Sigma a$, $t = \\operatorname{tr}(B \\Sigma "
            "B^\\top)$, $r = \\lVert B \\Sigma a \\rVert^2$:",
            "",
            latex_equation(r"\lim_{L\to\infty} L\, E\lVert \mathrm{attn}_a - B(\mu + \Sigma a) - c\rVert^2", constant),
            "The conjugate location model, $z \\sim \\mathcal{N}(0, \\tau^2 I_d)$, $k_l \\mid z \\sim "
            "\\mathcal{N}(z, \\sigma^2 I_d)$:",
            "",
            latex_equation(r"E[z \mid k_{1..L}] / \bar k", conjugate["shrinkage"], names),
            latex_equation(r"E\lVert E[z \mid k_{1..L}] - z \rVert^2", conjugate["bayes_risk"], names),
            latex_equation(
                r"\lim_{L\to\infty} \frac{E\lVert \mathrm{attn}_a - \sigma^2 a - z\rVert^2}{\text{Bayes risk}}",
                conjugate["ratio_limit"],
                names,
            ),
            r"The supervised read-out $\hat y = \langle w, \mathrm{attn}_a\rangle$ of $y = \langle \beta, z\rangle + "
            r"\varepsilon\xi$ at $L = \infty$, in the overlaps $("
            + ", ".join(_FLOW_SYMBOLS)
            + ")$, and its gradient flow:",
            "",
            latex_equation("R", readout_risk(), flow_names),
            *(
                latex_equation(rf"\frac{{d}}{{dt}} {symbol}", derivative, flow_names)
                for symbol, derivative in zip(_FLOW_SYMBOLS, readout_flow(), strict=True)
            ),
        ]
    )
    return {GENERATED_MODULE: render_module(_MODULE_DOC, functions), EQUATIONS: page}
