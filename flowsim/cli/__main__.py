"""`python -m flowsim.cli`: the command line."""

import sys

from flowsim.cli import main

sys.exit(main())
