"""blu.lax: the primitives' user-facing functions (strict shapes and dtypes, like jax.lax).

Each module defines primitives with all their rules and lists its public functions in
``__all__``; this package re-exports them.

The families import each other in one order, a module only ever importing those before it:
``_base`` (helpers) < ``casts`` < ``shapes`` < ``_operands`` < ``elementwise`` < ``complex`` <
``sorting`` < ``gather_scatter`` < ``slicing`` < ``bits``, ``special``, ``associative_scan`` <
``cumulative`` < ``reductions`` < the rest (``scatter_combine``, ``bessel``, ``zeta_series``,
``random_gamma``, ``stacking``, ``fft``, ``dot``, ``ragged``, ``convolution`` < ``conv_shapes`` <
``conv_patches``, ``windowed``, ``attention``, ``control_flow``, ``parallel``, ``linalg``;
``incomplete`` (and ``incomplete_beta``, which imports it), ``custom_reduce`` and
``scatter_apply`` import ``control_flow``, ``windowed`` imports it through ``custom_window``,
``ragged_collective`` imports ``parallel``).
No submodule imports this package. The few rules that need an operation of a higher family
(broadcast_in_dim's transpose needs ``reduce_sum``) call it through ``_late``, filled in below.
"""

from blu.lax.casts import *  # noqa: F403
from blu.lax.elementwise import *  # noqa: F403
from blu.lax.bits import *  # noqa: F403
from blu.lax.special import *  # noqa: F403
from blu.lax.bessel import *  # noqa: F403
from blu.lax.zeta_series import *  # noqa: F403
from blu.lax.random_gamma import *  # noqa: F403
from blu.lax.incomplete import *  # noqa: F403
from blu.lax.incomplete_beta import *  # noqa: F403
from blu.lax.complex import *  # noqa: F403
from blu.lax.fft import *  # noqa: F403
from blu.lax.shapes import *  # noqa: F403
from blu.lax.slicing import *  # noqa: F403
from blu.lax.stacking import *  # noqa: F403
from blu.lax.scatter_combine import *  # noqa: F403
from blu.lax.reductions import *  # noqa: F403
from blu.lax.dot import *  # noqa: F403
from blu.lax.ragged import *  # noqa: F403
from blu.lax.sorting import *  # noqa: F403
from blu.lax.control_flow import *  # noqa: F403
from blu.lax.custom_reduce import *  # noqa: F403
from blu.lax.scatter_apply import *  # noqa: F403
from blu.transforms.ad_ops import *  # noqa: F403
from blu.lax.parallel import *  # noqa: F403
from blu.lax.ragged_collective import *  # noqa: F403
from blu.lax.convolution import *  # noqa: F403
from blu.lax.conv_shapes import *  # noqa: F403
from blu.lax.conv_patches import *  # noqa: F403
from blu.lax.windowed import *  # noqa: F403
from blu.lax.associative_scan import associative_scan  # noqa: F401
from blu.lax.attention import *  # noqa: F403
from blu.lax.select_n import *  # noqa: F403
from blu.lax import _late
from blu.transforms import ops as _transform_ops

# the rules of lower families reach these operations of higher ones through blu.lax._late
_late.register(
    reduce_sum=reduce_sum,  # noqa: F405
    slice=slice,  # noqa: F405
    slice_in_dim=slice_in_dim,  # noqa: F405
    sub=sub,  # noqa: F405
    select=select,  # noqa: F405
    real=real,  # noqa: F405
    conj=conj,  # noqa: F405
)

# the transforms' helpers (zeros, tangent sums, batch-axis moves) apply these primitives
_transform_ops.register(
    add=add,  # noqa: F405
    broadcast_in_dim=broadcast_in_dim,  # noqa: F405
    transpose=transpose,  # noqa: F405
    convert_element_type=convert_element_type,  # noqa: F405
    reduce_sum=reduce_sum,  # noqa: F405
)
