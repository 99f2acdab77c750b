"""blu.experimental: JAX's ``jax.experimental`` import paths for features blu has
(``blu.experimental.shard_map.shard_map``)."""
