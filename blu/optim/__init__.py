"""blu.optim: optimizers, clipping and schedules with optax's contract.

``adamw`` / ``adam`` / ``sgd`` return an ``Optimizer``: ``init(params) -> state``,
``update(grads, state, params) -> (updates, state)`` (optax's ``GradientTransformation``) and
``step(grads, state, params) -> (params, state)`` (``update`` then ``apply_updates``, as one
jit-able call). ``chain``, ``scale_by_adam``, ``add_decayed_weights``,
``scale_by_learning_rate``, ``clip_by_global_norm(max_norm)``, ``masked`` and optax's schedule
names compose the same way (``blu.optim.transforms``).

Modules: ``optimizers`` (AdamW, SGD, clipping, blu's schedules), ``transforms`` (optax's
building blocks), ``more_optimizers`` (optax's RMSProp, Adagrad and Lion with
their transformations), ``factorized`` (optax's Adafactor with its transformations).
"""

from blu.optim.factorized import *  # noqa: F403
from blu.optim.factorized import __all__ as _fact_all
from blu.optim.more_optimizers import *  # noqa: F403
from blu.optim.more_optimizers import __all__ as _more_all
from blu.optim.optimizers import *  # noqa: F403
from blu.optim.optimizers import __all__ as _opt_all
from blu.optim.transforms import *  # noqa: F403
from blu.optim.transforms import __all__ as _tr_all

__all__ = list(_opt_all) + list(_tr_all) + list(_more_all) + list(_fact_all)
