"""The OpInfo table, one module per area; importing this package fills ``TABLE``."""

from ops import (  # noqa: F401  (register)
    activations,
    array_api,
    arrays,
    attention,
    complex_fft,
    conv_scan,
    elementwise,
    jax_extras_a,
    jax_extras_b,
    jax_extras_c,
    jax_extras_d,
    jax_extras_e,
    jax_extras_f,
    lax_extras,
    lax_ops,
    linalg_nn,
    numpy_poly,
    transforms,
    windowed,
)
from ops.base import NOT_OPERATIONS, TABLE, OpInfo, covered, public_names  # noqa: F401
