"""The OpInfo table, one module per area; importing this package fills ``TABLE``."""

from ops import array_api, arrays, elementwise, lax_ops, linalg_nn, transforms  # noqa: F401  (register)
from ops.base import NOT_OPERATIONS, TABLE, OpInfo, covered, public_names  # noqa: F401
