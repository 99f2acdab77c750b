"""blu.lax: the primitives' user-facing functions (strict shapes and dtypes, like jax.lax).

Each module defines primitives with all their rules and lists its public functions in
``__all__``; this package re-exports them.
"""

from blu.lax.elementwise import *  # noqa: F403
from blu.lax.bits import *  # noqa: F403
from blu.lax.special import *  # noqa: F403
from blu.lax.shapes import *  # noqa: F403
from blu.lax.slicing import *  # noqa: F403
from blu.lax.reductions import *  # noqa: F403
from blu.lax.dot import *  # noqa: F403
from blu.lax.sorting import *  # noqa: F403
from blu.lax.control_flow import *  # noqa: F403
from blu.lax.ad_ops import *  # noqa: F403
from blu.lax.attention import *  # noqa: F403
