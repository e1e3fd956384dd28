"""`python -m flowsim.cli`: the command line."""

import sys

from flowsim.cli import command

sys.exit(command())
