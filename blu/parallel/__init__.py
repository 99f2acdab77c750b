"""Sharding: meshes, sharded arrays, ``shard`` (shard_map) and named-axis collectives.

    import blu
    from blu.parallel import P, NamedSharding, make_mesh, psum

    mesh = make_mesh((4,), ("data",))                      # BLU_NUM_CPU_DEVICES=4
    x = blu.device_put(batch, NamedSharding(mesh, P("data")))
    total = blu.shard(lambda b: psum(b.sum(), "data"), mesh, P("data"), P())(x)

On the CPU, ``BLU_NUM_CPU_DEVICES=N`` gives N virtual devices in one process. On GPUs, run one
process per GPU (``python -m blu.parallel.launch --nproc N script.py``) and call
``blu.parallel.initialize()``; the collectives then go through NCCL (MPI for CPU processes).

Parallelism schemes as shardings of a training step: ``blu.parallel.fsdp`` (ZeRO-3),
``blu.parallel.tensor`` (Megatron column/row-parallel layers, sequence parallelism) and
``blu.parallel.pipeline`` (the 1F1B pipeline schedule).

Sharded checkpoints: ``save_sharded`` (each process writes its blocks, one manifest commits
them) and ``load_sharded`` (onto any mesh and PartitionSpec).
"""

from blu.transforms.axes import axis_size
from blu.lax.parallel import (
    all_gather,
    all_to_all,
    axis_index,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
    pvary,
)
from blu.lax.ragged_collective import ragged_all_to_all
from blu.parallel.checkpoint import CheckpointError, load_sharded, read_manifest, save_sharded
from blu.parallel.devices import Device, device_count, devices, local_devices
from blu.parallel.mesh import Mesh, NamedSharding, P, PartitionSpec, make_mesh
from blu.parallel.runtime import initialize, is_initialized, process_count, process_index, shutdown
from blu.parallel.shard_map import shard, shard_map
from blu.parallel.sharded_array import Shard, ShardedArray, device_put
from blu.parallel import spmd as _spmd
from blu.parallel.spmd import with_sharding_constraint
from blu.transforms import jit as _jit

_jit.set_partitioner(_spmd)

__all__ = [
    "CheckpointError",
    "Device",
    "Mesh",
    "NamedSharding",
    "P",
    "PartitionSpec",
    "Shard",
    "ShardedArray",
    "all_gather",
    "all_to_all",
    "axis_index",
    "axis_size",
    "device_count",
    "device_put",
    "devices",
    "initialize",
    "is_initialized",
    "load_sharded",
    "local_devices",
    "make_mesh",
    "pmax",
    "pmean",
    "pmin",
    "ppermute",
    "process_count",
    "process_index",
    "psum",
    "psum_scatter",
    "pvary",
    "ragged_all_to_all",
    "read_manifest",
    "save_sharded",
    "shard",
    "shard_map",
    "shutdown",
    "with_sharding_constraint",
]
