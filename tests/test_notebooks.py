"""Execute the teaching notebooks in notebooks/, check the numbers they computed, and build the site with them.

Each notebook asserts its own facts (with the tolerances stated in its text), exercises' hidden answers
included, so an execution error fails its test. The test then reads the values it checks from the notebook's
namespace (a cell appended to the run, which prints them as JSON, and is removed afterwards: the notebooks
show students what to take away, not lists of numbers for a test) and checks one fact per notebook again.

Executing all seven costs about eight minutes of CPU (BENCHMARKS.md, "The notebooks' costs"), the whole suite's
budget on 2 cores: the suite executes the two shortest (`EXECUTED`, the task and the derivation: about 35 s), and
FLOWSIM_NOTEBOOKS=1 executes every one (`FLOWSIM_NOTEBOOKS=1 python -m pytest tests/test_notebooks.py`). Every
notebook, executed or not, is checked at no cost against the installed flowsim: each cell compiles, each flowsim
module and name it imports exists, and each flowsim function or class it calls takes the keywords it is given, so
that a renamed function or argument fails here rather than in a student's kernel.

The executed notebooks run in one module, two kernels at a time (each in a new temporary folder outside the
repository, as a student's would), so that the documentation site can then be built, in strict mode, with
them, their outputs and figures: what `mkdocs build` does by executing them itself (the others as stored). Their
pages are then loaded in headless Chromium with the network off (tests/browser.py): every formula typeset, SymPy's
outputs included, and no script error.
"""

import ast
import importlib
import inspect
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from queue import Empty

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.browser import Browser, serve
from tests.test_docs import CHROMIUM, build_site, check_in_browser, needs_chromium

REPOSITORY = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPOSITORY / "notebooks"


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
    # Training means something at these parameters: the oracle and SGD beat the linear and null predictors.
    assert values["oracle_risk"] < values["trained_risk"] < values["linear_risk"] < values["null_risk"]
    assert values["deviation_lr_small"] < values["deviation_lr_large"]
    assert values["deviation_batch_large"] < values["deviation_batch_small"]
    assert values["final_train_risk"] < values["final_population_risk"]
    assert values["chain_deviation_small_lr"] < values["chain_deviation_large_lr"]
    # Two heads (section 5): the flow from a start does not foretell SGD's outcome (at most half the seeds agree), and
    # SGD's heads, whatever their outcome, end below the specialised oracle's risk, itself below predicting 0.
    assert values["heads_agreement"] <= values["heads_seeds"] / 2
    assert values["heads_sgd_end_risk"] < values["heads_specialised_risk"] < values["heads_null_risk"]


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
    # Over T = 256 ... 4096 the control's m* does not grow and the head's does.
    assert values["control_late_power_exponent"] < 0 < values["head_late_power_exponent"]


def _check_latent_posterior_attention(values):
    # L * MSE at L = 4096 against the derived constant 7.37: 4 standard errors.
    assert abs(values["scaled_mse_at_4096"] - values["error_constant"]) < 4 * values["scaled_mse_stderr"]
    assert abs(values["ratio_at_half"] - 1.3643) < 0.05
    assert values["tv_two_heads"] < values["tv_one_head"] / 10
    assert values["deviation_L256"] < values["deviation_L16"]


@dataclass(frozen=True)
class Checks:
    """What the test reads from a notebook's namespace after its run, and what it checks of it.

    **Arguments:** `readout`, each checked value's name and the Python expression that computes it in the
    notebook's namespace; `check`, a function of the values (a dict of floats) that asserts.
    """

    readout: dict[str, str]
    check: Callable[[dict[str, float]], None]


CHECKS = {
    "01_task": Checks(
        {
            "oracle_risk_closed_form": 'checks["oracle (k*, v*)"][0]',
            "oracle_risk_empirical": 'checks["oracle (k*, v*)"][1]',
            "oracle_risk_stderr": 'checks["oracle (k*, v*)"][2]',
            "bayes_risk": "bayes.mean",
            "linear_risk": "linear",
        },
        _check_task,
    ),
    "02_derivation": Checks(
        {
            "risk_sympy": "risk_numeric(*m, *parameters)",
            "risk_flowsim": "slr.population_risk(problem, m)",
            "nonzero_invariance_checks": "sum(value != 0 for value in invariance.values())",
        },
        _check_derivation,
    ),
    "03_phase_portraits": Checks(
        {
            "fixed_points_on_M": "len(points)",
            "oracle_share_on_M": "report.rows[0].target_share",
            "oracle_share_on_sphere_small_lambda": "report.rows[1].target_share",
            "schedule_share": r'shares[r"$\lambda = 1/(1 + 10^{-4}\,\mathrm{step})$"]',
        },
        _check_phase_portraits,
    ),
    "04_ode_vs_sgd": Checks(
        {
            "deviation_lr_small": "by_lr.deviation[0]",
            "deviation_lr_large": "by_lr.deviation[-1]",
            "deviation_batch_small": "by_batch.deviation[0]",
            "deviation_batch_large": "by_batch.deviation[-1]",
            "final_train_risk": "train[-1]",
            "final_population_risk": "population[-1]",
            "chain_deviation_small_lr": "chain_deviation[min(chain_deviation)]",
            "chain_deviation_large_lr": "chain_deviation[max(chain_deviation)]",
            "oracle_risk": "oracle",
            "trained_risk": "trained_risk",
            "linear_risk": "linear",
            "null_risk": "null_risk",
            "heads_agreement": "agreement",
            "heads_seeds": "seeds_heads",
            "heads_sgd_end_risk": "sgd_end_risk.max()",
            "heads_specialised_risk": 'risk_at["specialised"]',
            "heads_null_risk": "null_heads",
        },
        _check_ode_vs_sgd,
    ),
    "05_attention_maps": Checks(
        {
            "softmax_risk_at_s": 'oracle["softmax"][at_s]',
            "linear_risk_at_s": 'oracle["linear"][at_s]',
            "bayes_risk": "bayes.mean",
            "bayes_risk_stderr": "bayes.stderr",
            "distance_to_M_from_M": "distance[manifold].max()",
            "largest_end_distance_to_oracle": "end_error.max()",
            "advantage_softmax_best": 'best["softmax"][1]',
            "advantage_linear_best": 'best["linear"][1]',
            "advantage_bayes_risk": "result.bayes.mean",
            "advantage_bayes_stderr": "result.bayes.stderr",
        },
        _check_attention_maps,
    ),
    "06_sparse_variable_creation": Checks(
        {
            "label_balance_z": "label_balance_z",
            "erm_median_T10": "erm_median[0]",
            "erm_median_T1000": "erm_median[-1]",
            "constructed_accuracy_R_star": 'constructed_accuracy["R*"]',
            "constructed_accuracy_quarter": 'constructed_accuracy["R*/4"]',
            "head_accuracy_m80": "head.validation_accuracy[0]",
            "head_mass_m80": "head.mass[0, -1]",
            "mlp_accuracy_m80": "mlp.validation_accuracy[0]",
            "head_accuracy_m10": "head.validation_accuracy[2]",
            "critical_T16": "small.critical",
            "erm_median_T16": "erm_16",
            "power_fit_exponent": 'fits["power"].b',
            "mlp_power_fit_exponent": 'mlp_fits["power"].b',
            "control_late_power_exponent": 'control_late["power"].b',
            "head_late_power_exponent": 'head_late["power"].b',
        },
        _check_sparse_variable_creation,
    ),
    "07_latent_posterior_attention": Checks(
        {
            "scaled_mse_at_4096": "result.scaled_mse[0, -1]",
            "scaled_mse_stderr": "result.stderr[0, -1]",
            "error_constant": "constant",
            "ratio_at_half": "ratio_at_half",
            "tv_one_head": "posterior.tv[0, -1]",
            "tv_two_heads": "posterior.tv[1, -1]",
            "deviation_L16": "deviation[16]",
            "deviation_L256": "deviation[256]",
        },
        _check_latent_posterior_attention,
    ),
}

#: The prefix of the line the appended read-out cell prints.
_READOUT_MARK = "flowsim-test-readout: "


def _readout_cell(readout: dict[str, str]):
    items = ", ".join(f"{name!r}: float({expression})" for name, expression in readout.items())
    return nbformat.v4.new_code_cell(f"import json as _json\nprint({_READOUT_MARK!r} + _json.dumps({{{items}}}))")


@dataclass
class Run:
    """One notebook's run: the executed notebook (read-out cell removed), the values read, or the error."""

    notebook: object
    values: dict[str, float]
    error: Exception | None


#: Seconds a kernel's reply may wait unnoticed by its client. nbclient waits for a cell's reply in one poll of the
#: shell channel, as long as the cell's timeout, and that poll at times misses the reply's arrival and sees it only
#: when it times out (nbclient issue 312): notebook 3 then sat idle for five minutes after its slider cell, in most
#: runs of the suite (BENCHMARKS.md, "Notebook 3's idle minutes"). Polled in slices, a missed arrival costs one slice.
SHELL_POLL_SECONDS = 1.0


#: Seconds a cell's outputs may arrive after its reply: nbclient waits 4 s by default and then drops, silently, what
#: has not arrived, which a loaded machine can exceed. Waited for longer here, and a timeout is an error.
IOPUB_SECONDS = 120


def _poll_the_shell_in_slices(client: NotebookClient) -> None:
    """Make the client's waits for a kernel's reply polls of at most SHELL_POLL_SECONDS, to the same deadline."""
    channel = client.kc.shell_channel
    poll_once = channel.get_msg

    async def get_msg(timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SHELL_POLL_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await poll_once(timeout=min(SHELL_POLL_SECONDS, left))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = get_msg


def _student_environment() -> dict[str, str]:
    """The kernel's environment: this process's (the compilation cache's variables included) without MPLBACKEND.
    ipykernel chooses its inline backend only where MPLBACKEND is unset, as it is for a student: a headless
    machine's MPLBACKEND=Agg, or the one the executable sets for itself (`flowsim.cli.command`, once left behind by a
    test in this worker: a fresh venv's suite, 2026-12-06), would draw the notebooks' figures into no output."""
    return {name: value for name, value in os.environ.items() if name != "MPLBACKEND"}


def execute(name: str) -> Run:
    """Execute notebooks/{name}.ipynb in a new temporary folder outside the repository and read its values.

    **Arguments:** `name`, the notebook's file name without `.ipynb`.

    **Returns:** a `Run`; its `error` is the `CellExecutionError` (with the failing cell) if a cell failed.
    """
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    notebook.cells.append(_readout_cell(CHECKS[name].readout))
    with tempfile.TemporaryDirectory(prefix=f"flowsim-notebook-{name}-") as folder:
        client = NotebookClient(
            notebook,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": folder}},
            iopub_timeout=IOPUB_SECONDS,
            raise_on_iopub_timeout=True,
        )
        client.on_notebook_start = lambda **_: _poll_the_shell_in_slices(client)  # its kernel client exists then
        try:
            client.execute(env=_student_environment())
        except CellExecutionError as error:
            return Run(notebook, {}, error)
    readout = notebook.cells.pop()
    line = next(text for output in readout.outputs for text in output.get("text", "").splitlines())
    assert line.startswith(_READOUT_MARK), f"{name}: unexpected read-out {line!r}"
    return Run(notebook, json.loads(line.removeprefix(_READOUT_MARK)), None)


#: Each notebook's run in seconds of CPU, user and system (BENCHMARKS.md, "The notebooks' costs": one at a time on the
#: 2-core machine, from an empty compilation cache they shared, in the order 04, 05, 07, 03, 06, 01; 02 an earlier
#: figure; 04 that table's 103.8 s times 1.29 for its section 5, 58.2 s against 45.2 s without it, measured one after
#: the other on a day the machine ran faster): the kernels start with the longest, so that the two running at a time
#: end about together and the last ones to start are short.
CPU_SECONDS = {
    "04_ode_vs_sgd": 134,
    "05_attention_maps": 125,
    "06_sparse_variable_creation": 80,
    "03_phase_portraits": 62,
    "07_latent_posterior_attention": 52,
    "01_task": 27,
    "02_derivation": 8,
}


#: The notebooks the suite executes: every one with FLOWSIM_NOTEBOOKS=1, else the two shortest (about 35 s of CPU).
EVERY_NOTEBOOK = os.environ.get("FLOWSIM_NOTEBOOKS") == "1"
EXECUTED = tuple(CHECKS) if EVERY_NOTEBOOK else ("01_task", "02_derivation")
_NOT_EXECUTED = "minutes of work: FLOWSIM_NOTEBOOKS=1 executes every notebook"


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    """The runs of the notebooks of `EXECUTED`, by name."""
    # Two kernels at a time: a notebook's kernel is mostly single-threaded compilation. While the other pytest
    # worker runs, the two kernels and it share the 2 cores; once it is done, they keep both busy.
    order = sorted(EXECUTED, key=lambda name: -CPU_SECONDS.get(name, math.inf))  # an unmeasured notebook first
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(order, pool.map(execute, order), strict=True))
    return {name: done[name] for name in EXECUTED}


@pytest.mark.parametrize("name", CHECKS)
def test_notebook_executes_and_checks_its_numbers(runs, name):
    if name not in runs:
        pytest.skip(_NOT_EXECUTED)
    run = runs[name]
    if run.error is not None:
        raise run.error
    CHECKS[name].check(run.values)


@pytest.fixture(scope="module")
def site(runs, tmp_path_factory) -> Path:
    """The documentation site built (strict) from a copy of docs/ holding the executed notebooks (the others as
    stored)."""
    failed = [name for name, run in runs.items() if run.error is not None]
    if failed:
        pytest.fail(f"the site is built with executed notebooks, and these failed: {failed}")
    folder = tmp_path_factory.mktemp("site")
    docs = folder / "docs"
    shutil.copytree(REPOSITORY / "docs", docs, ignore=shutil.ignore_patterns("notebooks"))
    (docs / "notebooks").mkdir()
    shutil.copy(NOTEBOOKS / "README.md", docs / "notebooks" / "README.md")
    for name in CHECKS:  # the executed ones with their outputs, the others as stored
        if name in runs:
            nbformat.write(runs[name].notebook, docs / "notebooks" / f"{name}.ipynb")
        else:
            shutil.copy(NOTEBOOKS / f"{name}.ipynb", docs / "notebooks")
    return build_site(folder / "site", FLOWSIM_DOCS_DIR=str(docs))


@pytest.mark.parametrize("name", CHECKS)
def test_the_site_shows_the_notebook_with_its_figures(site, name):
    page = (site / "notebooks" / name / "index.html").read_text()
    assert "Traceback" not in page, f"{name}: shown with an error"
    if name in EXECUTED:
        assert "jp-OutputArea-child" in page, f"{name}: shown without its outputs"
    if name in EXECUTED and name != "02_derivation":  # the derivation shows formulas, not figures
        assert 'src="data:image/png;base64,' in page, f"{name}: no figure in the site's page"
    # The worked answers are folded, as they are collapsed in Jupyter (docs/hooks.py).
    assert '<details class="worked-answer">' in page, f"{name}: its answers are not folded"
    # The sliders (notebooks 1 and 3) are shown as the figure they drew, without the widgets' scripts (docs/hooks.py).
    assert "widget-state+json" not in page and "@jupyter-widgets" not in page, f"{name}: widgets' scripts left"
    if name in ("01_task", "03_phase_portraits") and name in EXECUTED:
        widget = page[page.index('class="static-widget"') :]
        assert 'src="data:image/png;base64,' in widget[: widget.index('<div class="jp-Cell ')], f"{name}: no figure"
    # The previous / next links point to the other notebooks' pages, not to their .ipynb files.
    order = list(CHECKS)
    neighbours = order[max(order.index(name) - 1, 0) : order.index(name) + 2]
    for other in set(neighbours) - {name}:
        assert f'href="../{other}/"' in page and f'href="{other}.ipynb"' not in page, f"{name}: link to {other}"


#: The notebooks' titles in the navigation and the browser's tabs (mkdocs.yml), plain text unlike some headings.
TITLES = {
    "01_task": "1. The task",
    "02_derivation": "2. The derivation",
    "03_phase_portraits": "3. Phase portraits",
    "04_ode_vs_sgd": "4. ODE against SGD",
    "05_attention_maps": "5. Attention maps",
    "06_sparse_variable_creation": "6. Sparse variable creation",
    "07_latent_posterior_attention": "7. Latent-posterior attention",
}


@needs_chromium
def test_the_notebooks_pages_render_offline_with_every_formula_typeset(site):
    with serve(site) as origin, Browser(CHROMIUM, origin) as browser:
        reports = {name: browser.load(f"{origin}/notebooks/{name}/") for name in CHECKS}
    problems = {name: found for name, report in reports.items() if (found := check_in_browser(report, math=True))}
    assert not problems, f"notebook pages as a reader sees them offline: {problems}"
    assert {name: report.title for name, report in reports.items()} == {
        name: f"{title} - flowsim" for name, title in TITLES.items()
    }
    # SymPy's outputs in the derivation (the lemmas, the risk, the flow) are typeset, every one.
    derivation = reports["02_derivation"]
    assert derivation.latex_outputs >= 20 and derivation.latex_outputs_typeset == derivation.latex_outputs


def test_notebooks_are_stored_without_outputs():
    assert sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb")) == sorted(CHECKS), "every notebook is tested"
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has stored outputs"


def _imported(node: ast.Import | ast.ImportFrom) -> dict[str, object]:
    """The flowsim modules and objects an import statement binds: {name bound: object}; empty for other packages.
    A module or name that does not exist raises (ModuleNotFoundError, AttributeError)."""
    bound = {}
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] == "flowsim":
                module = importlib.import_module(alias.name)  # `import flowsim.x` binds flowsim, `as y` binds x
                bound[alias.asname or "flowsim"] = module if alias.asname else importlib.import_module("flowsim")
        return bound
    if not (node.module or "").startswith("flowsim"):
        return bound
    module = importlib.import_module(node.module)
    for alias in node.names:
        if hasattr(module, alias.name):
            bound[alias.asname or alias.name] = getattr(module, alias.name)
        else:  # a submodule its package does not import
            bound[alias.asname or alias.name] = importlib.import_module(f"{node.module}.{alias.name}")
    return bound


def _resolved(node: ast.expr, names: dict[str, object]):
    """The flowsim object an expression `a.b.c` names, `a` bound by an import; None for anything else. A missing
    attribute raises AttributeError (naming it)."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and (owner := _resolved(node.value, names)) is not None:
        if not hasattr(owner, node.attr):
            raise AttributeError(f"{ast.unparse(node)}: {getattr(owner, '__name__', owner)!s} has no {node.attr!r}")
        return getattr(owner, node.attr)
    return None


def _calls_fit(call: ast.Call, function) -> str | None:
    """Why the call's arguments do not fit `function`'s signature (its keywords, the number of its positional
    arguments), or None if they fit or the call cannot be checked (unpacked arguments, no signature)."""
    if any(isinstance(argument, ast.Starred) for argument in call.args) or any(k.arg is None for k in call.keywords):
        return None
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind_partial(*call.args, **{keyword.arg: None for keyword in call.keywords})
    except TypeError as error:
        return f"{ast.unparse(call.func)}: {error}"
    return None


def _misuses(cells: list[str], where: str) -> tuple[list[str], int]:
    """What code cells, run in order, would get wrong of flowsim, read without running them: a module or name
    imported that does not exist, an attribute read of one that it lacks, a call whose keywords or number of
    positional arguments its function or class does not take. A cell that does not compile raises SyntaxError.

    **Returns:** (the problems found, the number of calls of flowsim's functions and classes checked)."""
    names: dict[str, object] = {}
    problems = []
    calls = 0
    for index, source in enumerate(cells):
        tree = ast.parse(source, filename=f"{where} cell {index}")
        for node in ast.walk(tree):  # breadth first: a cell's imports before what its statements hold
            try:
                if isinstance(node, ast.Import | ast.ImportFrom):
                    names |= _imported(node)
                elif isinstance(node, ast.Attribute):
                    _resolved(node, names)
                elif isinstance(node, ast.Call) and callable(function := _resolved(node.func, names)):
                    calls += 1
                    if (problem := _calls_fit(node, function)) is not None:
                        problems.append(f"cell {index}: {problem}")
            except (ImportError, AttributeError) as error:
                problems.append(f"cell {index}: {error}")
    return list(dict.fromkeys(problems)), calls  # a missing name read and called is one problem


@pytest.mark.parametrize("name", CHECKS)
def test_the_notebook_uses_flowsim_as_it_is(name):
    """Without executing it, every notebook against the installed flowsim (`_misuses`): nothing wrong, and at least
    ten of its calls checked (12 to 46 today: the check sees what the notebook uses)."""
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    problems, calls = _misuses([cell.source for cell in notebook.cells if cell.cell_type == "code"], name)
    assert problems == [] and calls >= 10, (problems, calls)


def test_a_misused_flowsim_is_found_without_running_it():
    """The positive control of the check above: each kind of misuse, one problem each."""
    cells = [
        "import jax\nfrom flowsim import slr\nfrom flowsim.tasks import latent as lt",
        "p = slr.Problem(40, 10, 0.1, colour=1)\nslr.no_such_function(p)",
        "def f():\n    return lt.Readout(1, 2, 3, 4, 5, 6, 7)\nfrom flowsim import nowhere\njax.numpy.zeros(3)",
    ]
    found, calls = _misuses(cells, "control")
    problems = "\n".join(found)
    assert calls == 2, calls  # slr.Problem and lt.Readout: a missing name is not a call checked
    assert problems.count("\n") == 3, problems
    for expected in ("colour", "no_such_function", "too many positional", "flowsim.nowhere"):
        assert expected in problems, expected
    with pytest.raises(SyntaxError, match="control cell 0"):
        _misuses(["x = ("], "control")


@pytest.mark.parametrize("name", CHECKS)
def test_the_notebook_installs_flowsim_and_hides_its_answers(name):
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    # The first code cell installs flowsim in a kernel without it (a fresh Colab-style kernel), and only then.
    assert 'find_spec("flowsim") is None' in code[0].source and "pip" in code[0].source
    assert any("Exercise" in cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    answers = [cell for cell in notebook.cells if cell.source.startswith("*Answer.*")]
    assert answers, f"{name}: no worked answer"
    for answer in answers:  # collapsed in Jupyter until the student opens them
        assert answer.metadata.get("jupyter", {}).get("source_hidden"), f"{name}: an answer is not hidden"
    # The take-aways are for students: no summary printed for the tests (they read the notebook's namespace).
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert "What to take away" in markdown and "## Summary" not in markdown
