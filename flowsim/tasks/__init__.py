"""The tasks flowsim simulates, each a package of its own, registered here.

A task package holds its model (an `AbstractTask`), its generated equations, data, baselines,
experiments and figures, and a `cli` module that declares its command-line options and commands
(see docs/architecture.md, "Adding a task"). Adding a task adds one line to `TASKS`.
"""

from flowsim.tasks import latent, slr, sparse

#: The registered tasks: name -> package.
TASKS = {"slr": slr, "sparse": sparse, "latent": latent}

__all__ = ["TASKS", "latent", "slr", "sparse"]
