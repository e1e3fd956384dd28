"""Attention as latent-posterior inference (docs/science.md section 9; Zhang, Liu, Cai, Wang, Wang, 2022).

Exchangeable tokens have a latent-variable model, and softmax attention estimates a functional of the
latent's law: on a Gaussian model, attention tends to the tilted mean as the input length L grows, with
an error of order 1/L whose constant is derived (derivations/latent.py). This package holds the models
(`TiltedGaussian`, `ConjugateLocation`, `LocationMixture`), the estimators (softmax, kernel (CME),
Nadaraya-Watson and multi-head attention; the exact posteriors as the Bayes baselines), the generated
closed forms, the experiments (`attention_error`, `regression_error`, `location_risk`), and the supervised
read-out of attention as a task (`Readout`: its gradient flow at L = oo on five overlaps, run by the engine,
against gradient descent on finite sequences, `train_readout`).
"""

from flowsim.tasks.latent._attention import (
    gaussian_kernel,
    kernel_attention,
    multihead_attention,
    nadaraya_watson,
    softmax_attention,
)
from flowsim.tasks.latent._experiments import (
    MIXTURE_STEPS,
    AttentionError,
    LocationRisk,
    MixturePosterior,
    RegressionError,
    attention_error,
    attention_error_figure,
    attention_error_table,
    attention_error_work,
    location_risk,
    location_risk_figure,
    location_risk_table,
    location_risk_work,
    mixture_posterior,
    mixture_posterior_figure,
    mixture_posterior_table,
    mixture_posterior_work,
    regression_error,
    regression_error_table,
    regression_error_work,
)
from flowsim.tasks.latent._models import ConjugateLocation, LocationMixture, TiltedGaussian, check_noise_ratio
from flowsim.tasks.latent._readout import (
    Readout,
    ReadoutLearning,
    readout_learning,
    readout_learning_figure,
    readout_learning_table,
    readout_learning_work,
    readout_overlaps,
    train_readout,
    train_readout_work,
)

__all__ = [
    "MIXTURE_STEPS",
    "AttentionError",
    "ConjugateLocation",
    "LocationMixture",
    "LocationRisk",
    "MixturePosterior",
    "Readout",
    "ReadoutLearning",
    "RegressionError",
    "TiltedGaussian",
    "attention_error",
    "attention_error_figure",
    "attention_error_table",
    "attention_error_work",
    "check_noise_ratio",
    "gaussian_kernel",
    "kernel_attention",
    "location_risk",
    "location_risk_figure",
    "location_risk_table",
    "location_risk_work",
    "mixture_posterior",
    "mixture_posterior_figure",
    "mixture_posterior_table",
    "mixture_posterior_work",
    "multihead_attention",
    "nadaraya_watson",
    "readout_learning",
    "readout_learning_figure",
    "readout_learning_table",
    "readout_learning_work",
    "readout_overlaps",
    "regression_error",
    "regression_error_table",
    "regression_error_work",
    "softmax_attention",
    "train_readout",
    "train_readout_work",
]
