"""README's figures come from BENCHMARKS.md's latest measurements, not from memory (pure text, no JAX).

README's performance table is rendered from BENCHMARKS.md's "Latest figures" section by
benchmarks/readme_figures.py (`--write` rewrites it), and every time, throughput or ratio README's prose
quotes must be one of those figures.
"""

import importlib.util
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_figures", REPOSITORY / "benchmarks" / "readme_figures.py")
readme_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_figures)


@pytest.fixture(scope="module")
def readme():
    return (REPOSITORY / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def benchmarks():
    return (REPOSITORY / "BENCHMARKS.md").read_text(encoding="utf-8")


def test_performance_table_is_rendered_from_latest_figures(readme, benchmarks):
    machine, rows = readme_figures.latest_figures(benchmarks)
    assert readme_figures.readme_table(readme) == readme_figures.render(machine, rows), (
        "README's performance table differs from BENCHMARKS.md's latest figures: "
        "run `python benchmarks/readme_figures.py --write`"
    )


def test_machine_named_once(readme, benchmarks):
    machine, _ = readme_figures.latest_figures(benchmarks)
    performance = readme[readme.index("## Performance") :]
    assert performance.count(machine) == 1
    assert "EPYC" not in performance and "Xeon" not in performance


def test_every_row_says_where_and_when(benchmarks):
    _, rows = readme_figures.latest_figures(benchmarks)
    assert len(rows) >= 10
    for row in rows:
        assert any(character.isdigit() for character in row["value"]), f"no measured figure in {row}"
        assert row["from"] and row["machine"] and row["date"], f"a row without its source, machine or date: {row}"
        has_baseline = row["baseline"] not in ("", "–")
        assert has_baseline == (row["ratio"] not in ("", "–")), f"a ratio needs its baseline and back: {row}"


def test_prose_quotes_only_latest_figures(readme, benchmarks):
    assert readme_figures.unmeasured(readme, benchmarks) == [], (
        "README quotes times or ratios that BENCHMARKS.md's latest figures do not hold: "
        "quote a figure from that table, or add the measurement there (with where and when it was measured)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("about a minute: 56 s measured", [(56.0, "s")]),
        ("8 min 42 s and 10 min 18 s", [(522.0, "s"), (618.0, "s")]),
        ("9 to 10 minutes, then 6 to 7", [(9.0, "min"), (10.0, "min")]),
        ("in about 15 seconds", [(15.0, "s")]),
        ("38.5 trajectories/s against 0.94/s: 41×, 3 × 10^5, 2.5 µs, 204–261x", None),
        ("a 2 × 2 Wishart matrix, 30 seeds x 200 000 steps, rtol 1e-8 s, x86_64, d = 10^6", []),
    ],
)
def test_figures_found_in_prose(text, expected):
    found = [(value, unit) for value, unit, _ in readme_figures.figures(text)]
    if expected is None:
        expected = [(38.5, "/s"), (0.94, "/s"), (41.0, "×"), (3e5, "×"), (2.5, "µs"), (204.0, "×"), (261.0, "×")]
    assert found == expected
