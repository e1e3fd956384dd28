"""Sparse variable creation (docs/science.md section 8; Edelman, Goel, Kakade, Zhang, ICML 2022).

A label that depends on s of T input bits; one attention head can select them, and the samples needed to
learn the target should grow like log T. This package holds the data model (`SparseTarget`: bits, hidden
supports, labels, training sets redrawn until they identify the target), what any learner needs (the
information limit, ERM identifiability), what one head can represent (the constructed head, the softmax
Lipschitz lemma), the learners (`AttentionHead` read out from a [CLS] query, `BitsMLP`), their training
(full-batch Adam, vmapped over models) and the critical sample size m*(T) (`critical_sample_size`).
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
from flowsim.tasks.sparse._model import AttentionHead, BitsMLP
from flowsim.tasks.sparse._sweep import (
    DEFAULT_TS,
    MLP_SPAN,
    MLP_TS,
    PAPER_POINTS,
    Fit,
    Sweep,
    fit_scaling,
    sweep,
    sweep_figure,
    sweep_table,
)
from flowsim.tasks.sparse._train import LEARNERS, TrainingRun, train

__all__ = [
    "DEFAULT_TS",
    "FUNCTIONS",
    "LEARNERS",
    "MLP_SPAN",
    "MLP_TS",
    "PAPER_POINTS",
    "SUCCESS_ACCURACY",
    "AttentionHead",
    "BitsMLP",
    "CriticalSize",
    "Fit",
    "SparseTarget",
    "Sweep",
    "TrainingRun",
    "constructed_head_predict",
    "constructed_mass_off_support",
    "critical_sample_size",
    "erm_identifiability",
    "evaluate_target",
    "fit_scaling",
    "identifies",
    "information_limit",
    "required_score",
    "sample_bits",
    "softmax_lipschitz_gap",
    "success_rates",
    "sweep",
    "sweep_figure",
    "sweep_table",
    "train",
    "training_set",
]
