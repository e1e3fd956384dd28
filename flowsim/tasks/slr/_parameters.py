"""What the lower modules of single-location regression read of the task they are given.

The rule's risks and flows (`_maps`) and the sampler (`_data`, and through it the overlap chain) take a `Problem` or
a `ProblemOnManifold` and read only these members. They name this protocol rather than import `_problem`, which
imports them: the package's modules import one way, `_problem` on top (tests/test_imports.py).
"""

from typing import Protocol

from jaxtyping import Array, Float

from flowsim.quadrature import GaussianRule
from flowsim.tasks.slr._attention import AttentionMap

__all__ = ["Parameters"]


class Parameters(Protocol):
    """The parameters of single-location regression as the rule, the sampler and the chain read them."""

    d: int
    L: int
    gamma: float
    eps: float
    attention: AttentionMap
    rule: GaussianRule | None

    @property
    def s(self) -> float:
        """The informative token's mean along k*: sqrt(d/2)."""
        ...

    def lam_at(self, t) -> Float[Array, ""]:
        """lam at flow time t."""
        ...
