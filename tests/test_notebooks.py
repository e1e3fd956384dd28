"""Execute the teaching notebooks in notebooks/ and check the numbers they print.

Each notebook asserts its own facts (with the tolerances stated in its text), so an execution
error fails the test; the test then reads the `name = value` lines of the notebook's summary
cell and checks one fact per notebook again, from the outputs.
"""

import math
import re
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SUMMARY_LINE = re.compile(r"^(\w+) = ([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)$", re.MULTILINE)


def _check_task(values):
    # The closed-form risk of the oracle against its empirical risk on samples: 4 standard errors.
    difference = abs(values["oracle_risk_closed_form"] - values["oracle_risk_empirical"])
    assert difference < 4 * values["oracle_risk_stderr"]
    assert values["bayes_risk"] < values["oracle_risk_closed_form"] < values["linear_risk"]


def _check_derivation(values):
    # The SymPy risk evaluated numerically against flowsim's compiled risk.
    assert math.isclose(values["risk_sympy"], values["risk_flowsim"], rel_tol=1e-12)
    assert values["nonzero_invariance_checks"] == 0


def _check_phase_portraits(values):
    assert values["fixed_points_on_M"] == 5
    assert values["oracle_share_on_M"] == 1.0
    assert 0 < values["oracle_share_on_sphere_small_lambda"] < 1  # some sphere starts reach the other sink
    assert values["schedule_share"] == 1.0


def _check_ode_vs_sgd(values):
    assert values["deviation_lr_small"] < values["deviation_lr_large"]
    assert values["deviation_batch_large"] < values["deviation_batch_small"]
    assert values["final_train_risk"] < values["final_population_risk"]
    assert values["chain_deviation_small_lr"] < values["chain_deviation_large_lr"]


def _check_attention_maps(values):
    # With gamma = 1, softmax attention at (k*, v*) and lam = sqrt(d/2) is the Bayes predictor: 4 standard errors.
    assert abs(values["softmax_risk_at_s"] - values["bayes_risk"]) < 4 * values["bayes_risk_stderr"]
    assert values["linear_risk_at_s"] > 1000 * values["bayes_risk"]
    assert values["distance_to_M_from_M"] == 0.0  # M is invariant under softmax's flow, exactly
    assert values["largest_end_distance_to_oracle"] < 2e-3  # every start reaches (k*, v*)
    # What training reaches: softmax the Bayes risk (4 standard errors), linear attention ten times more.
    difference = abs(values["advantage_softmax_best"] - values["advantage_bayes_risk"])
    assert difference < 4 * values["advantage_bayes_stderr"]
    assert values["advantage_linear_best"] > 10 * values["advantage_softmax_best"]


def _check_sparse_variable_creation(values):
    assert abs(values["label_balance_z"]) < 4  # the AND's labels are balanced: 4 standard errors
    assert values["erm_median_T10"] < values["erm_median_T1000"]
    assert values["constructed_accuracy_R_star"] == 1.0 and values["constructed_accuracy_quarter"] < 0.9
    assert values["head_accuracy_m80"] >= 0.99 and values["head_mass_m80"] >= 0.5
    assert values["head_accuracy_m10"] < 0.99 and values["mlp_accuracy_m80"] < 0.99
    assert values["critical_T16"] >= values["erm_median_T16"]
    assert 0.3 < values["power_fit_exponent"] < 0.7 and values["mlp_power_fit_exponent"] > 0.9


def _check_latent_posterior_attention(values):
    # L * MSE at L = 4096 against the derived constant 7.37: 4 standard errors.
    assert abs(values["scaled_mse_at_4096"] - values["error_constant"]) < 4 * values["scaled_mse_stderr"]
    assert abs(values["ratio_at_half"] - 1.3643) < 0.05
    assert values["tv_two_heads"] < values["tv_one_head"] / 10
    assert values["deviation_L256"] < values["deviation_L16"]


CHECKS = {
    "01_task": _check_task,
    "02_derivation": _check_derivation,
    "03_phase_portraits": _check_phase_portraits,
    "04_ode_vs_sgd": _check_ode_vs_sgd,
    "05_attention_maps": _check_attention_maps,
    "06_sparse_variable_creation": _check_sparse_variable_creation,
    "07_latent_posterior_attention": _check_latent_posterior_attention,
}


def _printed_values(notebook) -> dict[str, float]:
    """The `name = value` lines printed by the notebook's code cells."""
    values = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.output_type == "stream" and output.name == "stdout":
                values |= {name: float(value) for name, value in SUMMARY_LINE.findall(output.text)}
    return values


#: The notebooks of the task packages (section 7 on): executed by tests/test_task_notebooks.py, a file of its own,
#: so that the test suite's two workers (`--dist loadfile`) share the notebooks between them.
TASK_NOTEBOOKS = ("05_attention_maps", "06_sparse_variable_creation", "07_latent_posterior_attention")


@pytest.mark.parametrize("name", sorted(set(CHECKS) - set(TASK_NOTEBOOKS)))
def test_notebook_executes_and_checks_its_numbers(name):
    execute_and_check(name)


def execute_and_check(name: str) -> None:
    """Execute notebooks/{name}.ipynb (an error or a failed assert fails) and check its printed numbers.

    The kernel runs in a new temporary folder outside the repository, as a student's would: a notebook
    must not read the repository's files (it imports the installed flowsim).
    """
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    with tempfile.TemporaryDirectory(prefix=f"flowsim-notebook-{name}-") as folder:
        client = NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": folder}})
        client.execute()  # raises CellExecutionError, with the failing cell, on any error or failed assert
    CHECKS[name](_printed_values(notebook))


def test_notebooks_are_stored_without_outputs():
    assert sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb")) == sorted(CHECKS), "every notebook is tested"
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has stored outputs"
