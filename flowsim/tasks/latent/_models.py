"""Exchangeable latent-variable models of the tokens (docs/science.md section 9), seeded and batched.

- `TiltedGaussian`: keys k | z ~ N(mu_z, Sigma) around a given location mu_z, values v = B k + c. Softmax
  attention with parameter a tends to B(mu_z + Sigma a) + c as L -> oo (the tilted mean).
- `ConjugateLocation`: z ~ N(0, tau^2 I_d), k_l | z ~ N(z, sigma^2 I_d); its posterior mean and Bayes risk.
- `LocationMixture`: z one of K (location, scale) pairs with prior weights, k_l | z ~ N(location, scale^2 I_d);
  its exact discrete posterior.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from flowsim._checks import SCALE, InvalidInput, as_floats, as_key, check_count, check_shape
from flowsim.tasks.latent import _generated

__all__ = ["ConjugateLocation", "LocationMixture", "TiltedGaussian"]


class TiltedGaussian(eqx.Module):
    """Keys k ~ N(location, Sigma), values v = B k + c.

    **Arguments:** `Sigma` (d, d), symmetric positive definite; `B` (d_v, d), default the identity; `c`
    (d_v,), default 0.
    """

    Sigma: np.ndarray
    B: np.ndarray
    c: np.ndarray

    def __init__(self, Sigma, B=None, c=None):
        Sigma = as_floats("TiltedGaussian.Sigma", Sigma)
        if Sigma.ndim != 2 or Sigma.shape[0] != Sigma.shape[1]:
            raise InvalidInput(f"TiltedGaussian.Sigma must be a square matrix, got shape {Sigma.shape}")
        d = Sigma.shape[0]
        if not np.allclose(Sigma, Sigma.T) or not np.isfinite(Sigma).all() or np.linalg.eigvalsh(Sigma).min() <= 0:
            raise InvalidInput("TiltedGaussian.Sigma must be symmetric positive definite")
        self.Sigma = Sigma
        B = np.eye(d) if B is None else np.atleast_2d(as_floats("TiltedGaussian.B", B))
        if B.ndim != 2 or B.shape[1] != d or not np.isfinite(B).all():
            raise InvalidInput(f"TiltedGaussian.B must be a finite (d_v, {d}) matrix, got shape {B.shape}")
        self.B = B
        self.c = np.zeros(B.shape[0]) if c is None else check_shape("TiltedGaussian.c", c, (B.shape[0],))
        if not np.isfinite(self.c).all():
            raise InvalidInput(f"TiltedGaussian.c must be finite, got {self.c.tolist()}")

    @property
    def d(self) -> int:
        """The keys' dimension."""
        return self.Sigma.shape[0]

    def sample(self, key, location, L: int, n: int) -> tuple[Float[Array, "n L d"], Float[Array, "n L dv"]]:
        """n sequences of L (key, value) pairs around `location` (d,).

        **Returns:** (keys (n, L, d), values (n, L, d_v)).
        """
        L, n = check_count("L", L, 1), check_count("n", n, 1)
        return self.draw(as_key(key), jnp.asarray(check_shape("location", location, (self.d,), "(d,)")), L, n)

    def draw(self, key, location, L: int, n: int):
        """`sample` without the checks of its arguments (inside compiled code, where they are traced)."""
        noise = jax.random.normal(key, (n, L, self.d))
        keys = location + noise @ jnp.linalg.cholesky(jnp.asarray(self.Sigma)).T
        return keys, keys @ jnp.asarray(self.B).T + jnp.asarray(self.c)

    def attention_limit(self, location, a) -> Float[Array, " dv"]:
        """The L -> oo limit of softmax attention with parameter a: B(location + Sigma a) + c."""
        return jnp.asarray(self.B) @ (jnp.asarray(location) + jnp.asarray(self.Sigma) @ a) + jnp.asarray(self.c)

    def error_constant(self, a) -> Float[Array, ""]:
        """lim L E||attn_a - attention_limit||^2 = e^{a^T Sigma a} (tr(B Sigma B^T) + ||B Sigma a||^2)."""
        Sigma, B = jnp.asarray(self.Sigma), jnp.asarray(self.B)
        shift = B @ Sigma @ a
        return _generated.attention_error_constant(a @ Sigma @ a, jnp.trace(B @ Sigma @ B.T), shift @ shift)


#: The noise-to-scale ratios sigma / tau a float64 Monte Carlo resolves (the keys z + sigma * noise round z to
#: 1e-16 of tau: below 1e-6 the rounding is a visible share of the risk).
NOISE_RATIOS = (1e-6, 1e6)


def check_noise_ratio(sigma: float, tau: float, names: str = "sigma / tau") -> None:
    """Refuse sigma / tau outside `NOISE_RATIOS`, naming them as `names`."""
    low, high = NOISE_RATIOS
    if not low <= sigma / tau <= high:
        raise InvalidInput(
            f"{names} must be in [{low:g}, {high:g}] (float64 resolves the noise), got {sigma / tau:.3g}"
        )


class ConjugateLocation(eqx.Module):
    """z ~ N(0, tau^2 I_d), keys k_l | z ~ N(z, sigma^2 I_d).

    **Arguments:** `d` (>= 1), `tau`, `sigma` (each in [1e-50, 1e50], and sigma / tau in [1e-6, 1e6]: float64
    resolves keys' noise only above about 1e-16 of the location's scale).
    """

    d: int = eqx.field(static=True)
    tau: float
    sigma: float

    def __init__(self, d: int, tau: float = 1.0, sigma: float = 1.0):
        self.d = check_count("ConjugateLocation.d", d, 1)
        self.tau = SCALE.check("ConjugateLocation.tau", tau)
        self.sigma = SCALE.check("ConjugateLocation.sigma", sigma)
        check_noise_ratio(self.sigma, self.tau)

    def sample(self, key, L: int, n: int) -> tuple[Float[Array, "n d"], Float[Array, "n L d"]]:
        """n latent locations and their L keys each: (z (n, d), keys (n, L, d))."""
        L, n = check_count("L", L, 1), check_count("n", n, 1)
        key_z, key_k = jax.random.split(as_key(key))
        z = self.tau * jax.random.normal(key_z, (n, self.d))
        return z, z[:, None, :] + self.sigma * jax.random.normal(key_k, (n, L, self.d))

    def posterior_mean(self, keys: Float[Array, "... L d"]) -> Float[Array, "... d"]:
        """E[z | keys]: the keys' mean shrunk by L tau^2 / (sigma^2 + L tau^2)."""
        L = keys.shape[-2]
        return _generated.posterior_shrinkage(L, self.sigma, self.tau) * jnp.mean(keys, axis=-2)

    def bayes_risk(self, L) -> Float[Array, ""]:
        """E||E[z | keys] - z||^2 = d sigma^2 tau^2 / (sigma^2 + L tau^2)."""
        return _generated.bayes_risk(self.d, L, self.sigma, self.tau)

    def attention_estimate(self, attended: Float[Array, "... d"], a) -> Float[Array, "... d"]:
        """Attention's estimate of z: the attended keys minus the tilt sigma^2 a (consistent as L -> oo)."""
        return attended - self.sigma**2 * jnp.asarray(a)

    def attention_ratio_limit(self, a_norm) -> Float[Array, ""]:
        """lim_{L -> oo} of attention's risk over the Bayes risk: e^{sigma^2 |a|^2}(1 + sigma^2 |a|^2 / d)."""
        return _generated.attention_bayes_ratio_limit(self.d, self.sigma, a_norm)


class LocationMixture(eqx.Module):
    """z = (location_j, scale_j), one of K components (prior `weights`); keys k_l | z ~ N(location_j, scale_j^2 I_d).

    **Arguments:** `locations` (K, d); `weights` (K,), positive, normalised here (default uniform); `sigma`: the
    keys' scale, one number (> 0) shared by the components or K of them (a location-scale mixture).
    """

    locations: np.ndarray
    weights: np.ndarray
    scales: np.ndarray

    def __init__(self, locations, weights=None, sigma=1.0):
        locations = as_floats("LocationMixture.locations", locations)
        if locations.ndim != 2 or not np.isfinite(locations).all():
            raise InvalidInput(f"LocationMixture.locations must be a finite (K, d) array, got shape {locations.shape}")
        K = locations.shape[0]
        weights = np.full(K, 1.0 / K) if weights is None else as_floats("LocationMixture.weights", weights)
        if weights.shape != (K,) or not (np.isfinite(weights).all() and (weights > 0).all()):
            raise InvalidInput(f"LocationMixture.weights must be {K} positive numbers, got {weights.tolist()}")
        scales = as_floats("LocationMixture.sigma", sigma)
        scales = np.full(K, scales) if scales.ndim == 0 else scales
        if scales.shape != (K,) or not (np.isfinite(scales).all() and (scales > 0).all()):
            raise InvalidInput(
                f"LocationMixture.sigma must be a number > 0 or {K} of them, got {np.ravel(sigma).tolist()}"
            )
        self.locations, self.weights, self.scales = locations, weights / weights.sum(), scales.copy()

    def sample(self, key, L: int, n: int) -> tuple[Int[Array, " n"], Float[Array, "n L d"]]:
        """n sequences: (the component of each (n,), its L keys (n, L, d))."""
        L, n = check_count("L", L, 1), check_count("n", n, 1)
        key_z, key_k = jax.random.split(as_key(key))
        component = jax.random.choice(key_z, len(self.weights), (n,), p=jnp.asarray(self.weights))
        noise = (
            jax.random.normal(key_k, (n, L, self.locations.shape[1])) * jnp.asarray(self.scales)[component, None, None]
        )
        return component, jnp.asarray(self.locations)[component][:, None, :] + noise

    def posterior(self, keys: Float[Array, "... L d"]) -> Float[Array, "... K"]:
        """The exact posterior P(z = z_j | keys) (Bayes' rule in log space), summing to one."""
        locations, scales = jnp.asarray(self.locations), jnp.asarray(self.scales)
        L, d = keys.shape[-2:]
        # log p(keys | j) = -sum_l ||k_l - z_j||^2 / (2 s_j^2) - L d log s_j + const, through the keys'
        # sums: sum_l ||k_l||^2 - 2 <sum_l k_l, z_j> + L ||z_j||^2.
        squares = jnp.sum(keys**2, axis=(-2, -1))[..., None]
        cross = jnp.sum(keys, axis=-2) @ locations.T
        distances = squares - 2 * cross + L * jnp.sum(locations**2, -1)
        log_likelihood = -distances / (2 * scales**2) - L * d * jnp.log(scales)
        return jax.nn.softmax(jnp.log(jnp.asarray(self.weights)) + log_likelihood, axis=-1)
