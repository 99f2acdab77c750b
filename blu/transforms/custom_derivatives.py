"""``custom_jvp`` and ``custom_vjp``: user-defined derivative rules (as in JAX).

A call of a decorated function traces the function and its rules to jaxprs right away, under
the caller's interpreter, and binds one primitive holding them (an eager ``custom_jvp`` call
traces its rule only at the first call of a signature, to check it: ``custom_jvp.py``):

- ``custom_jvp_call``: operands ``f consts, jvp consts, args``; evaluates like ``f``; its JVP
  applies the rule (param ``jvp``) under the parent interpreter. A call made while its own
  rule is being traced or applied (``f_jvp`` calling ``f``) holds a ``_DeferredJVP`` instead:
  the rule is applied when that call is differentiated, so every order applies the custom rule
  again (and only the orders taken are traced).
- ``custom_vjp_call``: operands ``f consts, fwd consts, bwd consts, args``; its JVP runs ``fwd``
  and emits ``custom_lin``, a linear primitive of the tangents holding ``bwd`` and the
  residuals, whose transpose runs ``bwd``; forward mode cannot evaluate it and says so. A call
  of the function from its own ``fwd``/``bwd`` runs the function's body directly.

Tracing at the call makes closures work: a traced value the function or its rules close over
becomes an operand, which ``jit``, ``vmap`` and ``grad`` transform like any argument (with
respect to it, ``f`` gets ordinary autodiff). A deferred rule runs later, as JAX's rules do, so
what it closes over must still be valid then (concrete, or traced by a running transform).
All three primitives batch by the named rule: collectives inside see the vmap/shard axis name.

``custom_jvp`` is in ``custom_jvp.py``, ``custom_vjp`` in ``custom_vjp.py``, the helpers they
share in ``custom_common.py``; this module re-exports them (and their primitives).
"""

# the primitives and ``groups`` (which splits their operands) are re-exported for blu.lower
from blu.transforms.custom_jvp import custom_jvp, custom_jvp_call_p  # noqa: F401
from blu.transforms.custom_vjp import (  # noqa: F401
    CustomVJPForwardModeError,
    custom_lin_p,
    custom_vjp,
    custom_vjp_call_p,
)
from blu.transforms.jaxpr_util import groups  # noqa: F401

__all__ = ["custom_jvp", "custom_vjp", "CustomVJPForwardModeError"]
