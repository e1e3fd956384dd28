"""The engine's batches over every device JAX sees: several GPUs, several CPU devices, several hosts.

The engine's batched computations (`integrate`'s solve, `iterate_map`, `run_sgd`'s chain) compute
each row of their batch on its own. With more than one device, `shard_batch` splits the rows over
a 1-D mesh of all of them (`batch_mesh`, `NamedSharding(mesh, P("batch"))`), padded to a multiple
of the device count with copies of row 0; each device then computes its rows (`over_batch`, a
`jax.shard_map`, for the loops whose length depends on their rows; XLA's partitioning from the
input's sharding for the others), and `ShardedBatch.gather` drops the padding and brings the
whole result back to every process, as arrays on its default device. Every row is computed as on
one device, so the results are the same numbers. With one device both are no-ops: nothing is
copied or padded, and the same program is compiled as without them.

Several processes (hosts) join one mesh through `jax.distributed`: `initialize_cluster` (called
by the command line) starts it under SLURM's `srun` or from explicit coordinates. Every process
then runs the same program on the same inputs (the same seed), computes its devices' rows, and
receives every row. docs/devices.md has the commands.
"""

import contextlib
import contextvars
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from flowsim._checks import InvalidInput

__all__ = [
    "BATCH_AXIS",
    "ShardedBatch",
    "batch_mesh",
    "check_xla_flags",
    "initialize_cluster",
    "over_batch",
    "shard_batch",
    "sharding_enabled",
    "unsharded",
    "use_host_cores",
]

#: The name of the mesh axis the batch is split over.
BATCH_AXIS = "batch"

#: Whether `shard_batch` splits batches here (`unsharded` turns it off within a block).
_ENABLED = contextvars.ContextVar("flowsim_sharding", default=True)


def initialize_cluster(
    coordinator_address: str | None = None, num_processes: int | None = None, process_id: int | None = None
) -> bool:
    """Join the processes of a cluster into one set of devices (`jax.distributed.initialize`), when there is one.

    Called before any JAX computation (the command line calls it first). A cluster is:

    - the arguments, when `coordinator_address` is given (with `num_processes` and `process_id`);
    - else the environment variables `FLOWSIM_COORDINATOR_ADDRESS` (or JAX's own
      `JAX_COORDINATOR_ADDRESS`), `FLOWSIM_NUM_PROCESSES` and `FLOWSIM_PROCESS_ID`;
    - else a SLURM job step of more than one task (`srun`: SLURM_STEP_NUM_TASKS > 1), whose
      coordinator, process count and id JAX reads from SLURM's variables.

    Otherwise (one process), or with `FLOWSIM_DISTRIBUTED=0`, nothing is done. A second call does nothing.

    **Arguments:**

    - `coordinator_address`: "host:port" of process 0, reachable from every process.
    - `num_processes`: the number of processes; `process_id`: this one's, in 0 .. num_processes - 1.

    **Returns:** whether this process is part of a cluster of several processes.
    """
    if jax.distributed.is_initialized():
        return True
    if os.environ.get("FLOWSIM_DISTRIBUTED", "1") == "0":
        return False
    environ = os.environ
    address = (
        coordinator_address or environ.get("FLOWSIM_COORDINATOR_ADDRESS") or environ.get("JAX_COORDINATOR_ADDRESS")
    )
    if address is not None:
        count = num_processes if num_processes is not None else _integer("FLOWSIM_NUM_PROCESSES")
        index = process_id if process_id is not None else _integer("FLOWSIM_PROCESS_ID")
        if count is None or index is None:
            raise InvalidInput(
                f"a coordinator address ({address}) needs the number of processes and this process's id: "
                "FLOWSIM_NUM_PROCESSES and FLOWSIM_PROCESS_ID (or the arguments num_processes, process_id)"
            )
        jax.distributed.initialize(address, num_processes=count, process_id=index)
        return True
    if (_integer("SLURM_STEP_NUM_TASKS") or 1) > 1:
        jax.distributed.initialize(cluster_detection_method="slurm")
        return True
    return False


#: How many JAX devices `use_host_cores` splits the host CPU into, if set (1: leave it one device).
HOST_DEVICES_VARIABLE = "FLOWSIM_HOST_DEVICES"
#: The most CPU devices `use_host_cores` makes (100000 devices took XLA hours to start).
MAX_HOST_DEVICES = 1024


def use_host_cores(count: int | None = None) -> int:
    """Split the host CPU into `count` JAX devices, so that the engine's batches use every core.

    XLA runs a computation's loop on one core of a CPU device; as several devices
    (`--xla_force_host_platform_device_count`), each core runs its share of the batch (`shard_batch`).
    Only possible before JAX starts its backends: afterwards, and where XLA_FLAGS already sets a
    device count, nothing is changed. The command line calls it first. GPU runs are unaffected (the
    flag only concerns the CPU platform).

    **Arguments:**

    - `count`: the number of devices (default: `FLOWSIM_HOST_DEVICES`, else the cores this process
      may use).

    **Returns:** the number of CPU devices asked for (0 if nothing was changed).
    """
    from jax._src import xla_bridge

    if count is None:
        count = _integer(HOST_DEVICES_VARIABLE)  # checked even where it cannot act: a bad value is said
    if count is None:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if count < 1:
        raise InvalidInput(f"{HOST_DEVICES_VARIABLE} must be an integer >= 1, got {count}")
    if count > MAX_HOST_DEVICES:
        raise InvalidInput(
            f"{HOST_DEVICES_VARIABLE} must be at most {MAX_HOST_DEVICES} (XLA starts every CPU device before any work; "
            f"more devices than cores only add overhead), got {count}"
        )
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" in flags or xla_bridge.backends_are_initialized():
        return 0
    if count > 1:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    return count


#: What `check_xla_flags` runs in a child process: XLA's CPU client started, which parses XLA_FLAGS (jaxlib's own
#: module, without JAX's: about 0.2 s), on one device whatever the flags ask.
_XLA_FLAGS_PROBE = "import jaxlib._jax as xla; xla.get_tfrt_cpu_client(asynchronous=False, num_devices=1)"
#: An error or fatal line of XLA's log ("F1204 17:10:57.978172 6920 parse_flags_from_env.cc:234] Unknown flag ...").
_XLA_ERROR_LINE = re.compile(r"^([EF])\d{4} [\d:.]+\s+\d+ [^\]]*\] (.+)$", re.MULTILINE)


def check_xla_flags() -> None:
    """Refuse, before JAX starts, an XLA_FLAGS that XLA cannot parse (an unknown flag, a value it cannot read): XLA
    would end the process at its start with its own fatal error and exit status 1, that of a numerical failure.

    XLA's own parser decides, in a child process given the same environment (only where XLA_FLAGS is set): a list
    of flag names kept here would go stale with each XLA, and XLA's fatal error ends the process that meets it, so it
    can be neither caught nor parsed in this one. A probe that fails without XLA's error (a jaxlib without that
    module) says nothing, and JAX starts as before.

    **Raises:** `InvalidInput`, with XLA's own words.
    """
    flags = os.environ.get("XLA_FLAGS", "").strip()
    if not flags:
        return
    try:
        probe = subprocess.run(
            [sys.executable, "-c", _XLA_FLAGS_PROBE], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return
    said = _XLA_ERROR_LINE.findall(probe.stderr) if probe.returncode else []
    if not said:
        return
    # XLA's error line names the flag ("Couldn't interpret value abc for flag ..."), its fatal line may not.
    errors = [message for level, message in said if level == "E"] or [message for _, message in said]
    raise InvalidInput(
        f"XLA cannot read XLA_FLAGS={flags!r}: {errors[0].strip()} (it would stop at its start; correct or unset "
        "XLA_FLAGS)"
    )


def _integer(name: str) -> int | None:
    text = os.environ.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer, got {text!r}") from None


def batch_mesh() -> Mesh:
    """The 1-D mesh over every device of every process (`jax.devices()`), its one axis named `BATCH_AXIS`.

    Its axis is `AxisType.Auto`: the jitted computations are partitioned by XLA from their inputs' sharding.
    """
    devices = tuple(jax.devices())
    return jax.make_mesh((len(devices),), (BATCH_AXIS,), axis_types=(AxisType.Auto,), devices=devices)


def sharding_enabled() -> bool:
    """Whether `shard_batch` splits batches here: more than one device, and not within `unsharded()`."""
    return _ENABLED.get() and jax.device_count() > 1


@contextlib.contextmanager
def unsharded() -> Iterator[None]:
    """Within this block the engine computes its batches on the default device alone, as on a one-device machine.

    With several processes, each then computes every row itself.
    """
    token = _ENABLED.set(False)
    try:
        yield
    finally:
        _ENABLED.reset(token)


@dataclass(frozen=True)
class ShardedBatch:
    """A batch placed for a computation (`shard_batch`), and how to take its results back.

    **Fields:**

    - `value`: the pytree to compute with: the input itself, or its arrays padded to `rows` rows
      and split over `batch_mesh()`.
    - `size`: the rows of the input; `rows`: the rows of `value` (a multiple of the device count).
    - `sharded`: whether `value` is split over several devices.
    """

    value: Any
    size: int
    rows: int
    sharded: bool

    def gather(self, outputs):
        """The results of the computation on `value`, as if it had run on the input on one device.

        **Arguments:**

        - `outputs`: a pytree whose arrays have the batch (`rows` rows) on their first axis; other
          leaves pass unchanged.

        **Returns:** the same pytree, each array with its first `size` rows (the padding dropped),
        whole on every process, on the default device. Unsharded: `outputs` itself.
        """
        if not self.sharded:
            return outputs

        def whole(x):
            if not isinstance(x, jax.Array):
                return x
            if x.is_fully_addressable:
                host = np.asarray(x)
            else:
                from jax.experimental import multihost_utils

                host = multihost_utils.process_allgather(x, tiled=True)
            return jnp.asarray(host[: self.size])

        return jax.tree.map(whole, outputs)


def shard_batch(tree) -> ShardedBatch:
    """Place a batch over every device: its rows split over `batch_mesh()` (`NamedSharding(mesh, P("batch"))`).

    The rows are padded to a multiple of the device count with copies of row 0 (static shapes: one
    compiled program per batch size); `ShardedBatch.gather` drops them from the results. Every
    process must pass the same values (e.g. drawn from the same seed): each places its own
    devices' rows (`jax.make_array_from_callback`). With one device, or within `unsharded()`, nothing
    is done: `value` is `tree` itself.

    **Arguments:**

    - `tree`: an array, or a pytree of arrays (PRNG key arrays included, None leaves allowed),
      all with the same number of rows on their first axis; row 0 must be a valid row.

    **Returns:** a `ShardedBatch`.
    """
    leaves = jax.tree.leaves(tree)
    sizes = {int(np.shape(leaf)[0]) for leaf in leaves}
    if len(sizes) != 1:
        raise InvalidInput(f"every array of a batch must have the same number of rows, got {sorted(sizes)}")
    size = sizes.pop()
    if not sharding_enabled():
        return ShardedBatch(tree, size, size, False)
    mesh = batch_mesh()
    devices = mesh.devices.size
    rows = -(-size // devices) * devices
    sharding = NamedSharding(mesh, PartitionSpec(BATCH_AXIS))
    return ShardedBatch(jax.tree.map(lambda x: _place(x, rows, sharding), tree), size, rows, True)


def over_batch(function, sharded: bool):
    """`function(batch, *rest)` computed by each device on its own rows of `batch` (`jax.shard_map`).

    For a computation whose length depends on its rows (a vmapped adaptive solve, a while loop): each
    device runs its own loop to its own rows' end, with no exchange between devices at each
    iteration, which XLA's automatic partitioning of a batched loop would need. `rest` is replicated.
    Used inside a jitted function, on a batch placed by `shard_batch`, whose `sharded` it is given (a
    static argument of the jitted function: the choice is made where the batch was placed, not where
    the function is traced, which may be another thread).

    **Arguments:**

    - `function`: maps a batch (arrays with the batch on their first axis) and replicated arguments
      to outputs with the batch on their first axis.
    - `sharded`: `ShardedBatch.sharded` of the batch; if False, `function` itself is returned.

    **Returns:** the function to call in its place.
    """
    if not sharded:
        return function
    mesh = batch_mesh()

    def call(batch, *rest):
        # Traced here, on one device's share of the rows, as on a one-device machine; only the traced
        # program is replayed inside shard_map. Traced inside it, libraries that compare shapes see
        # the mesh's manual axis in some of them and not in others (lineax's linear solves in the
        # implicit Diffrax solvers: "pytree does not match out_structure", lineax issue 185).
        share = mesh.devices.size
        rows = jax.tree.map(lambda x: jax.ShapeDtypeStruct((x.shape[0] // share, *x.shape[1:]), x.dtype), batch)
        program, shapes = jax.make_jaxpr(lambda b, r: function(b, *r), return_shape=True)(rows, rest)
        run = jax.extend.core.jaxpr_as_fun(program)

        def on_rows(b, r):
            return jax.tree.unflatten(jax.tree.structure(shapes), run(*jax.tree.leaves((b, r))))

        # check_vma off: Diffrax's loops mix replicated and per-device values in their carries, which the
        # check cannot type; every output is per-device (the batch axis) by construction.
        mapped = jax.shard_map(
            on_rows,
            mesh=mesh,
            in_specs=(PartitionSpec(BATCH_AXIS), PartitionSpec()),
            out_specs=PartitionSpec(BATCH_AXIS),
            check_vma=False,
        )
        return mapped(batch, rest)

    return call


def _place(x, rows: int, sharding: NamedSharding):
    """x padded to `rows` rows with copies of row 0, as a global array split by `sharding`."""
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = _place(jax.random.key_data(x), rows, sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    if rows > len(host):
        host = np.concatenate([host, np.repeat(host[:1], rows - len(host), axis=0)])
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
