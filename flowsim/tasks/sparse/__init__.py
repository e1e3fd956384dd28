"""Sparse variable creation (docs/science.md section 8; Edelman, Goel, Kakade, Zhang, ICML 2022).

A label that depends on s of T input bits; one attention head can select them, and the samples needed to
learn the target should grow like log T. This package holds the data model (`SparseTarget`: bits, hidden
supports, labels, training sets redrawn until they identify the target), what any learner needs (the
information limit, ERM identifiability) and what one head can represent (the constructed head, the softmax
Lipschitz lemma).
"""

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

__all__ = [
    "FUNCTIONS",
    "SparseTarget",
    "constructed_head_predict",
    "constructed_mass_off_support",
    "erm_identifiability",
    "evaluate_target",
    "identifies",
    "information_limit",
    "required_score",
    "sample_bits",
    "softmax_lipschitz_gap",
    "training_set",
]
