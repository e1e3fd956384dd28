"""Single-location regression (docs/science.md sections 1-6): the task, its data, baselines and experiments.

`Problem` is the task (`flowsim.AbstractTask`): its state is the five overlaps. The engine's
functions work on it directly; the most used are re-exported here so that `from flowsim import slr`
is enough for a session: `slr.solve_flow(problem, m0, ts)`, `slr.compare(run)`, ...
"""

from flowsim.compare import Comparison, SweepResult, compare, sweep_batch, sweep_dataset, sweep_lr
from flowsim.experiments import ExperimentResult, Summary, summary_table
from flowsim.fixedpoints import Attractor, attractors
from flowsim.integrate import solve_flow
from flowsim.maps import MapTrajectories, iterate_map
from flowsim.sgd import SGDRun
from flowsim.tasks.slr._advantage import DEFAULT_LAMS, Advantage, advantage_figure, statistical_advantage
from flowsim.tasks.slr._attention import ATTENTION_MAPS, NORMALISATIONS, SCORE_GRID, AttentionMap, attention_weights
from flowsim.tasks.slr._baselines import (
    Estimate,
    bayes_predict,
    bayes_risk,
    fit_linear,
    linear_predict,
    linear_risk,
)
from flowsim.tasks.slr._data import Batch, GroundTruth, empirical_risk, ground_truth, predict, sample
from flowsim.tasks.slr._experiments import (
    EXPERIMENTS,
    Experiment,
    experiment_figure,
    reproduce,
    run_experiment,
)
from flowsim.tasks.slr._family import DataModel, Lengths, MaxTokens, SpikedTokens, marion_slr, max_slr, spiked_slr
from flowsim.tasks.slr._family_data import FamilyBatch, family_predict, family_sample
from flowsim.tasks.slr._family_fast import MomentTable, RuleMoments
from flowsim.tasks.slr._family_fast import tabulate as tabulate_moments
from flowsim.tasks.slr._family_figure import (
    FIGURE_TWO_MAPS,
    FIGURE_TWO_NAMES,
    FIGURE_TWO_NUS,
    FIGURE_TWO_SETTINGS,
    Basins,
    FigureRules,
    FigureTwo,
    basin_shares,
    figure_two,
    figure_two_figure,
    figure_two_records,
    figure_two_text,
    population_optimum,
)
from flowsim.tasks.slr._family_fixedpoints import family_fixed_points
from flowsim.tasks.slr._family_problem import (
    FamilyOnPlane,
    FamilyProblem,
    FreeNorms,
    UnitNorms,
    bayes_point,
    seven_from_vectors,
    unrealizable_seven,
)
from flowsim.tasks.slr._family_risk import SEVEN
from flowsim.tasks.slr._family_risk import bayes_risk as family_bayes_risk
from flowsim.tasks.slr._family_sgd import FAMILY_MODES, FamilyTraining, family_loss, run_family_sgd, train_family
from flowsim.tasks.slr._fixedpoints import fixed_points, fixed_points_on_manifold
from flowsim.tasks.slr._heads_fixedpoints import heads_fixed_points
from flowsim.tasks.slr._heads_fixedpoints import invariant_sets as heads_invariant_sets
from flowsim.tasks.slr._heads_outcome import OUTCOMES as HEADS_OUTCOMES
from flowsim.tasks.slr._heads_outcome import (
    HeadsReproduction,
    OutcomeShare,
    classify_heads,
    outcome_shares,
    reproduce_heads,
)
from flowsim.tasks.slr._heads_phase import SpecialisationDiagram, specialisation_diagram, specialisation_figure
from flowsim.tasks.slr._heads_problem import HeadsProblem
from flowsim.tasks.slr._heads_sgd import run_heads_sgd
from flowsim.tasks.slr._heads_state import HeadsLayout, heads_layout, heads_overlaps
from flowsim.tasks.slr._init import INITIALISATIONS, initial_overlaps
from flowsim.tasks.slr._maps import flow_by_rule, risk_by_rule
from flowsim.tasks.slr._overlaps import OVERLAP_NAMES, check_overlaps, gram_matrix, overlaps
from flowsim.tasks.slr._problem import LARGEST_LAM, ORACLE, Problem, ProblemOnManifold, distance_to_manifold
from flowsim.tasks.slr._risk import oracle_risk, population_risk
from flowsim.tasks.slr._sgd import ENGINES, MODES, run_sgd, vectors_with_overlaps
from flowsim.tasks.slr._verify import CLAIM, default_settings, verify_convergence

__all__ = [
    "ATTENTION_MAPS",
    "CLAIM",
    "DEFAULT_LAMS",
    "ENGINES",
    "EXPERIMENTS",
    "FAMILY_MODES",
    "FIGURE_TWO_MAPS",
    "FIGURE_TWO_NAMES",
    "FIGURE_TWO_NUS",
    "FIGURE_TWO_SETTINGS",
    "HEADS_OUTCOMES",
    "INITIALISATIONS",
    "LARGEST_LAM",
    "MODES",
    "NORMALISATIONS",
    "ORACLE",
    "OVERLAP_NAMES",
    "SCORE_GRID",
    "SEVEN",
    "Advantage",
    "AttentionMap",
    "Attractor",
    "Basins",
    "Batch",
    "Comparison",
    "DataModel",
    "Estimate",
    "Experiment",
    "ExperimentResult",
    "FamilyBatch",
    "FamilyOnPlane",
    "FamilyProblem",
    "FamilyTraining",
    "FigureRules",
    "FigureTwo",
    "FreeNorms",
    "GroundTruth",
    "HeadsLayout",
    "HeadsProblem",
    "HeadsReproduction",
    "Lengths",
    "MapTrajectories",
    "MaxTokens",
    "MomentTable",
    "OutcomeShare",
    "Problem",
    "ProblemOnManifold",
    "RuleMoments",
    "SGDRun",
    "SpecialisationDiagram",
    "SpikedTokens",
    "Summary",
    "SweepResult",
    "UnitNorms",
    "advantage_figure",
    "attention_weights",
    "attractors",
    "basin_shares",
    "bayes_point",
    "bayes_predict",
    "bayes_risk",
    "check_overlaps",
    "classify_heads",
    "compare",
    "default_settings",
    "distance_to_manifold",
    "empirical_risk",
    "experiment_figure",
    "family_bayes_risk",
    "family_fixed_points",
    "family_loss",
    "family_predict",
    "family_sample",
    "figure_two",
    "figure_two_figure",
    "figure_two_records",
    "figure_two_text",
    "fit_linear",
    "fixed_points",
    "fixed_points_on_manifold",
    "flow_by_rule",
    "gram_matrix",
    "ground_truth",
    "heads_fixed_points",
    "heads_invariant_sets",
    "heads_layout",
    "heads_overlaps",
    "initial_overlaps",
    "iterate_map",
    "linear_predict",
    "linear_risk",
    "marion_slr",
    "max_slr",
    "oracle_risk",
    "outcome_shares",
    "overlaps",
    "population_optimum",
    "population_risk",
    "predict",
    "reproduce",
    "reproduce_heads",
    "risk_by_rule",
    "run_experiment",
    "run_family_sgd",
    "run_heads_sgd",
    "run_sgd",
    "sample",
    "seven_from_vectors",
    "solve_flow",
    "specialisation_diagram",
    "specialisation_figure",
    "spiked_slr",
    "statistical_advantage",
    "summary_table",
    "sweep_batch",
    "sweep_dataset",
    "sweep_lr",
    "tabulate_moments",
    "train_family",
    "unrealizable_seven",
    "vectors_with_overlaps",
    "verify_convergence",
]
