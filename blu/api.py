"""JAX's top-level helpers under their JAX names: devices and processes (``device_count``,
``local_devices``, ``default_backend``, ``process_index``...), ``make_mesh``, ``clear_caches``,
``pure_callback`` and ``named_call`` / ``named_scope``; re-exported by ``blu``."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from blu.core import pytree
from blu.core import trace as _trace
from blu.core.config import config
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.lax.callback import pure_callback_p
from blu.parallel import runtime as _runtime
from blu.parallel.device import Device
from blu.parallel.devices import device_count as _device_count
from blu.parallel.devices import devices as _all_devices
from blu.parallel.mesh import Mesh, NamedSharding
from blu.parallel.mesh import PartitionSpec as P
from blu.parallel.mesh import make_mesh as _make_mesh
from blu.transforms.jit import clear_caches

__all__ = [
    "Device",
    "NamedSharding",
    "P",
    "clear_caches",
    "default_matmul_precision",
    "default_backend",
    "device_count",
    "local_device_count",
    "local_devices",
    "make_mesh",
    "named_call",
    "named_scope",
    "process_count",
    "process_index",
    "pure_callback",
]


def device_count() -> int:
    """The number of devices of the job (``BLU_NUM_CPU_DEVICES`` virtual CPU devices, or one per
    process after ``blu.parallel.initialize()``)."""
    return _device_count()


def local_devices(process_index: int | None = None, backend: str | None = None) -> list[Device]:
    """The devices of this process (or of process ``process_index``), as ``jax.local_devices``.

    Raises:
        BluValueError: ``backend`` is not this job's platform.
    """
    devs = _all_devices()
    if backend is not None and backend != default_backend():
        raise BluValueError(
            f"local_devices: no {backend!r} devices (this job's are {default_backend()!r})"
        )
    idx = _runtime.process_index() if process_index is None else process_index
    return [d for d in devs if d.process_index == idx]


def local_device_count() -> int:
    """The number of devices this process addresses."""
    return len(local_devices())


def default_backend() -> str:
    """The platform of the job's devices: ``"cpu"`` (virtual CPU devices) or ``"gpu"`` (one
    GPU per process after ``blu.parallel.initialize()``). Arrays moved with
    ``blu.cuda.device_put`` run on the GPU whatever this says."""
    platform = _all_devices()[0].platform
    return "gpu" if platform in ("cuda", "gpu") else platform


def process_index() -> int:
    """This process's rank in the job (0 without ``blu.parallel.initialize()``)."""
    return _runtime.process_index()


def process_count() -> int:
    """The number of processes of the job (1 without ``blu.parallel.initialize()``)."""
    return _runtime.process_count()


def make_mesh(
    axis_shapes: Sequence[int],
    axis_names: Sequence[Any],
    *,
    devices: Sequence[Device] | None = None,
    axis_types: Any = None,
) -> Mesh:
    """A ``Mesh`` of shape ``axis_shapes`` named ``axis_names`` over ``blu.devices()`` (or
    ``devices``), as ``jax.make_mesh``.

    Raises:
        BluValueError: a size that is not a positive integer, the shape's product is not the
            number of devices, or ``axis_types`` is given (JAX's explicit sharding mode is not
            in blu).
    """
    if axis_types is not None:
        raise BluValueError(
            "make_mesh: axis_types (JAX's explicit-axes mode) is not supported; blu's meshes are "
            "JAX's Auto axes: leave axis_types out"
        )
    return _make_mesh(axis_shapes, axis_names, devices)


def _result_avals(result_shape_dtypes: Any) -> tuple[list, Any]:
    leaves, tree = pytree.tree_flatten(result_shape_dtypes)
    avals = []
    for s in leaves:
        if not (hasattr(s, "shape") and hasattr(s, "dtype")):
            raise BluTypeError(
                with_user_line(
                    f"pure_callback: result_shape_dtypes leaves need .shape and .dtype "
                    f"(blu.ShapeDtypeStruct), got {s!r}"
                )
            )
        avals.append((tuple(int(d) for d in s.shape), np.dtype(s.dtype)))  # (.str loses bfloat16)
    return avals, tree


def pure_callback(
    callback: Callable[..., Any],
    result_shape_dtypes: Any,
    *args: Any,
    vmap_method: str | None = None,
    **kwargs: Any,
) -> Any:
    """Call a pure host function from inside ``jit`` / ``vmap``, as ``jax.pure_callback``.

    Args:
        callback: a Python function of numpy arrays returning arrays shaped as
            ``result_shape_dtypes``; it must be pure (blu may skip or repeat calls).
        result_shape_dtypes: a pytree of ``blu.ShapeDtypeStruct`` (or arrays) describing the
            results' shapes and dtypes.
        args, kwargs: pytrees of arrays passed to ``callback``.
        vmap_method: under ``vmap``, ``None`` / ``"sequential"``: one call per batch element;
            ``"expand_dims"`` / ``"broadcast_all"``: one call with the batch as the leading
            axis of every argument (the function must broadcast).

    Returns:
        The results, a pytree shaped as ``result_shape_dtypes``.

    Raises:
        BluValueError: the callback's results do not match ``result_shape_dtypes`` (at run
            time), or ``vmap_method`` is unknown.
        BluTypeError: a derivative is asked for (none exists; use ``blu.custom_jvp``).
    """
    if vmap_method not in (None, "sequential", "expand_dims", "broadcast_all"):
        raise BluValueError(
            f"pure_callback: vmap_method={vmap_method!r}; expected None, 'sequential', "
            "'expand_dims' or 'broadcast_all'"
        )
    avals, out_tree = _result_avals(result_shape_dtypes)
    leaves, in_tree = pytree.tree_flatten((args, kwargs))

    def host(*vals: Any) -> list:
        a, kw = pytree.tree_unflatten(in_tree, list(vals))
        return pytree.tree_leaves(callback(*a, **kw))

    outs = pure_callback_p.bind(
        *leaves, callback=host, result_avals=tuple(avals), vmap_method=vmap_method
    )
    return pytree.tree_unflatten(out_tree, list(outs))


_PRECISION_NAMES = {
    "fp32": "fp32", "float32": "fp32", "highest": "fp32",
    "tf32": "tf32", "tensorfloat32": "tf32", "high": "tf32",
    "bf16": "bf16", "bfloat16": "bf16", "default": "bf16",
}  # fmt: skip


@contextlib.contextmanager
def default_matmul_precision(precision: str) -> Iterator[None]:
    """Set ``blu.config.default_matmul_precision`` for a ``with`` block, as JAX's context
    manager: ``"fp32"`` / ``"float32"`` / ``"highest"``, ``"tf32"`` / ``"tensorfloat32"`` /
    ``"high"``, ``"bf16"`` / ``"bfloat16"`` / ``"default"`` (JAX's names map to blu's three).

    Raises:
        BluValueError: an unknown name.
    """
    name = _PRECISION_NAMES.get(str(precision).lower())
    if name is None:
        raise BluValueError(
            f"default_matmul_precision: {precision!r}; expected one of {sorted(_PRECISION_NAMES)}"
        )
    with config.override(default_matmul_precision=name):
        yield


@contextlib.contextmanager
def named_scope(name: str) -> Iterator[None]:
    """A context manager naming a block, as ``jax.named_scope``: a host span ``name`` around
    the block in the active ``blu.profiler.trace`` (nothing when none is active).

    blu's jaxprs carry no name stack (an equation records its source line instead), so the
    name only annotates the timeline: the span covers the block's Python execution (its
    eager operations, or its tracing under ``jit``); the traced program, its jaxpr and its
    kernels are the same as without the scope.

    Raises:
        BluTypeError: ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise BluTypeError(
            with_user_line(f"named_scope: the name must be a string, got {type(name).__name__}")
        )
    with _trace.region(name, "user"):
        yield


def named_call(fun: Callable, *, name: str | None = None) -> Callable:
    """``fun`` with its calls in ``named_scope(name)`` (``fun.__name__`` by default), as
    ``jax.named_call``: results and traced programs are ``fun``'s own; each call is a named
    span in the active ``blu.profiler.trace``.

    Raises:
        BluTypeError: ``name`` is given and not a string.
    """
    if name is not None and not isinstance(name, str):
        raise BluTypeError(
            with_user_line(f"named_call: the name must be a string, got {type(name).__name__}")
        )
    scope = getattr(fun, "__name__", type(fun).__name__) if name is None else name

    @functools.wraps(fun)
    def named(*args: Any, **kwargs: Any) -> Any:
        with named_scope(scope):
            return fun(*args, **kwargs)

    return named
