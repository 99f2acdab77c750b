"""blu: a JAX-style functional transforms framework (trace -> jaxpr -> transform -> run)."""

from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import ShapeDtypeStruct, ShapedArray
from blu.core.config import config
from blu.core.errors import BluError
from blu.core.jaxpr import ClosedJaxpr, Jaxpr, eval_jaxpr
from blu.core.interpreter import ensure_compile_time_eval
from blu.core.staging import make_jaxpr
from blu.transforms.ad_api import grad, jvp, linearize, value_and_grad, vjp
from blu.transforms.batching import vmap
from blu.transforms.custom_derivatives import custom_jvp, custom_vjp
from blu.transforms.custom_gradient import custom_gradient
from blu.transforms.closure_convert import closure_convert
from blu.transforms.remat import checkpoint, checkpoint_name, checkpoint_policies, remat
from blu.transforms.jit import eval_shape, jit
from blu.transforms.linear_transpose import linear_transpose
from blu.transforms.fwd_and_bwd import fwd_and_bwd
from blu import lax, numpy  # noqa: E402
from blu import lower  # noqa: E402  (registers jit's backend and the device dispatch)
from blu import nn, optim, random  # noqa: E402
from blu.jacobians import hessian, jacfwd, jacrev  # noqa: E402

jacobian = jacrev  # JAX's alias
from blu import cuda  # noqa: E402  (loads no CUDA library until used)
from blu import parallel  # noqa: E402
from blu.parallel import device_put, devices, shard  # noqa: E402
from blu.parallel.shard_map import shard_map  # noqa: E402
from blu import experimental, tree, tree_util  # noqa: E402
from blu.host import block_until_ready, device_get, disable_jit  # noqa: E402
from blu import profiler  # noqa: E402
from blu.environment import print_environment_info  # noqa: E402
from blu import debug, distributed, errors, image, scipy, sharding  # noqa: E402
from blu import custom_batching  # noqa: E402
from blu.api import (  # noqa: E402
    Device,
    NamedSharding,
    P,
    clear_caches,
    default_backend,
    default_matmul_precision,
    device_count,
    local_device_count,
    local_devices,
    make_mesh,
    named_call,
    named_scope,
    process_count,
    process_index,
    pure_callback,
)

from blu.core.version import __version__
