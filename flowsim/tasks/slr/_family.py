"""The SLR model family's data models: token law, length law and label noise (docs/follow-up-models.md).

Duranthon, Marion, Boyer, Loureiro and Zdeborova (ICLR 2026) vary Marion et al.'s data in three ways; each is a
field of one `DataModel`, the single seam through which a model of the family enters the SLR task:

- the token law: `SpikedTokens(spike, spread)` (the relevant token N(spike k*, spread^2 I), the others N(0, I);
  spiked-SLR(nu) is spike sqrt(nu), spread 1; Marion et al.'s is spike sqrt(d/2), spread gamma) or
  `MaxTokens(nu)` (every token N(0, I); the relevant position drawn as softmax_l(nu <x_l, k*>));
  `SpikedTokens(spike, spread, locations=S)` has S informative positions (Marion et al.'s appendix E.3,
  docs/heads.md: several heads), each with its own target pair (k*_j, v*_j), the label their sum;
- the length law: `Lengths` (a fixed L, or a distribution on {1, 2, ...}, drawn for each sequence);
- the label noise Delta: y = <x_j, v*> + Delta xi.

`spiked_slr`, `max_slr` and `marion_slr` make the three named models.
"""

import math

import equinox as eqx
import numpy as np

from flowsim._checks import NOISE, NON_NEGATIVE, SCALE, InvalidInput

__all__ = ["DataModel", "Lengths", "MaxTokens", "SpikedTokens", "marion_slr", "max_slr", "spiked_slr"]

#: The longest sequence a length law may name: each length is its own rule over the scores (L or 2L dimensions).
LONGEST = 64


def _number(allowed, name: str, value) -> float:
    return float(allowed.check(name, value))


class SpikedTokens(eqx.Module):
    """The relevant token N(spike k*, spread^2 I_D), every other token N(0, I_D); the relevant position uniform.

    With S = `locations` > 1 there are S informative positions J_1, ..., J_S, distinct and uniform; the token at J_j
    is N(spike k*_j, spread^2 I_D), each with its own noise, and the label reads y = sum_j <x_{J_j}, v*_j> + Delta xi
    (the 2S targets orthonormal). S = 1 is the single-location model.

    **Arguments:** `spike` (>= 0: its mean along k*); `spread` (its standard deviation, in [1e-50, 1e50]; default 1);
    `locations` (S, an integer in [1, LONGEST]; static; default 1; at most the shortest length, `DataModel`);
    `shared_noise` (static; default False): the authors' code's quirk (their toy-multihead notebook draws every
    informative token from one PRNG key), every informative token of a sequence carrying the same noise vector
    N(0, spread^2 I): not the model, only to compare with their numbers; needs S >= 2.
    """

    spike: float
    spread: float = 1.0
    locations: int = eqx.field(static=True, default=1)
    shared_noise: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        _number(NON_NEGATIVE, "SpikedTokens.spike", self.spike)
        _number(SCALE, "SpikedTokens.spread", self.spread)
        locations = self.locations
        if isinstance(locations, bool) or not isinstance(locations, int | np.integer) or not 1 <= locations <= LONGEST:
            raise InvalidInput(f"SpikedTokens.locations must be an integer in [1, {LONGEST}], got {locations!r}")
        if not isinstance(self.shared_noise, bool) or (self.shared_noise and locations < 2):
            raise InvalidInput(
                f"SpikedTokens.shared_noise must be True or False, and True only with locations >= 2 (the informative "
                f"tokens share one noise vector), got {self.shared_noise!r} with locations = {locations}"
            )

    def __repr__(self) -> str:
        several = f", {self.locations} locations" if self.locations > 1 else ""
        several += ", one noise vector shared by them (the authors' quirk)" if self.shared_noise else ""
        return f"spiked tokens (spike {float(self.spike):g}, spread {float(self.spread):g}{several})"


class MaxTokens(eqx.Module):
    """Every token N(0, I_D); given the tokens, the relevant position is softmax_l(nu <x_l, k*>).

    **Arguments:** `nu` (>= 0; nu = 0: a uniform position, nu -> infinity: the token most aligned with k*).
    """

    nu: float

    def __check_init__(self):
        _number(NON_NEGATIVE, "MaxTokens.nu", self.nu)

    def __repr__(self) -> str:
        return f"max tokens (nu {float(self.nu):g})"


class Lengths(eqx.Module):
    """The law of the sequence length L: `values` (distinct integers in [1, LONGEST]) with `probabilities`.

    A sequence's length is drawn independently of everything else; the predictor's map acts on its own L tokens
    (a normalised map normalises over them). `Lengths.fixed(L)` and `Lengths.uniform(low, high)` make the usual
    two.
    """

    values: tuple[int, ...] = eqx.field(static=True)
    probabilities: tuple[float, ...] = eqx.field(static=True)

    def __check_init__(self):
        values, probabilities = self.values, self.probabilities
        if len(values) == 0:
            raise InvalidInput("Lengths.values must name at least one length, got none")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= LONGEST:
                raise InvalidInput(f"Lengths.values must be integers in [1, {LONGEST}], got {value!r}")
        if len(set(values)) != len(values):
            raise InvalidInput(f"Lengths.values must be distinct, got {values}")
        if len(probabilities) != len(values):
            raise InvalidInput(
                f"Lengths.probabilities must give one probability per length ({len(values)}), got {len(probabilities)}"
            )
        if not all(math.isfinite(p) and p > 0 for p in probabilities) or abs(sum(probabilities) - 1) > 1e-12:
            raise InvalidInput(f"Lengths.probabilities must be positive and sum to 1, got {probabilities}")

    @classmethod
    def fixed(cls, L: int) -> "Lengths":
        """Every sequence of length L."""
        return cls((L,), (1.0,))

    @classmethod
    def uniform(cls, low: int, high: int) -> "Lengths":
        """L uniform on {low, ..., high}."""
        if not (isinstance(low, int) and isinstance(high, int)) or low > high:
            raise InvalidInput(f"Lengths.uniform needs integers low <= high, got {low!r}, {high!r}")
        values = tuple(range(low, high + 1))
        return cls(values, tuple(1.0 / len(values) for _ in values))

    @property
    def longest(self) -> int:
        return max(self.values)

    @property
    def shortest(self) -> int:
        return min(self.values)

    def __repr__(self) -> str:
        if len(self.values) == 1:
            return f"L = {self.values[0]}"
        if all(p == self.probabilities[0] for p in self.probabilities) and self.values == tuple(
            range(self.values[0], self.values[-1] + 1)
        ):
            return f"L ~ uniform{{{self.values[0]}, ..., {self.values[-1]}}}"
        return "L ~ " + ", ".join(f"{v}: {p:g}" for v, p in zip(self.values, self.probabilities, strict=True))


class DataModel(eqx.Module):
    """One data model of the SLR family: token law, length law and label noise.

    **Arguments:**

    - `tokens`: `SpikedTokens` or `MaxTokens`.
    - `lengths`: a `Lengths` (an int L is taken as `Lengths.fixed(L)`).
    - `noise`: the label noise Delta, in [0, 1e50] (default 0).
    """

    tokens: SpikedTokens | MaxTokens
    lengths: Lengths = eqx.field(converter=lambda value: Lengths.fixed(value) if isinstance(value, int) else value)
    noise: float = 0.0

    def __check_init__(self):
        if not isinstance(self.tokens, SpikedTokens | MaxTokens):
            raise InvalidInput(f"DataModel.tokens must be SpikedTokens or MaxTokens, got {type(self.tokens).__name__}")
        if not isinstance(self.lengths, Lengths):
            raise InvalidInput(f"DataModel.lengths must be a Lengths or an int, got {type(self.lengths).__name__}")
        _number(NOISE, "DataModel.noise", self.noise)
        if self.locations > self.lengths.shortest:
            raise InvalidInput(
                f"SpikedTokens.locations = {self.locations} must be at most the shortest length of the law, "
                f"{self.lengths.shortest} (each sequence holds that many distinct informative positions)"
            )

    @property
    def spiked(self) -> bool:
        return isinstance(self.tokens, SpikedTokens)

    @property
    def locations(self) -> int:
        """S, the informative positions of a sequence (1 for max-SLR)."""
        return self.tokens.locations if self.spiked else 1

    def __repr__(self) -> str:
        return f"{self.tokens!r}, {self.lengths!r}, noise {float(self.noise):g}"


def spiked_slr(nu: float, lengths: Lengths | int = 2, noise: float = 0.0, locations: int = 1) -> DataModel:
    """spiked-SLR(nu): the relevant token N(sqrt(nu) k*, I), the others N(0, I). nu >= 0; `locations`: S informative
    positions (`SpikedTokens`)."""
    return DataModel(SpikedTokens(math.sqrt(_number(NON_NEGATIVE, "nu", nu)), 1.0, locations), lengths, noise)


def max_slr(nu: float, lengths: Lengths | int = 2, noise: float = 0.0, locations: int = 1) -> DataModel:
    """max-SLR(nu): tokens N(0, I), the relevant position softmax_l(nu <x_l, k*>). nu >= 0; `locations` must be 1."""
    if locations != 1:
        raise InvalidInput(
            f"max_slr: locations must be 1 (max-SLR draws one relevant position, softmax_l(nu <x_l, k*>); several "
            f"are not defined: use spiked_slr or marion_slr), got {locations!r}"
        )
    return DataModel(MaxTokens(_number(NON_NEGATIVE, "nu", nu)), lengths, noise)


def marion_slr(d: int, L: int, gamma: float = math.sqrt(0.5), eps: float = 0.0, locations: int = 1) -> DataModel:
    """Marion et al.'s data (docs/science.md section 1): the relevant token N(sqrt(d/2) k*, gamma^2 I), L fixed;
    `locations`: S informative positions, each N(sqrt(d/2) k*_j, gamma^2 I) (their appendix E.3, `SpikedTokens`)."""
    return DataModel(SpikedTokens(math.sqrt(d / 2), gamma, locations), L, eps)
