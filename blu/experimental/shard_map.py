"""``from blu.experimental.shard_map import shard_map`` (JAX's older import path)."""

from blu.parallel.shard_map import shard_map

__all__ = ["shard_map"]
