"""Sparse variable creation (docs/science.md section 8; Edelman, Goel, Kakade, Zhang, ICML 2022).

A label that depends on s of T input bits; one attention head can select them, and the samples needed to
learn the target should grow like log T. This package holds the data model (`SparseTarget`: bits, hidden
supports, labels, training sets redrawn until they identify the target), what any learner needs (the
information limit, ERM identifiability), what one head can represent (the constructed head, the softmax
Lipschitz lemma), the learners (`AttentionHead` read out from a [CLS] query, `BitsMLP`, the paper's
`OneLayerTransformer`, and the l1-penalised logistic regression "l1" as the positive control), their training
(full-batch Adam or AdamW, vmapped over models, for a fixed budget or to convergence), the critical sample
size m*(T) (`critical_sample_size`), measured by repeated independent searches (`repeated_critical_size`), and its
scaling law with a model selection (`sweep`, `fit_scaling`).
"""

from flowsim.tasks.sparse._critical import SUCCESS_ACCURACY, CriticalSize, critical_sample_size, success_rates
from flowsim.tasks.sparse._data import (
    FUNCTIONS,
    SparseTarget,
    evaluate_target,
    identifies,
    sample_bits,
    training_set,
)
from flowsim.tasks.sparse._limits import (
    constructed_head_predict,
    constructed_mass_off_support,
    erm_identifiability,
    information_limit,
    required_score,
    softmax_lipschitz_gap,
)
from flowsim.tasks.sparse._model import AttentionHead, BitsMLP, OneLayerTransformer
from flowsim.tasks.sparse._repeats import (
    INTERVAL_LEVEL,
    RepeatedSize,
    median_interval,
    repeated_critical_size,
    repeated_size,
    search_key,
)
from flowsim.tasks.sparse._sweep import (
    BUDGETS,
    DEFAULT_REPEATS,
    DEFAULT_TS,
    EXTENDED_BUDGETS,
    EXTENDED_TS,
    LAWS,
    MLP_SPAN,
    MLP_TS,
    PAPER_POINTS,
    TRANSFORMER_TS,
    Fit,
    Sweep,
    critical_sigma,
    fit_scaling,
    paper_table,
    read_sweep,
    selection_table,
    sweep,
    sweep_figure,
    sweep_table,
    verdict,
)
from flowsim.tasks.sparse._train import DEFAULTS, LEARNERS, LOSS_THRESHOLD, L1Fit, TrainingRun, fit_l1, train

__all__ = [
    "BUDGETS",
    "DEFAULTS",
    "DEFAULT_REPEATS",
    "DEFAULT_TS",
    "EXTENDED_BUDGETS",
    "EXTENDED_TS",
    "FUNCTIONS",
    "INTERVAL_LEVEL",
    "LAWS",
    "LEARNERS",
    "LOSS_THRESHOLD",
    "MLP_SPAN",
    "MLP_TS",
    "PAPER_POINTS",
    "SUCCESS_ACCURACY",
    "TRANSFORMER_TS",
    "AttentionHead",
    "BitsMLP",
    "CriticalSize",
    "Fit",
    "L1Fit",
    "OneLayerTransformer",
    "RepeatedSize",
    "SparseTarget",
    "Sweep",
    "TrainingRun",
    "constructed_head_predict",
    "constructed_mass_off_support",
    "critical_sample_size",
    "critical_sigma",
    "erm_identifiability",
    "evaluate_target",
    "fit_l1",
    "fit_scaling",
    "identifies",
    "information_limit",
    "median_interval",
    "paper_table",
    "read_sweep",
    "repeated_critical_size",
    "repeated_size",
    "required_score",
    "sample_bits",
    "search_key",
    "selection_table",
    "softmax_lipschitz_gap",
    "success_rates",
    "sweep",
    "sweep_figure",
    "sweep_table",
    "train",
    "training_set",
    "verdict",
]
