"""`python -m flowsim.cli`: the command line."""

from flowsim.cli import executable

executable()
