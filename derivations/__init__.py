"""SymPy derivations of flowsim's equations: the single source of truth for every formula.

Shared tools, free of any task: `lemmas` (the table of one-dimensional Gaussian lemmas),
`gaussian` (Gaussian expectations reduced to that table), `flow` (the five overlaps and the
sphere-projected gradient flow on them, for any risk) and `codegen` (SymPy to JAX code and
LaTeX). One file per task: `slr` (single-location regression: its risk from the model's
definition, and its generated files). `build` writes every task's files.

In a checkout, `python -m derivations` regenerates the committed outputs
(flowsim/tasks/slr/_generated.py and docs/equations.md); the folder is installed with
flowsim as `flowsim.derivations` (modules import each other relatively, so both names work).
"""
