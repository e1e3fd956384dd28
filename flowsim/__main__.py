"""`python -m flowsim`: the command line, as the `flowsim` executable (also `python -m flowsim.cli`)."""

import sys

from flowsim.cli import command

sys.exit(command())
