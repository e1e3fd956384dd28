"""Online SGD as an exact Markov chain on the five overlaps: one step costs O(batch * L), whatever d.

With fresh samples at every step, the law of the next overlaps depends only on the current
ones. Write every vector of R^d by its coordinates on an orthonormal frame (e1, e2, e3, e4) =
(k*, v*, e3, e4) whose span contains k and v (`frame`), and its part orthogonal to the frame.
A token splits into its frame coordinates and an isotropic Gaussian part in the d - 4
remaining dimensions (variance 1 for noise tokens, gamma^2 for the informative one),
independent of the frame coordinates. The mini-batch gradients are g_k = sum_i c_i X_i and
g_v = sum_i c'_i X_i over the batch's tokens, where c_i = dl/d<X_i, k> and c'_i = dl/d<X_i, v>
depend only on frame coordinates, labels and label noise. So the renormalised step needs only
the frame parts of (g_k, g_v) and the Gram matrix of their orthogonal parts, which given the
weights is Wishart with d - 4 degrees of freedom and scale sum_i sigma_i^2 (c_i, c'_i)(c_i, c'_i)^T
(`wishart_2x2`, Bartlett's decomposition).

Two reductions keep the random numbers per step near 2 batch L, all exact in law:

- The predictor and the loss are symmetric in the tokens, so the informative token is token 0
  of every sequence (J0 uniform and independent of the rest changes nothing).
- The noise tokens' weights c_i, c'_i depend only on the sequence's projections on span(k, v) (for
  the normalised maps, softmax and softplus, on those of all its tokens), never on the frame
  coordinates orthogonal to span(k, v). A noise token's frame coordinates
  on the two frame directions orthogonal to span(k, v) are independent standard normals, so
  their weighted sums are, given the weights, bivariate normal with the noise tokens' scale
  sum (c_i, c'_i)(c_i, c'_i)^T: two draws replace two per token.

The weights c_i, c'_i are automatic derivatives of the same predictor as in R^d (`squared_loss`, with
the problem's attention map: the construction does not depend on the map);
the rest is linear algebra in R^4, pinned against the R^d step on the same data by the tests.

The random numbers are drawn in float32 and the step computes with them in float64 (the state is float64):
the law is exact to float32's resolution of each draw, and a step costs about half of what float64 draws
made it cost (docs/science.md section 5).
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from flowsim.tasks.slr._data import squared_loss
from flowsim.tasks.slr._init import chi_square

__all__ = ["draw_step_noise", "draws_per_step", "frame", "renormalised_step", "sgd_step", "wishart_2x2"]

#: Below this norm, v - rho k is treated as zero (k = +-v): any direction orthogonal to k then
#: completes span(k, v).
_PARALLEL = 1e-12


def frame(m: Float[Array, "... 5"]) -> tuple[Float[Array, "... 4"], Float[Array, "... 4"]]:
    """Coordinates of k and v on the frame (k*, v*, e3, e4) built by Gram-Schmidt.

    k = (kappa, eta, a, 0) and v = (theta, nu, b, c) with a = sqrt(1 - kappa^2 - eta^2),
    b = (rho - kappa theta - eta nu) / a (0 when a = 0) and c = sqrt(1 - theta^2 - nu^2 - b^2).

    **Arguments:**

    - `m`: realizable overlaps (kappa, nu, theta, eta, rho), shape (..., 5).

    **Returns:** (k, v), each of shape (..., 4).
    """
    kappa, nu, theta, eta, rho = jnp.moveaxis(m, -1, 0)
    a = jnp.sqrt(jnp.maximum(1 - kappa**2 - eta**2, 0.0))
    b = jnp.where(a > 0, (rho - kappa * theta - eta * nu) / jnp.where(a > 0, a, 1.0), 0.0)
    c = jnp.sqrt(jnp.maximum(1 - theta**2 - nu**2 - b**2, 0.0))
    zero = jnp.zeros_like(a)
    return jnp.stack([kappa, eta, a, zero], axis=-1), jnp.stack([theta, nu, b, c], axis=-1)


def _dot(x, y):
    return jnp.sum(x * y, axis=-1)


def renormalised_step(k, v, g_k, g_v, gram, lr) -> Float[Array, "... 5"]:
    """The overlaps after k <- (k - lr (I - k k^T) g_k) / |.| and the same for v.

    **Arguments:**

    - `k`, `v`: frame coordinates of the current directions, shape (..., 4) (`frame`).
    - `g_k`, `g_v`: frame coordinates of the gradients, shape (..., 4).
    - `gram`: (|u|^2, <u, w>, |w|^2) for the gradients' parts u, w orthogonal to the frame,
      shape (..., 3); zeros for the population gradient, which lies in the frame.
    - `lr`: the step size.

    **Returns:** the new overlaps (kappa, nu, theta, eta, rho), shape (..., 5).
    """

    # The orthogonal parts are orthogonal to k and v: they do not enter the tangent projection.
    new_k = k - lr * (g_k - _dot(g_k, k)[..., None] * k)
    new_v = v - lr * (g_v - _dot(g_v, v)[..., None] * v)
    uu, uw, ww = jnp.moveaxis(gram, -1, 0)
    norm_k = jnp.sqrt(_dot(new_k, new_k) + lr**2 * uu)
    norm_v = jnp.sqrt(_dot(new_v, new_v) + lr**2 * ww)
    rho = (_dot(new_k, new_v) + lr**2 * uw) / (norm_k * norm_v)
    kappa, eta = new_k[..., 0] / norm_k, new_k[..., 1] / norm_k
    theta, nu = new_v[..., 0] / norm_v, new_v[..., 1] / norm_v
    m = jnp.stack([kappa, nu, theta, eta, rho], axis=-1)
    # An overflowing step would otherwise give finite but meaningless overlaps (x / inf = 0).
    finite = jnp.isfinite(norm_k) & jnp.isfinite(norm_v) & (norm_k > 0) & (norm_v > 0)
    return jnp.where(finite[..., None], m, jnp.nan)


def _cholesky_2x2(scale):
    """Lower Cholesky factor (l11, l21, l22) of [[s11, s12], [s12, s22]], positive semidefinite."""
    s11, s12, s22 = scale
    l11 = jnp.sqrt(s11)
    l21 = jnp.where(l11 > 0, s12 / jnp.where(l11 > 0, l11, 1.0), 0.0)
    return l11, l21, jnp.sqrt(jnp.maximum(s22 - l21**2, 0.0))


def wishart_2x2(key, scale, dof: int) -> Float[Array, "3"]:
    """One draw of a 2 x 2 Wishart matrix W(scale, dof) by Bartlett's decomposition.

    W = (l a)(l a)^T with l the Cholesky factor of the scale and a = [[c1, 0], [z, c2]],
    c1^2 ~ chi2(dof), c2^2 ~ chi2(dof - 1), z ~ N(0, 1): three random numbers. A singular
    scale is allowed (rank-one W when s11 or the Schur complement vanishes).

    **Arguments:**

    - `key`: a JAX PRNG key.
    - `scale`: (s11, s12, s22) of a positive semidefinite scale matrix.
    - `dof`: the degrees of freedom, an integer >= 1 (static).

    **Returns:** (W11, W12, W22).
    """
    key_z, key_1, key_2 = jax.random.split(key, 3)
    c1 = jnp.sqrt(chi_square(key_1, dof, ()))
    c2 = jnp.sqrt(chi_square(key_2, dof - 1, ()))
    return _wishart_2x2(scale, c1, jax.random.normal(key_z), c2)


def _wishart_2x2(scale, c1, z, c2):
    """Bartlett's (l a)(l a)^T from the factor a = [[c1, 0], [z, c2]]."""
    l11, l21, l22 = _cholesky_2x2(scale)
    lower = l21 * c1 + l22 * z
    return jnp.stack([(l11 * c1) ** 2, l11 * c1 * lower, lower**2 + (l22 * c2) ** 2])


def _span_basis(k, v):
    """Orthonormal q1 = k, q2 with span(q1, q2) containing v (q2 = e4, orthogonal to k, if v = +-k)."""
    w = v - _dot(k, v) * k
    norm = jnp.sqrt(_dot(w, w))
    e4 = jnp.zeros(4).at[3].set(1.0)
    return k, jnp.where(norm > _PARALLEL, w / jnp.where(norm > _PARALLEL, norm, 1.0), e4)


def draws_per_step(batch: int, L: int) -> int:
    """How many standard normals one step of `sgd_step` consumes."""
    return batch * (2 * L + 3) + 9


#: The float type of a step's random numbers. The chain's state and arithmetic are float64; its draws are float32,
#: which keeps its law to float32's resolution (a normal is a quantile of a uniform on a grid of about 2e-7: none
#: beyond about 5.4 standard deviations, a probability of 6e-8) at a fraction of float64 draws' cost (issue 57).
_DRAWS = jnp.float32


def draw_step_noise(key, batch: int, L: int, d: int):
    """The random numbers of one step, in float32 (`_DRAWS`): standard normals and two chi-square draws (d - 4 and
    d - 5 degrees of freedom; d may be traced). `sgd_step` computes with them in float64.

    **Returns:** (normals of shape (draws_per_step(batch, L),), chi-squares of shape (2,)).
    """
    key_normal, key_chi2 = jax.random.split(key)
    chi2 = chi_square(key_chi2, jnp.stack([d - 4, d - 5]), (2,), _DRAWS)
    return jax.random.normal(key_normal, (draws_per_step(batch, L),), _DRAWS), chi2


def sgd_step(problem, m, lam, lr, noise, batch: int) -> Float[Array, "5"]:
    """One online SGD step on a fresh mini-batch, exact in law, on the overlaps.

    **Arguments:**

    - `problem`: the task (d >= 5, L, gamma, eps; lam is taken from `lam`).
    - `m`: the current overlaps, shape (5,).
    - `lam`: the inverse temperature of this step.
    - `lr`: the step size.
    - `noise`: the step's random numbers, from `draw_step_noise` (float32; the step computes in m's float64).
    - `batch`: samples per step (static).

    **Returns:** the overlaps after the projected, renormalised step, shape (5,).
    """
    L, gamma = problem.L, problem.gamma
    # float32 draws, float64 arithmetic: the cast comes first, so that no product is rounded to float32.
    normals, chi2 = (x.astype(m.dtype) for x in noise)
    chi2_1, chi2_2 = chi2
    k, v = frame(m)
    q1, q2 = _span_basis(k, v)  # k = q1, v = v1 q1 + v2 q2
    v1, v2 = _dot(v, q1), _dot(v, q2)
    informative = problem.s * jnp.eye(4)[0] + gamma * normals[: 4 * batch].reshape(batch, 4)
    z1, z2 = normals[4 * batch : 2 * batch * (L + 1)].reshape(2, batch, L - 1)  # noise tokens on q1, q2
    label_noise = normals[2 * batch * (L + 1) : batch * (2 * L + 3)]
    orthogonal = normals[batch * (2 * L + 3) : -1].reshape(2, 4)

    key_projections = jnp.concatenate([_dot(informative, k)[:, None], z1], axis=1)
    value_projections = jnp.concatenate([_dot(informative, v)[:, None], v1 * z1 + v2 * z2], axis=1)
    y = informative[:, 1] + problem.eps * label_noise
    c_k, c_v = jax.grad(squared_loss, (0, 1))(key_projections, value_projections, y, lam, problem.attention)

    def frame_part(c):  # sum_i c_i X_i on the frame: the informative tokens, then the noise tokens' span part
        noise = c[:, 1:]
        return jnp.sum(c[:, :1] * informative, axis=0) + jnp.sum(noise * z1) * q1 + jnp.sum(noise * z2) * q2

    def scale(a, b):
        return jnp.stack([jnp.sum(a * a), jnp.sum(a * b), jnp.sum(b * b)])

    # The noise tokens on the two frame directions orthogonal to span(q1, q2): isotropic there.
    l11, l21, l22 = _cholesky_2x2(scale(c_k[:, 1:], c_v[:, 1:]))
    n1, n2 = orthogonal - _dot(orthogonal, q1)[:, None] * q1 - _dot(orthogonal, q2)[:, None] * q2
    g_k = frame_part(c_k) + l11 * n1
    g_v = frame_part(c_v) + l21 * n1 + l22 * n2

    sigma = jnp.ones(L).at[0].set(gamma)
    gram = _wishart_2x2(scale(c_k * sigma, c_v * sigma), jnp.sqrt(chi2_1), normals[-1], jnp.sqrt(chi2_2))
    return renormalised_step(k, v, g_k, g_v, gram, lr)
