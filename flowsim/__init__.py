"""flowsim: gradient-flow and SGD dynamics of simplified attention layers.

The engine (integration, maps, fixed points, SGD, compare, verify, experiments, figures) works
on any task (`AbstractTask`); the tasks live in `flowsim.tasks` (`flowsim.tasks.TASKS`), and the
first one is re-exported as `flowsim.slr`. Importing flowsim enables float64 in JAX
(see `flowsim._config`).
"""

# First, before JAX: a signal while the `flowsim` executable starts ends it in one line (`flowsim._startup`).
from flowsim import _startup  # noqa: F401  # isort: skip

from flowsim import (
    _checkout,
    _config,  # noqa: F401  (float64 before anything is traced)
)
from flowsim._interrupt import Interrupted
from flowsim._status import Failure, Status
from flowsim._task import (
    AbstractTask,
    Parameter,
    canonical,
    distance_to_targets,
    distance_up_to_symmetry,
)
from flowsim.compare import Comparison, SweepResult, compare, sweep_batch, sweep_dataset, sweep_lr
from flowsim.experiments import ExperimentResult, Summary, run_experiment, summary_table
from flowsim.fixedpoints import Attractor, FixedPoint, attractors, fixed_points
from flowsim.integrate import Trajectories, integrate, solve_flow
from flowsim.maps import MapTrajectories, iterate_map
from flowsim.outcomes import Outcomes, classify_end_points
from flowsim.sgd import SGDRun, run_sgd
from flowsim.tasks import TASKS, slr
from flowsim.verify import Setting, VerifyReport, VerifyRow, format_report, verify_convergence

__version__ = "0.1.0"

_checkout.install()  # `import flowsim.derivations` from a checkout, as from an install

__all__ = [
    "TASKS",
    "AbstractTask",
    "Attractor",
    "Comparison",
    "ExperimentResult",
    "Failure",
    "FixedPoint",
    "Interrupted",
    "MapTrajectories",
    "Outcomes",
    "Parameter",
    "SGDRun",
    "Setting",
    "Status",
    "Summary",
    "SweepResult",
    "Trajectories",
    "VerifyReport",
    "VerifyRow",
    "__version__",
    "attractors",
    "canonical",
    "classify_end_points",
    "compare",
    "distance_to_targets",
    "distance_up_to_symmetry",
    "fixed_points",
    "format_report",
    "integrate",
    "iterate_map",
    "run_experiment",
    "run_sgd",
    "slr",
    "solve_flow",
    "summary_table",
    "sweep_batch",
    "sweep_dataset",
    "sweep_lr",
    "verify_convergence",
]
