"""Device mesh and `shard_map` across JAX versions, and the multi-host start-up.

Everything runs on JAX's own SPMD engine: a 1-D `jax.sharding.Mesh` with axis `AXIS` over P
devices and `jax.shard_map` (``jax.experimental.shard_map.shard_map`` on JAX versions that have
no ``jax.shard_map``). Across hosts, `initialize` wraps `jax.distributed.initialize`; the mesh
then spans the devices of every process (``jax.devices()`` is global after initialization).
"""

from __future__ import annotations

from typing import Optional

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "p"
"""Name of the mesh axis the graph partitions are laid out along."""


def make_mesh(n_devices: int, devices: Optional[list] = None) -> Mesh:
    """A 1-D mesh over the first ``n_devices`` devices (``jax.devices()`` by default).

    Raises:
      ValueError: ``n_devices`` < 1 or more than the devices available (the message says how to
        get host-platform devices on CPU).
    """
    devices = list(jax.devices() if devices is None else devices)
    if isinstance(n_devices, bool) or not isinstance(n_devices, (int, np.integer)) or n_devices < 1:
        raise ValueError(f"make_mesh: n_devices must be an int >= 1, got {n_devices!r}")
    if n_devices > len(devices):
        raise ValueError(f"make_mesh: n_devices={n_devices} exceeds the {len(devices)} {jax.default_backend()} "
                         f"device(s) available; on CPU set XLA_FLAGS=--xla_force_host_platform_device_count="
                         f"{n_devices} before JAX starts")
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
               process_id: Optional[int] = None, **kwargs) -> None:
    """Multi-host start-up: ``jax.distributed.initialize(...)`` once per process, before any
    other JAX call. With no arguments JAX detects the cluster (SLURM, Open MPI, Kubernetes, TPU).

    After it returns, ``jax.devices()`` lists the devices of all processes and `make_mesh`
    spans them; each process must run the same program (SPMD). See docs/guide.md, "Scale-out".
    """
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, **kwargs)
