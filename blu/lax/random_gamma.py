"""``random_gamma_grad``: the derivative of a Gamma(a, 1) sample by its shape parameter ``a``
(``jax.lax.random_gamma_grad``), the implicit reparameterization gradient of Figurnov, Mohamed &
Mnih 2018, "Implicit Reparameterization Gradients", eq. (5):

    dx/da = -(dF/da) / (dF/dx),   F(x; a) = P(a, x), the gamma CDF,

i.e. how the sample moves when ``a`` moves and its uniform noise (its CDF value) stays fixed.
``blu.random.gamma``/``loggamma``/``beta``/``dirichlet`` use it as the JVP of their samples; the
kernel (series and continued fraction differentiated in ``a``) is ``random_gamma_numpy.py``;
compiled programs run the same loops inside their elementwise kernels
(``blu/lower/mlir/mathlib_gamma.py``).
With ``log_space`` the operand is ``log x`` and the result ``d log x / da``, which stays finite
and exact where ``x`` underflows (``a`` near 0).
"""

from __future__ import annotations

__all__ = ["random_gamma_grad"]

from typing import Any

import numpy as np

from blu.core.errors import BluTypeError, with_user_line
from blu.lax._base import is_float
from blu.lax._operands import as_operands
from blu.lax.elementwise import binary
from blu.lax.random_gamma_numpy import dlog_sample_da


def _impl(a: np.ndarray, x: np.ndarray, *, log_space: bool) -> np.ndarray:
    if log_space:
        return dlog_sample_da(a, x).astype(a.dtype)
    x64 = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        g = x64 * dlog_sample_da(a, np.log(x64))
    return np.where(x64 == 0, 0.0, g).astype(a.dtype)  # a sample at 0 does not move


random_gamma_grad_p = binary("random_gamma_grad", _impl, is_float, "floating-point")


@random_gamma_grad_p.def_jvp
def _no_second_derivative(primals, tangents, *, log_space):
    raise BluTypeError(
        with_user_line(
            "random_gamma_grad has no derivative: gamma, beta and dirichlet samples have a "
            "first derivative by their parameters (implicit reparameterization), not a second"
        )
    )


def random_gamma_grad(a: Any, x: Any) -> Any:
    """``dx/da`` for Gamma(a, 1) samples ``x`` at fixed CDF value (``jax.lax.random_gamma_grad``).

    Args:
        a: shape parameters > 0, a float array.
        x: samples (>= 0) of the same shape and dtype.

    Returns:
        An array of that shape and dtype: ``-(dF/da) / (dF/dx)`` with ``F`` the regularized
        lower incomplete gamma function (Figurnov et al. 2018, eq. (5)); 0 where ``x == 0``,
        NaN where ``a <= 0``.

    Raises:
        BluTypeError: operands that are not floating point or differ in dtype.
        BluShapeError: operands of different shapes.
    """
    a, x = as_operands(a, x)
    return random_gamma_grad_p.bind(a, x, log_space=False)


def random_gamma_grad_log(a: Any, log_x: Any) -> Any:
    """``d log x / da`` from ``log x`` (finite where ``x`` underflows); else as
    ``random_gamma_grad``."""
    a, log_x = as_operands(a, log_x)
    return random_gamma_grad_p.bind(a, log_x, log_space=True)
