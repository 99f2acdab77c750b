"""LAPACK's compact Householder QR as primitives (JAX's ``geqrf``, internal to
``jax._src.lax.linalg``, and ``jax.lax.linalg.householder_product``): ``geqrf`` factors
``a = Q R`` keeping ``Q`` as its reflectors ``H_i = I - tau_i v_i v_i^H`` (``v_i`` below the
diagonal of the output, its unit first entry implicit), ``householder_product`` (LAPACK's
orgqr/ungqr) forms the first ``n`` columns of ``Q = H_1 ... H_k`` from them. Their impls are the
CPU kernels of ``blu/core/lapack.py``; on CUDA targets cuSOLVER's geqrf and orgqr
(``blu/cuda/solver.py``). Leading axes are batch axes (the batching rule moves the mapped axis to
the front). As in JAX, neither has a derivative: ``qr`` (the same factorization, with ``Q``
formed) has one."""

from __future__ import annotations

from typing import Any

from blu.core import lapack as cpu
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.primitive import MissingRuleError, Primitive
from blu.lax.linalg._helpers import batch_to_front, check_matrix, zero_of
from blu.transforms.ad_util import Zero

# ---- geqrf ---------------------------------------------------------------------------------------

geqrf_p = Primitive("geqrf", multiple_results=True)
geqrf_p.def_impl(cpu.geqrf)


@geqrf_p.def_abstract_eval
def _geqrf_abstract_eval(a: ShapedArray) -> list[ShapedArray]:
    check_matrix("geqrf", a, allow_complex=True)
    *batch, m, n = a.shape
    return [a, a.update(shape=(*batch, min(m, n)))]


def _no_derivative(name: str, prim: Primitive):
    def jvp(primals, tangents, **params):
        if all(isinstance(t, Zero) for t in tangents):
            outs = prim.bind(*primals, **params)
            outs = outs if prim.multiple_results else [outs]
            zeros = [zero_of(o) for o in outs]
            return (outs, zeros) if prim.multiple_results else (outs[0], zeros[0])
        raise MissingRuleError(
            with_user_line(
                f"{name} has no derivative (as in JAX): Householder reflectors are not "
                "differentiated; differentiate blu.lax.linalg.qr or blu.numpy.linalg.qr instead"
            )
        )

    prim.def_jvp(jvp)


_no_derivative("geqrf", geqrf_p)
batch_to_front(geqrf_p)


def geqrf(a: Any) -> tuple[Any, Any]:
    """Householder QR in LAPACK's compact form (``?geqrf``).

    Args:
        a: ``(..., m, n)`` float or complex matrices.

    Returns:
        ``(a_out, taus)``: ``a_out`` ``(..., m, n)`` holds ``R`` on and above the diagonal and
        below it the Householder vectors ``v_i`` (their first entry, 1, implicit); ``taus``
        ``(..., min(m, n))`` their scales, so that ``Q = H_1 ... H_k`` with
        ``H_i = I - taus[i] v_i v_i^H`` and ``a = Q R`` (LAPACK's signs). Not differentiable.

    Raises:
        BluTypeError: not floating point or complex. BluShapeError: rank < 2.
    """
    a_out, taus = geqrf_p.bind(a)
    return a_out, taus


# ---- householder_product -----------------------------------------------------------------------

householder_product_p = Primitive("householder_product")
householder_product_p.def_impl(cpu.householder_product)


@householder_product_p.def_abstract_eval
def _householder_product_abstract_eval(a: ShapedArray, taus: ShapedArray) -> ShapedArray:
    check_matrix("householder_product", a, allow_complex=True)
    m, n = a.shape[-2:]
    what = f"householder_product: a {a.str_short()}, taus {taus.str_short()}"
    if m < n:
        raise BluShapeError(with_user_line(f"{what}: a needs at least as many rows as columns"))
    if taus.ndim != a.ndim - 1 or taus.shape[:-1] != a.shape[:-2]:
        raise BluShapeError(
            with_user_line(f"{what}: taus must be (..., k) with a's batch dimensions")
        )
    if taus.shape[-1] > n:
        raise BluShapeError(
            with_user_line(f"{what}: more taus ({taus.shape[-1]}) than a's {n} columns")
        )
    if taus.dtype != a.dtype:
        raise BluTypeError(with_user_line(f"{what}: a and taus need one dtype"))
    return ShapedArray(a.shape, a.dtype, a.weak_type and taus.weak_type)


_no_derivative("householder_product", householder_product_p)
batch_to_front(householder_product_p)


def householder_product(a: Any, taus: Any) -> Any:
    """The product of elementary Householder reflectors (LAPACK's ``?orgqr`` / ``?ungqr``).

    Args:
        a: ``(..., m, n)`` float or complex matrices, ``m >= n``, whose columns below the
            diagonal hold the Householder vectors (as ``geqrf`` leaves them; what is on and above
            the diagonal is not read).
        taus: ``(..., k)``, ``k <= n``, the reflectors' scales, of ``a``'s dtype and batch shape.

    Returns:
        ``(..., m, n)``: the first ``n`` columns of ``H_1 ... H_k``, orthonormal. Not
        differentiable.

    Raises:
        BluTypeError: not floating point or complex, or different dtypes. BluShapeError:
        ``m < n``, ``k > n``, or batch shapes that differ.
    """
    return householder_product_p.bind(a, taus)
