"""Single-location regression (SPEC.md sections 1-4): the task, its risk and baselines."""

from flowsim.tasks.slr._baselines import (
    Estimate,
    bayes_predict,
    bayes_risk,
    fit_linear,
    linear_predict,
    linear_risk,
)
from flowsim.tasks.slr._compare import (
    ATTRACTOR_TOL,
    REFERENCES,
    Comparison,
    SweepResult,
    compare,
    overlay_figure,
    sweep_batch,
    sweep_dataset,
    sweep_lr,
)
from flowsim.tasks.slr._data import Batch, GroundTruth, empirical_risk, ground_truth, predict, sample
from flowsim.tasks.slr._dynamics import MapTrajectories, flow_field, iterate_map, solve_flow
from flowsim.tasks.slr._experiments import (
    EXPERIMENTS,
    Experiment,
    ExperimentResult,
    Summary,
    experiment_figure,
    reproduce,
    run_experiment,
    summary_table,
)
from flowsim.tasks.slr._fixedpoints import (
    Attractor,
    attractors,
    canonical_sign,
    fixed_points,
    fixed_points_on_manifold,
)
from flowsim.tasks.slr._init import INITIALISATIONS, initial_overlaps
from flowsim.tasks.slr._overlaps import OVERLAP_NAMES, check_overlaps, gram_matrix, overlaps
from flowsim.tasks.slr._problem import Problem
from flowsim.tasks.slr._risk import oracle_risk, population_risk
from flowsim.tasks.slr._sgd import ENGINES, MODES, SGDRun, run_sgd, vectors_with_overlaps
from flowsim.tasks.slr._verify import (
    Setting,
    VerifyReport,
    VerifyRow,
    default_settings,
    format_report,
    verify_convergence,
)

__all__ = [
    "ATTRACTOR_TOL",
    "ENGINES",
    "EXPERIMENTS",
    "INITIALISATIONS",
    "MODES",
    "OVERLAP_NAMES",
    "REFERENCES",
    "Attractor",
    "Batch",
    "Comparison",
    "Estimate",
    "Experiment",
    "ExperimentResult",
    "GroundTruth",
    "MapTrajectories",
    "Problem",
    "SGDRun",
    "Setting",
    "Summary",
    "SweepResult",
    "VerifyReport",
    "VerifyRow",
    "attractors",
    "bayes_predict",
    "bayes_risk",
    "canonical_sign",
    "check_overlaps",
    "compare",
    "default_settings",
    "empirical_risk",
    "experiment_figure",
    "fit_linear",
    "fixed_points",
    "fixed_points_on_manifold",
    "flow_field",
    "format_report",
    "gram_matrix",
    "ground_truth",
    "initial_overlaps",
    "iterate_map",
    "linear_predict",
    "linear_risk",
    "oracle_risk",
    "overlaps",
    "overlay_figure",
    "population_risk",
    "predict",
    "reproduce",
    "run_experiment",
    "run_sgd",
    "sample",
    "solve_flow",
    "summary_table",
    "sweep_batch",
    "sweep_dataset",
    "sweep_lr",
    "vectors_with_overlaps",
    "verify_convergence",
]
