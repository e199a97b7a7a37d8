"""Device mesh and `shard_map` across JAX versions, and the multi-host start-up.

Everything runs on JAX's own SPMD engine: a 1-D `jax.sharding.Mesh` with axis `AXIS` over P
devices and `jax.shard_map` (``jax.experimental.shard_map.shard_map`` on JAX versions that have
no ``jax.shard_map``). Across hosts, `initialize` wraps `jax.distributed.initialize`; the mesh
then spans the devices of every process (``jax.devices()`` is global after initialization).
"""

from __future__ import annotations

import os
from typing import Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "p"
"""Name of the mesh axis the graph partitions are laid out along."""


def make_mesh(n_devices: int, devices: Optional[list] = None) -> Mesh:
    """A 1-D mesh over the first ``n_devices`` devices (``jax.devices()`` by default).

    Across processes (after `initialize`) the mesh must hold every device of every process, in
    ``jax.devices()`` order (process by process), so that each process runs its part of the program.

    Raises:
      ValueError: ``n_devices`` < 1 or more than the devices available (the message says how to
        get host-platform devices on CPU); across processes, ``n_devices`` other than
        ``jax.device_count()``.
    """
    devices = list(jax.devices() if devices is None else devices)
    if isinstance(n_devices, bool) or not isinstance(n_devices, (int, np.integer)) or n_devices < 1:
        raise ValueError(f"make_mesh: n_devices must be an int >= 1, got {n_devices!r}")
    if n_devices > len(devices):
        raise ValueError(f"make_mesh: n_devices={n_devices} exceeds the {len(devices)} {jax.default_backend()} "
                         f"device(s) available; on CPU set XLA_FLAGS=--xla_force_host_platform_device_count="
                         f"{n_devices} before JAX starts")
    if jax.process_count() > 1 and n_devices != len(devices):
        raise ValueError(f"make_mesh: n_devices={n_devices} across {jax.process_count()} processes must be all "
                         f"{len(devices)} devices of the cluster")
    return Mesh(np.asarray(devices[:n_devices]), (AXIS,))


def shard_map(f, mesh: Mesh, in_specs, out_specs):
    """``jax.shard_map`` (JAX >= 0.6) or ``jax.experimental.shard_map.shard_map`` (older), with
    replication checking on."""
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    from jax.experimental.shard_map import shard_map as _sm  # pragma: no cover - old JAX
    return _sm(f, mesh, in_specs=in_specs, out_specs=out_specs)


def sharded(mesh: Mesh) -> NamedSharding:
    """Sharding of arrays whose leading axis is the partition axis (``[P, ...]``)."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def initialize(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None, *, local_devices: Optional[int] = None, **kwargs) -> None:
    """Multi-process start-up: ``jax.distributed.initialize(...)`` once per process, before any
    other JAX call (JAX raises RuntimeError otherwise). With no arguments JAX detects the cluster
    (SLURM, Open MPI, Kubernetes, TPU).

    CPU collectives are set to gloo (``jax_cpu_collectives_implementation``; over TCP, so
    processes on CPU can run cross-process ``psum`` / ``ppermute``); GPUs use NCCL, JAX's default.
    ``local_devices`` k sets the number of CPU devices of this process (``jax_num_cpu_devices``;
    ignored by GPU backends, and not set where ``XLA_FLAGS`` already forces a host device count).
    After it returns, ``jax.devices()`` lists the devices of all processes (``jax.process_index()``
    of each) and `make_mesh` spans them; every process must run the same program (SPMD). See
    docs/guide.md, "Scale-out".

    Raises:
      ValueError: ``num_processes`` < 1, ``process_id`` outside ``[0, num_processes)``,
        ``local_devices`` < 1, or ``coordinator_address`` not ``HOST:PORT``.
    """
    if num_processes is not None and (not isinstance(num_processes, (int, np.integer)) or num_processes < 1):
        raise ValueError(f"initialize: num_processes must be an int >= 1, got {num_processes!r}")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"initialize: process_id must be in [0, {num_processes}), got {process_id!r}")
    if local_devices is not None and (not isinstance(local_devices, (int, np.integer)) or local_devices < 1):
        raise ValueError(f"initialize: local_devices must be an int >= 1, got {local_devices!r}")
    if coordinator_address is not None:
        host, _, port = coordinator_address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"initialize: coordinator_address must be HOST:PORT, got {coordinator_address!r}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if local_devices is not None and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        jax.config.update("jax_num_cpu_devices", int(local_devices))
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, **kwargs)


def is_primary() -> bool:
    """True on the process that writes results and checkpoints (``jax.process_index() == 0``;
    always True in a single process)."""
    return jax.process_index() == 0


def local_parts(mesh: Mesh) -> list:
    """Mesh positions (= partitions) whose device belongs to this process, ascending: the parts
    this process loads and feeds (all of them in a single process)."""
    me = jax.process_index()
    return [i for i, d in enumerate(mesh.devices.flat) if d.process_index == me]
