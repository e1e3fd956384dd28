"""SymPy derivations of flowsim's equations: the single source of truth for every formula.

`python -m derivations` regenerates the committed outputs (flowsim/_generated/ and
docs/equations.md) from the model definitions and the lemma table.
"""
