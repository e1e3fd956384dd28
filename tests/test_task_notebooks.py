"""Execute the task packages' teaching notebooks (5 to 7) and check the numbers they print.

The same check as tests/test_notebooks.py (`execute_and_check`), in a file of its own so that the test
suite's workers, which take whole files (`--dist loadfile`), share the notebooks between them.
"""

import pytest

from tests.test_notebooks import TASK_NOTEBOOKS, execute_and_check


@pytest.mark.parametrize("name", TASK_NOTEBOOKS)
def test_task_notebook_executes_and_checks_its_numbers(name):
    execute_and_check(name)
