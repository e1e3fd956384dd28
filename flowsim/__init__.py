"""flowsim: gradient-flow and SGD dynamics of simplified attention layers.

Importing flowsim enables float64 in JAX (see `flowsim._config`).
"""

from flowsim import _config  # noqa: F401  (float64 before anything is traced)
from flowsim.tasks import slr

__version__ = "0.1.0"

__all__ = ["__version__", "slr"]
