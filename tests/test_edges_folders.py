"""A run folder is the user's data: what its run.json says is checked before flowsim deletes or resumes anything.

`--replace` deletes only regular files inside the folder that a flowsim record lists and whose SHA-256 is still the
one recorded when flowsim wrote them; a damaged record is refused in one line; a resumed run keeps every file
flowsim wrote listed, so that the folder can be replaced after any interruption; a unit changed since it was written
is computed again. Nothing here compiles: the records are made by `RunRecord` itself, the CLI cases are refused
before any computation.
"""

import json
import shutil

import pytest

from flowsim import results
from flowsim._checks import InvalidInput
from flowsim.cli import main


def finished_run(folder, *, units=(), files=("a.csv",), status="ok"):
    """A run as flowsim leaves it: `files` written (text), `units` stored (their name's length as the result)."""
    record = results.RunRecord(folder, "flowsim flow", {"n": 4}, seed=0, log=None)
    for name in units:
        record.unit(name, lambda name=name: float(len(name)))
    for name in files:
        record.write_text(name, f"x\n{name}\n")
    record.finish(status)
    return record


def edit_record(folder, **fields):
    record = json.loads((folder / "run.json").read_text())
    record.update(fields)
    (folder / "run.json").write_text(json.dumps(record))


def refusal(capsys, arguments) -> str:
    """The one line a refused command prints (exit status 2, no traceback)."""
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_replace_never_deletes_outside_the_folder(tmp_path, capsys):
    """A record naming "../victim.txt" and an absolute path: refused, nothing deleted anywhere."""
    run, victim, absolute = tmp_path / "run1", tmp_path / "victim.txt", tmp_path / "elsewhere" / "thesis.tex"
    finished_run(run)
    absolute.parent.mkdir()
    for path in (victim, absolute):
        path.write_text("precious")
    for name in ("../victim.txt", str(absolute), "sub/../../victim.txt"):
        edit_record(run, files=["a.csv", name])
        err = refusal(capsys, ["flow", "--n", "4", "--out", str(run), "--replace"])
        assert "is damaged (it lists" in err and "which is not a file name inside the folder" in err
    assert victim.read_text() == absolute.read_text() == "precious"
    assert sorted(path.name for path in run.iterdir()) == ["a.csv", "run.json"]


def test_replace_never_follows_a_link_out_of_the_folder(tmp_path):
    """A listed file made a symbolic link, or reached through a linked folder: refused, the target kept."""
    run, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / "a.csv").write_text("precious")
    finished_run(run, files=("a.csv", "sub/b.csv"))
    (run / "a.csv").unlink()
    (run / "a.csv").symlink_to(outside / "a.csv")
    with pytest.raises(InvalidInput, match=r"cannot tell that a.csv are still what it wrote \(they were changed"):
        results.prepare_folder(run, replace=True)
    shutil.rmtree(run / "sub")
    (run / "sub").symlink_to(outside)
    with pytest.raises(InvalidInput, match=r"it lists 'sub/b.csv', which is not a file name inside the folder"):
        results.prepare_folder(run, replace=True)
    assert (outside / "a.csv").read_text() == "precious"


def test_replace_deletes_only_what_flowsim_wrote_unchanged(tmp_path):
    """A listed file edited since it was written is not deleted (nor anything else), nor a folder the run did not
    make; once they are moved away, the run is replaced: its files, a temporary file a killed write left and the
    folders they emptied go."""
    run = tmp_path / "run"
    finished_run(run, units=("u",), files=("a.csv", "figures/b.csv"))
    (run / "a.csv").write_text("edited by hand")
    with pytest.raises(InvalidInput, match=r"cannot tell that a.csv are still .* \(they were changed since flowsim"):
        results.prepare_folder(run, replace=True)
    assert (run / "a.csv").read_text() == "edited by hand" and (run / "units" / "u.npz").exists()
    (run / "a.csv").rename(tmp_path / "a.csv")
    (run / "figures" / ".b.csv.k3j_x9q2.part").write_text("half")  # what `kill -9` during a write leaves
    (run / "figures" / "mine").mkdir()
    with pytest.raises(InvalidInput, match=r"also holds what flowsim did not write \(figures/mine\)"):
        results.prepare_folder(run, replace=True)
    (run / "figures" / "mine").rmdir()
    results.prepare_folder(run, replace=True)
    assert list(run.iterdir()) == []


def test_replace_refuses_what_a_record_of_an_earlier_flowsim_cannot_vouch_for(tmp_path):
    """A record without digests (a flowsim before them): its files cannot be told from edited ones, so `replace`
    refuses them, saying why."""
    run = tmp_path / "run"
    finished_run(run)
    record = json.loads((run / "run.json").read_text())
    del record["digests"]
    (run / "run.json").write_text(json.dumps(record))
    with pytest.raises(InvalidInput, match=r"records no digest of them \(written by an earlier flowsim\)"):
        results.prepare_folder(run, replace=True)
    assert (run / "a.csv").exists()


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("files", 5, "its field 'files' must be a list of file names, got 5"),
        ("units", None, "its field 'units' must be a list of unit names, got null"),
        ("parameters", None, "its field 'parameters' must be an object of the run's parameters, got null"),
        ("units", ["../../x"], "its field 'units' must be a list of unit names"),
        ("digests", [], "its field 'digests' must be an object of SHA-256 texts by file name, got []"),
    ],
)
@pytest.mark.parametrize("how", ["flow --replace", "verify --resume"])
def test_a_damaged_record_is_refused_in_one_line(tmp_path, capsys, field, value, says, how):
    run = tmp_path / "run"
    finished_run(run, status="interrupted")
    edit_record(run, **{field: value})
    command, option = how.split()
    err = refusal(capsys, [command, "--n", "4", "--out", str(run), option])
    assert err.startswith(f"flowsim {command}: error: the run record {run / 'run.json'} is damaged ({says}")
    assert err.rstrip().endswith("move the folder away, or give another --out")
    assert sorted(path.name for path in run.iterdir()) == ["a.csv", "run.json"]


def test_resume_and_replace_together_are_refused(tmp_path, capsys):
    run = tmp_path / "run"
    finished_run(run, status="interrupted")
    err = refusal(capsys, ["verify", "--n", "4", "--out", str(run), "--resume", "--replace"])
    assert "--resume and --replace (resume=True, replace=True) contradict each other" in err
    assert sorted(path.name for path in run.iterdir()) == ["a.csv", "run.json"]


def test_a_resumed_run_lists_every_file_flowsim_wrote_so_the_folder_can_be_replaced(tmp_path):
    """The interrupted run's table stays listed through a resume stopped at once (and one that ends), so that
    `--replace` afterwards deletes the whole folder instead of refusing what "flowsim did not write"."""
    run = tmp_path / "run"
    finished_run(run, units=("u",), files=("interrupted_trajectories.csv",), status="interrupted")
    resumed = results.RunRecord(run, "flowsim flow", {"n": 4}, seed=0, log=None, resume=True)
    resumed.finish("interrupted")  # Ctrl-C before its first unit
    record = json.loads((run / "run.json").read_text())
    assert sorted(record["files"]) == ["interrupted_trajectories.csv", "units/u.npz"] == sorted(record["digests"])
    resumed = results.RunRecord(run, "flowsim flow", {"n": 4}, seed=0, log=None, resume=True)
    assert resumed.unit("u", lambda: pytest.fail("a finished unit is read back")) == 1.0
    resumed.write_text("trajectories.csv", "t\n1\n")
    resumed.finish()
    results.prepare_folder(run, replace=True)
    assert list(run.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncated", "swapped"])
def test_a_damaged_or_foreign_unit_is_computed_again(tmp_path, capsys, damage):
    """A unit file cut short, or swapped for another unit's: its digest no longer matches run.json's, so the resumed
    run computes it again (with a one-line note from the command line) instead of failing or using wrong numbers."""
    run = tmp_path / "run"
    finished_run(run, units=("first", "second-unit"), files=(), status="interrupted")
    path = run / "units" / "first.npz"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        shutil.copyfile(run / "units" / "second-unit.npz", path)
    resumed = results.RunRecord(run, "flowsim flow", {"n": 4}, seed=0, log=None, resume=True)
    assert resumed.damaged == ["units/first.npz"] and resumed.units == ["second-unit"] and resumed.resumed == 1
    assert resumed.unit("first", lambda: 5.0) == 5.0  # computed again, not read back
    assert resumed.unit("second-unit", lambda: pytest.fail("a sound unit is read back")) == 11.0
    resumed.finish()
    record = json.loads((run / "run.json").read_text())
    assert record["digests"]["units/first.npz"] == results.digest(path) and record["units"] == ["second-unit", "first"]
