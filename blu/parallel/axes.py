"""Named axes live in ``blu.transforms.named_axes`` (the collectives in lax and jit's cache key
need them below parallel); re-exported here for ``blu.parallel.axes`` imports."""

from blu.transforms.named_axes import (  # noqa: F401
    ProcessAxisEnv,
    axis_env_key,
    axis_size,
    axis_sizes,
    normalize_names,
    process_axis_env,
    process_env_for,
)
