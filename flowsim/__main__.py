"""`python -m flowsim`: the command line, as the `flowsim` executable (also `python -m flowsim.cli`)."""

from flowsim.cli import executable

executable()
