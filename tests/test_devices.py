"""flowsim.devices: the engine's batches split over several devices, and over several processes.

XLA_FLAGS (the number of CPU devices) is read when JAX starts, so the two-device checks run in a
subprocess (one, to pay JAX's start-up and the compilations once), and the two-process check in two
(`jax.distributed` on localhost, CPU collectives by gloo). The size: d = 40, 5 starts (an odd batch:
on 2 devices it is padded to 6), short horizons.

What "the same numbers" means. Each device computes its rows as a one-device run of its rows
computes them: rows 0-2 on one device, rows 3, 4 and a copy of row 0 on the other. So the sharded
results equal, bit for bit, one-device runs of those two batches. They equal a one-device run of
the whole batch to 1e-14, not bitwise: XLA's CPU code computes a row in a vector lane or in the
scalar remainder of its loop by its place in the batch, which changes the last bit of some
elementary functions (a row's numbers on one device already depend on where it sits in the batch).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import devices
from tests.shared import command_in_this_process

REPOSITORY = Path(__file__).resolve().parent.parent

#: The checks with two CPU devices in one process; prints one JSON line of results.
TWO_DEVICES = """
import json
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec
import flowsim
from flowsim import devices, sgd
from flowsim.integrate import Rodas5, traced
from flowsim.tasks import slr

out = {"device_count": jax.device_count()}
problem = slr.Problem(d=40, L=10, lam=0.1)
y0 = np.asarray(slr.initial_overlaps(jax.random.key(0), 40, 5, "sphere"))
placed = devices.shard_batch(y0)
sharding = placed.value.sharding
out["placed"] = {
    "sharded": placed.sharded,
    "rows": placed.rows,
    "named": isinstance(sharding, NamedSharding) and sharding.spec == PartitionSpec("batch"),
    "devices": len(sharding.device_set),
    "shards": sorted(np.asarray(shard.data).tolist() for shard in placed.value.addressable_shards),
}
#: The rows each device computes (row 0 pads the second).
parts = (np.arange(3), np.array([3, 4, 0]))
out["expected_shards"] = sorted(y0[rows].tolist() for rows in parts)


def fields(result, names):
    return {name: np.asarray(getattr(result, name)) for name in names}


def joined(parts, rows):
    # The rows of the whole batch from the one-device runs of each device's rows (the padding dropped).
    return {f: np.concatenate([part[f][:n] for part, n in zip(parts, rows)]) for f in parts[0]}


def compare(sharded, whole, per_device, close):
    # bitwise_per_device: equal to the one-device runs of each device's rows; same_as_whole: equal to the
    # one-device run of the whole batch; largest_difference: from it, for the fields in `close`.
    return {
        "bitwise_per_device": {f: bool(np.array_equal(sharded[f], per_device[f], equal_nan=True)) for f in per_device},
        "same_as_whole": {f: bool(np.array_equal(sharded[f], whole[f], equal_nan=True)) for f in sharded},
        "largest_difference": {f: float(np.nanmax(np.abs(sharded[f] - whole[f]))) for f in close},
    }


ts = np.linspace(0.0, 2.0, 5)
FLOW = ("ys", "y_final", "t_final", "status", "num_steps")
sharded = fields(slr.solve_flow(problem, y0, ts), FLOW + ("observed",))
with devices.unsharded():
    whole = fields(slr.solve_flow(problem, y0, ts), FLOW + ("observed",))
    parts_flow = [fields(slr.solve_flow(problem, y0[rows], ts), FLOW) for rows in parts]
out["flow"] = compare(sharded, whole, joined(parts_flow, (3, 2)), ("ys", "y_final", "t_final", "observed"))

# The linearly implicit solver of stiff flows (the engine's choice), under the same sharding.
stiff = dict(solver=Rodas5())
sharded = fields(slr.solve_flow(problem, y0, ts, **stiff), FLOW)
with devices.unsharded():
    whole = fields(slr.solve_flow(problem, y0, ts, **stiff), FLOW)
out["stiff_flow"] = {f: float(np.nanmax(np.abs(sharded[f] - whole[f]))) for f in FLOW}

# Diffrax's implicit solvers (Newton iterations through lineax), which failed under shard_map when traced
# inside it ("pytree does not match out_structure"); a small field, the failure was the solver's.
import diffrax
from flowsim.integrate import integrate


def decay(t, y, rate):
    return -rate * y**3


implicit = dict(solver=diffrax.Kvaerno3(), rtol=1e-8, atol=1e-10, interruptible=False)
sharded = fields(integrate(decay, y0, ts, 2.0, **implicit), FLOW)
with devices.unsharded():
    whole = fields(integrate(decay, y0, ts, 2.0, **implicit), FLOW)
out["implicit_flow"] = {f: float(np.nanmax(np.abs(sharded[f] - whole[f]))) for f in FLOW}

MAP = ("ys", "status", "first_bad")
sharded = fields(slr.iterate_map(problem, y0, 0.1, 20, log_every=5), MAP + ("risk",))
with devices.unsharded():
    whole = fields(slr.iterate_map(problem, y0, 0.1, 20, log_every=5), MAP + ("risk",))
    parts_map = [fields(slr.iterate_map(problem, y0[rows], 0.1, 20, log_every=5), MAP) for rows in parts]
out["map"] = compare(sharded, whole, joined(parts_map, (3, 2)), ("ys", "risk"))

# SGD on the overlaps: 3 seeds from given starts, their keys and starts split (2 rows a device, one padding).
key, starts = jax.random.key(0), y0[:3]
options = dict(init=starts, lr=0.05, steps=40, log_every=10, seeds=3, engine="overlaps")
SGD = ("ys", "first_bad", "stopped_at")
sharded = fields(slr.run_sgd(problem, key, **options), SGD + ("risk",))
with devices.unsharded():
    whole = fields(slr.run_sgd(problem, key, **options), SGD + ("risk",))
    # Each device's seeds through the chain's programs as run_sgd runs them: config (init, batch); 4 logs of 10 steps.
    keys, shared = jax.random.split(key, 3), (traced(problem), jax.numpy.asarray(0.05))
    parts_sgd = []
    for rows in (np.array([0, 1]), np.array([2, 0])):
        logged = sgd.run_logged(sgd._CHAIN, shared, (keys[rows], starts[rows]), (None, 1), logs=4, log_every=10)
        parts_sgd.append({name: np.asarray(value) for name, value in zip(SGD, logged)})
out["sgd"] = compare(sharded, whole, joined(parts_sgd, (2, 1)), ("ys", "risk"))
print(json.dumps(out))
"""


#: One of two processes joined by jax.distributed (FLOWSIM_* variables): map and SGD (named starts: only the
#: seeds' keys are split) sharded over the two processes' devices, and in process 0 also unsharded (each process
#: holds every gathered row: process 1's equal to process 0's bit for bit, they need no runs of their own to compare
#: with); prints one JSON line.
TWO_PROCESSES = """
import json
import numpy as np
import flowsim
from flowsim import devices

assert devices.initialize_cluster()  # FLOWSIM_COORDINATOR_ADDRESS, FLOWSIM_NUM_PROCESSES, FLOWSIM_PROCESS_ID
import jax
from flowsim.tasks import slr

problem = slr.Problem(d=40, L=10, lam=0.1)
y0 = np.asarray(slr.initial_overlaps(jax.random.key(0), 40, 5, "sphere"))
placed = devices.shard_batch(y0)
out = {
    "process": jax.process_index(),
    "processes": jax.process_count(),
    "devices": jax.device_count(),
    "local_devices": jax.local_device_count(),
    "global_input": not placed.value.is_fully_addressable,
}
mapped = slr.iterate_map(problem, y0, 0.1, 20, log_every=5)
run = slr.run_sgd(problem, jax.random.key(0), lr=0.05, steps=40, log_every=10, seeds=3, engine="overlaps")
for name, sharded in (("map", mapped), ("sgd", run)):
    out[name] = {"ys": np.asarray(sharded.ys).tolist(), "status": np.asarray(sharded.status).tolist()}
if jax.process_index() == 0:
    with devices.unsharded():
        mapped_alone = slr.iterate_map(problem, y0, 0.1, 20, log_every=5)
        run_alone = slr.run_sgd(problem, jax.random.key(0), lr=0.05, steps=40, log_every=10, seeds=3, engine="overlaps")
    for name, sharded, alone in (("map", mapped, mapped_alone), ("sgd", run, run_alone)):
        ys = np.asarray(sharded.ys)
        out[name] |= {
            "shape": list(ys.shape) == list(np.shape(alone.ys)),
            "largest_difference": float(np.nanmax(np.abs(ys - np.asarray(alone.ys)))),
            "risk_difference": float(np.nanmax(np.abs(np.asarray(sharded.risk) - np.asarray(alone.risk)))),
            "same_status": bool(np.array_equal(sharded.status, alone.status)),
        }
print(json.dumps(out))
"""

#: Differences allowed from a one-device run of the whole batch (see the module's docstring).
TOLERANCE = 1e-14


def _environment(**variables) -> dict:
    """This environment without device or cluster settings (SLURM's included), plus `variables`."""
    cleared = ("XLA_FLAGS", "JAX_PLATFORMS", "FLOWSIM_DISTRIBUTED", "JAX_COORDINATOR_ADDRESS")
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in cleared and not name.startswith(("SLURM_", "FLOWSIM_COORDINATOR", "FLOWSIM_NUM", "FLOWSIM_PROC"))
    }
    return {**environment, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1", **variables}


def _python(code: str, **variables) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(**variables),
        cwd=REPOSITORY,
    )


def _result(process: subprocess.Popen, timeout: float = 240) -> dict:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def test_one_device_placement_is_a_no_op():
    """On one device (the test process) nothing is padded, copied or moved: the engine passes its own arrays."""
    if jax.device_count() != 1:
        pytest.skip("this process sees several devices")
    states = jnp.arange(10.0).reshape(5, 2)
    batch = (jax.random.split(jax.random.key(0), 5), states, None)
    placed = devices.shard_batch(batch)
    assert not devices.sharding_enabled()
    assert placed.value is batch and (placed.size, placed.rows, placed.sharded) == (5, 5, False)
    outputs = [states + 1, np.ones(5)]
    assert placed.gather(outputs) is outputs
    with pytest.raises(ValueError, match="same number of rows"):
        devices.shard_batch((states, states[:3]))


def test_no_cluster_without_a_launcher(monkeypatch):
    """initialize_cluster does nothing alone, and says what is missing from half a set of coordinates."""
    for name in (
        "FLOWSIM_COORDINATOR_ADDRESS",
        "JAX_COORDINATOR_ADDRESS",
        "SLURM_STEP_NUM_TASKS",
        "FLOWSIM_DISTRIBUTED",
    ):
        monkeypatch.delenv(name, raising=False)
    assert devices.initialize_cluster() is False
    monkeypatch.setenv("FLOWSIM_COORDINATOR_ADDRESS", "127.0.0.1:1234")
    with pytest.raises(ValueError, match="FLOWSIM_NUM_PROCESSES and FLOWSIM_PROCESS_ID"):
        devices.initialize_cluster()
    monkeypatch.setenv("FLOWSIM_DISTRIBUTED", "0")
    assert devices.initialize_cluster() is False


def test_two_devices_give_the_one_device_numbers():
    """solve_flow (Tsit5, Rodas5), integrate (Diffrax's implicit Kvaerno3), iterate_map and run_sgd with the
    batch split over 2 CPU devices: bitwise the one-device runs of each device's rows; within 1e-14 of (status,
    steps: equal to) the one-device run of the batch."""
    result = _result(_python(TWO_DEVICES, XLA_FLAGS="--xla_force_host_platform_device_count=2"))
    assert result["device_count"] == 2
    placed = result["placed"]
    assert placed["sharded"] and placed["rows"] == 6 and placed["named"] and placed["devices"] == 2
    assert placed["shards"] == result["expected_shards"]  # rows 0-2 on one device, 3, 4 and a copy of 0 on the other
    for name, exact in (("flow", ("status", "num_steps")), ("map", ("status", "first_bad")), ("sgd", ("first_bad",))):
        checks = result[name]
        assert all(checks["bitwise_per_device"].values()), (name, checks)
        assert all(checks["same_as_whole"][field] for field in exact), (name, checks)
        assert max(checks["largest_difference"].values()) <= TOLERANCE, (name, checks)
    assert max(result["stiff_flow"].values()) <= TOLERANCE, result["stiff_flow"]  # Rodas5, status and steps too
    assert max(result["implicit_flow"].values()) <= TOLERANCE, result["implicit_flow"]  # Kvaerno3 (lineax inside)


def test_two_processes_give_the_one_process_numbers():
    """Two processes on localhost joined by jax.distributed (one CPU device each): iterate_map and run_sgd
    split over both, every row gathered back to each; the two processes' results the same bits, and within 1e-14
    of an unsharded run (process 0's: the same computation in both, compiled once)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    cluster = {"FLOWSIM_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "FLOWSIM_NUM_PROCESSES": "2"}
    processes = [_python(TWO_PROCESSES, **cluster, FLOWSIM_PROCESS_ID=str(i)) for i in range(2)]
    try:
        results = [_result(process) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for index, result in enumerate(results):
        assert (result["process"], result["processes"], result["devices"], result["local_devices"]) == (index, 2, 2, 1)
        assert result["global_input"]
    for name in ("map", "sgd"):
        checks = results[0][name]
        assert checks["shape"] and checks["same_status"], (name, checks)
        assert max(checks["largest_difference"], checks["risk_difference"]) <= TOLERANCE, (name, checks)
        assert results[1][name] == {"ys": checks["ys"], "status": checks["status"]}, name


@pytest.mark.parametrize(("value", "message"), [("abc", "an integer, got 'abc'"), ("0", "an integer >= 1, got 0")])
def test_a_bad_host_device_count_is_invalid_input(monkeypatch, capsys, value, message):
    """The flowsim executable refuses a bad FLOWSIM_HOST_DEVICES in one line, exit status 2, before any work."""
    monkeypatch.setenv("FLOWSIM_HOST_DEVICES", value)
    assert command_in_this_process(monkeypatch) == 2
    assert capsys.readouterr().err == f"flowsim: error: FLOWSIM_HOST_DEVICES must be {message}\n"
