"""blu.lax shape primitives against numpy: broadcast_in_dim, broadcast, reshape, transpose,
squeeze, expand_dims, concatenate, pad, rev, iota, full, full_like.

Each operation is a *case*: a function of its array arguments, a generator per argument, a numpy
reference, and which arguments are differentiable. Every case is checked eagerly against numpy in
every dtype, by finite differences (order 2) in float64, against a per-slice loop under vmap with
random in_axes, and jit against eager. The case machinery is shared with test_lax_slicing.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
from helpers import check_grads, check_jit, check_vmap, shapes
from hypothesis import assume, given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError

DTYPES = [
    np.dtype(d)
    for d in (
        np.float32,
        np.float64,
        ml_dtypes.bfloat16,
        np.float16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint32,
        np.bool_,
    )
]

# ---- case machinery (also imported by test_lax_slicing.py) ---------------------------------------


def rand(rng: np.random.Generator, shape: Sequence[int], dtype) -> np.ndarray:
    """Random values of any dtype (small integers, normal floats, fair bools)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -50
        return np.asarray(rng.integers(lo, 100, shape), dtype)
    return np.asarray(rng.standard_normal(shape), dtype)


def gen(shape: Sequence[int], dtype) -> Callable[[np.random.Generator], np.ndarray]:
    shape = tuple(shape)
    return lambda rng: rand(rng, shape, dtype)


@dataclass
class Case:
    """``f(*args)`` with ``args[i] = gens[i](rng)``; ``ref`` is the numpy reference of ``f``;
    ``diff`` the positions of differentiable (float) arguments."""

    f: Callable
    gens: list[Callable[[np.random.Generator], np.ndarray]]
    ref: Callable
    diff: tuple[int, ...]
    indices: tuple[int, ...] = ()  # positions of integer index arguments


def run_eager(case: Case, rng: np.random.Generator) -> None:
    args = [g(rng) for g in case.gens]
    got = case.f(*args)
    want = np.asarray(case.ref(*args))
    assert np.asarray(got).dtype == want.dtype, (np.asarray(got).dtype, want.dtype)
    np.testing.assert_array_equal(np.asarray(got), want)


def run_grads(case: Case, rng: np.random.Generator, order: int = 2) -> None:
    args = [g(rng) for g in case.gens]

    def f_diff(*d):
        full = list(args)
        for i, v in zip(case.diff, d):
            full[i] = v
        return case.f(*full)

    check_grads(f_diff, [args[i] for i in case.diff], order=order, rng=rng)


def run_vmap(case: Case, rng: np.random.Generator, in_axes: Sequence[int | None], size: int):
    """vmap with the given in_axes: a mapped argument stacks ``size`` independent draws."""
    args = []
    for g, ax in zip(case.gens, in_axes):
        if ax is None:
            args.append(g(rng))
        else:
            members = [g(rng) for _ in range(size)]
            args.append(np.stack(members, axis=ax if ax >= 0 else ax + members[0].ndim + 1))
    check_vmap(case.f, args, in_axes)


def vmapped(case: Case, in_axes: Sequence[int | None], size: int) -> Case:
    """The case under ``vmap(in_axes)``: mapped arguments stack ``size`` draws (for checking
    the derivatives of what the batching rules produce)."""

    def stacked(g, ax):
        if ax is None:
            return g

        def draw(rng):
            members = [g(rng) for _ in range(size)]
            return np.stack(members, axis=ax if ax >= 0 else ax + members[0].ndim + 1)

        return draw

    f = blu.vmap(case.f, in_axes=tuple(in_axes))
    return Case(f, [stacked(g, ax) for g, ax in zip(case.gens, in_axes)], None, case.diff)


def run_jit(case: Case, rng: np.random.Generator) -> None:
    check_jit(case.f, [g(rng) for g in case.gens])


def draw_in_axes(data, case: Case, pattern: str = "any") -> list[int | None]:
    """Random in_axes (None or an axis, maybe negative). ``pattern`` says which arguments are
    mapped: 'any' (at least one), 'operand' (only non-index arguments), 'indices' (only index
    arguments) or 'both' (at least one of each)."""
    groups = {
        "any": [list(range(len(case.gens)))],
        "operand": [[i for i in range(len(case.gens)) if i not in case.indices]],
        "indices": [list(case.indices)],
        "both": [[i for i in range(len(case.gens)) if i not in case.indices], list(case.indices)],
    }[pattern]
    assume(all(groups))
    allowed = {i for g in groups for i in g}
    axes: list[int | None] = []
    for i, g in enumerate(case.gens):
        nd = np.ndim(g(np.random.default_rng(0))) + 1
        choices = [None] + (list(range(-nd, nd)) if i in allowed else [])
        axes.append(data.draw(st.sampled_from(choices)))
    for group in groups:  # force one mapped argument per group
        if all(axes[i] is None for i in group):
            axes[data.draw(st.sampled_from(group))] = 0
    return axes


def check_error_names(excinfo: pytest.ExceptionInfo, *needles: str) -> None:
    """The message names each needle and points at this test file's line that raised."""
    msg = str(excinfo.value)
    for n in needles:
        assert n in msg, (n, msg)
    this = os.path.abspath(excinfo.traceback[0].path)
    line = excinfo.traceback[0].lineno + 1
    assert f"{this}:{line}" in msg, (this, line, msg)


def seed(data) -> np.random.Generator:
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))


# ---- cases -------------------------------------------------------------------------------------


@st.composite
def broadcast_in_dim_case(draw, dtype=np.float64):
    in_shape = draw(shapes(max_dims=3))
    out_rank = len(in_shape) + draw(st.integers(0, 2))
    dims = sorted(draw(st.permutations(range(out_rank)))[: len(in_shape)])
    out = [draw(st.integers(0, 3)) for _ in range(out_rank)]
    for i, d in enumerate(dims):
        out[d] = in_shape[i] if in_shape[i] != 1 else out[d]
    out, dims = tuple(out), tuple(dims)

    def ref(x):
        expanded = [1] * out_rank
        for i, d in enumerate(dims):
            expanded[d] = x.shape[i]
        return np.broadcast_to(x.reshape(expanded), out)

    return Case(lambda x: lax.broadcast_in_dim(x, out, dims), [gen(in_shape, dtype)], ref, (0,))


@st.composite
def broadcast_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=2))
    sizes = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    return Case(
        lambda x: lax.broadcast(x, sizes),
        [gen(shape, dtype)],
        lambda x: np.broadcast_to(x, sizes + x.shape),
        (0,),
    )


@st.composite
def reshape_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=4))
    # regroup the dims (shuffled) into new dims, with extra 1s: same number of elements
    factors = list(draw(st.permutations(shape))) + [1] * draw(st.integers(0, 2))
    cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=3)))
    bounds = [0] + cuts + [len(factors)]
    new = tuple(int(np.prod(factors[a:b], dtype=np.int64)) for a, b in zip(bounds, bounds[1:]))
    return Case(lambda x: lax.reshape(x, new), [gen(shape, dtype)], lambda x: x.reshape(new), (0,))


@st.composite
def transpose_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=4))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return Case(
        lambda x: lax.transpose(x, perm),
        [gen(shape, dtype)],
        lambda x: np.transpose(x, perm),
        (0,),
    )


@st.composite
def squeeze_case(draw, dtype=np.float64):
    shape = list(draw(shapes(max_dims=3)))
    for p in draw(st.lists(st.integers(0, len(shape)), max_size=2)):
        shape.insert(p, 1)
    ones = [i for i, n in enumerate(shape) if n == 1]
    dims = draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    dims = tuple(d - len(shape) if draw(st.booleans()) else d for d in dims)  # some negative
    return Case(
        lambda x: lax.squeeze(x, dims),
        [gen(shape, dtype)],
        lambda x: np.squeeze(x, dims),
        (0,),
    )


@st.composite
def expand_dims_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=3))
    out_rank = len(shape) + draw(st.integers(1, 2))
    k = out_rank - len(shape)
    dims = draw(st.lists(st.integers(-out_rank, out_rank - 1), min_size=k, max_size=k))
    assume(len({d % out_rank for d in dims}) == k)
    dims = tuple(dims)
    return Case(
        lambda x: lax.expand_dims(x, dims),
        [gen(shape, dtype)],
        lambda x: np.expand_dims(x, dims),
        (0,),
    )


@st.composite
def concatenate_case(draw, dtype=np.float64):
    base = list(draw(shapes(min_dims=1, max_dims=3)))
    dim = draw(st.integers(-len(base), len(base) - 1))
    n = draw(st.integers(1, 3))
    shapes_ = []
    for _ in range(n):
        s = list(base)
        s[dim] = draw(st.integers(0, 3))
        shapes_.append(tuple(s))
    return Case(
        lambda *xs: lax.concatenate(xs, dim),
        [gen(s, dtype) for s in shapes_],
        lambda *xs: np.concatenate(xs, axis=dim),
        tuple(range(n)),
    )


def pad_reference(x: np.ndarray, pv, config) -> np.ndarray:
    """For each output position, the source element (or none): independent of the impl."""
    srcs, masks = [], []
    for n, (lo, hi, interior) in zip(x.shape, config):
        size = lo + hi + n + max(n - 1, 0) * interior
        p = np.arange(size) - lo
        ok = (p >= 0) & (p % (interior + 1) == 0) & (p // (interior + 1) < n)
        srcs.append(np.where(ok, p // (interior + 1), 0))
        masks.append(ok)
    out = np.full([len(s) for s in srcs], pv, x.dtype)
    if x.size and out.size:
        mask = np.ones(out.shape, bool)
        for k, m in enumerate(masks):
            mask &= m.reshape([-1 if i == k else 1 for i in range(x.ndim)])
        out[mask] = x[np.ix_(*srcs)][mask]
    return out


@st.composite
def pad_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=3))
    config = []
    for n in shape:
        lo, hi = draw(st.integers(-3, 3)), draw(st.integers(-3, 3))
        interior = draw(st.integers(0, 2))
        assume(lo + hi + n + max(n - 1, 0) * interior >= 0)
        config.append((lo, hi, interior))
    config = tuple(config)
    return Case(
        lambda x, pv: lax.pad(x, pv, config),
        [gen(shape, dtype), gen((), dtype)],
        lambda x, pv: pad_reference(x, pv, config),
        (0, 1),
    )


@st.composite
def rev_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=3))
    dims = tuple(draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True)))
    dims = dims if shape else ()
    return Case(lambda x: lax.rev(x, dims), [gen(shape, dtype)], lambda x: np.flip(x, dims), (0,))


CASES = {
    "broadcast_in_dim": broadcast_in_dim_case,
    "broadcast": broadcast_case,
    "reshape": reshape_case,
    "transpose": transpose_case,
    "squeeze": squeeze_case,
    "expand_dims": expand_dims_case,
    "concatenate": concatenate_case,
    "pad": pad_case,
    "rev": rev_case,
}


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_matches_numpy_in_every_dtype(name, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    run_eager(data.draw(CASES[name](dtype)), seed(data))


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_grads_match_finite_differences(name, data):
    run_grads(data.draw(CASES[name]()), seed(data))


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_vmap_matches_loop(name, data):
    case = data.draw(CASES[name](data.draw(st.sampled_from([np.float32, np.int32, np.bool_]))))
    run_vmap(case, seed(data), draw_in_axes(data, case), data.draw(st.integers(1, 3)))


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_grads_of_vmap(name, data):
    case = data.draw(CASES[name]())
    case = vmapped(case, draw_in_axes(data, case), data.draw(st.integers(1, 2)))
    run_grads(case, seed(data), order=1)


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_jit_matches_eager(name, data):
    run_jit(data.draw(CASES[name]()), seed(data))


# ---- specific behaviour ------------------------------------------------------------------------


@given(shape=shapes(min_dims=1, max_dims=3), data=st.data())
def test_iota_counts_along_dimension(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    dtype = data.draw(st.sampled_from([d for d in DTYPES if d != np.bool_]))
    got = lax.iota(dtype, shape, dim)
    ax = dim % len(shape)
    want = np.broadcast_to(
        np.arange(shape[ax]).reshape([-1 if i == ax else 1 for i in range(len(shape))]), shape
    ).astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(blu.jit(lambda: lax.iota(dtype, shape, dim))()), want)


def test_iota_1d_and_under_transforms():
    np.testing.assert_array_equal(np.asarray(lax.iota(np.int32, 4)), np.arange(4))
    # inside vmap/grad iota is a constant of the transform
    out = blu.vmap(lambda x: lax.add(x, lax.iota(np.float64, 3)))(np.zeros((2, 3)))
    np.testing.assert_array_equal(np.asarray(out), np.tile(np.arange(3.0), (2, 1)))
    g = blu.grad(lambda x: lax.reduce_sum(lax.mul(x, lax.iota(np.float64, 3))))(np.ones(3))
    np.testing.assert_array_equal(np.asarray(g), np.arange(3.0))


def test_full_and_full_like():
    np.testing.assert_array_equal(np.asarray(lax.full((2, 3), 7, np.int64)), np.full((2, 3), 7))
    x = np.zeros((2, 0, 3), np.float16)
    out = lax.full_like(x, 1.5)
    assert out.shape == (2, 0, 3) and out.dtype == np.float16
    weak = lax.full((2,), 1.0)
    assert weak.dtype == np.float32 and weak.weak_type


@given(shape=shapes(min_dims=1, max_dims=3), data=st.data())
def test_pad_matches_np_pad(shape, data):
    config = [(data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2)), 0) for _ in shape]
    x = rand(seed(data), shape, np.float32)
    want = np.pad(x, [(lo, hi) for lo, hi, _ in config], constant_values=-7.0)
    np.testing.assert_array_equal(np.asarray(lax.pad(x, -7.0, config)), want)


def test_pad_negative_and_interior_example():
    x = np.arange(1.0, 5.0)
    got = lax.pad(x, 0.0, [(-1, 2, 1)])  # 1 0 2 0 3 0 4 -> drop the 1, add 2 zeros
    np.testing.assert_array_equal(np.asarray(got), [0, 2, 0, 3, 0, 4, 0, 0])


def test_pad_gradient_of_padding_value_counts_padded_positions():
    x = np.ones((2, 3))
    f = lambda pv: lax.reduce_sum(lax.pad(x, pv, [(1, 0, 1), (-1, 2, 0)]))
    g = blu.grad(f)(np.float64(0.5))
    # output (4, 4): 16 positions, of which 2 * 2 hold elements of x
    assert float(g) == 12.0


def test_pad_with_batched_padding_value():
    x = np.arange(6.0).reshape(2, 3)
    pvs = np.array([-1.0, -2.0])
    got = blu.vmap(lambda pv: lax.pad(x, pv, [(1, -1, 1), (0, 1, 0)]))(pvs)
    for i, pv in enumerate(pvs):
        np.testing.assert_array_equal(
            np.asarray(got)[i], pad_reference(x, pv, [(1, -1, 1), (0, 1, 0)])
        )


def test_transposes_are_adjoint_under_jit():
    # <ct, f(x)> == <f^T(ct), x> for the linear shape ops, through jit(vjp)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 1))

    def f(x):
        y = lax.squeeze(lax.transpose(x, (2, 1, 0)), (0,))
        y = lax.concatenate([lax.rev(y, (0,)), lax.pad(y, 0.0, [(1, -1, 2), (0, 0, 0)])], 0)
        return lax.broadcast(y, (2,))

    out, f_vjp = blu.vjp(f, x)
    ct = rng.standard_normal(np.shape(out))
    (ct_x,) = blu.jit(f_vjp)(ct)
    np.testing.assert_allclose(np.sum(ct * np.asarray(out)), np.sum(np.asarray(ct_x) * x))


# ---- errors name the shapes and the user's line ------------------------------------------------


def test_transpose_bad_permutation():
    x = np.zeros((2, 3))
    with pytest.raises(BluValueError) as e:
        lax.transpose(x, (0, 0))
    check_error_names(e, "f64[2,3]", "(0, 0)")
    with pytest.raises(BluValueError) as e:
        lax.transpose(x, (0,))  # too short, even though it looks like the identity
    check_error_names(e, "f64[2,3]", "(0,)")


def test_reshape_bad_sizes():
    with pytest.raises(BluShapeError) as e:
        lax.reshape(np.zeros((2, 3), np.float32), (4, 2))
    check_error_names(e, "f32[2,3]", "(4, 2)")


def test_concatenate_mismatch_names_every_shape():
    xs = [np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((3, 3))]
    with pytest.raises(BluShapeError) as e:
        lax.concatenate(xs, 1)
    check_error_names(e, "f64[2,3]", "f64[2,4]", "f64[3,3]", "dimension 1")
    with pytest.raises(BluTypeError) as e:
        lax.concatenate([np.zeros(2), np.zeros(2, np.int32)], 0)
    check_error_names(e, "f64[2]", "i32[2]")


def test_concatenate_error_under_jit_points_at_user_line():
    with pytest.raises(BluShapeError) as e:
        blu.jit(lambda a, b: lax.concatenate([a, b], 0))(np.zeros((1, 2)), np.zeros((1, 3)))
    check_error_names(e, "f64[1,2]", "f64[1,3]")


def test_squeeze_non_unit_dimension():
    with pytest.raises(BluShapeError) as e:
        lax.squeeze(np.zeros((1, 2)), (1,))
    check_error_names(e, "f64[1,2]", "(1,)")


def test_broadcast_in_dim_incompatible():
    with pytest.raises(BluShapeError) as e:
        lax.broadcast_in_dim(np.zeros((3,)), (2, 4), (1,))
    check_error_names(e, "f64[3]", "(2, 4)")


def test_pad_errors():
    x = np.zeros((2, 3))
    with pytest.raises(BluShapeError) as e:
        lax.pad(x, 0.0, [(0, 0, 0)])
    check_error_names(e, "f64[2,3]")
    with pytest.raises(BluShapeError) as e:
        lax.pad(x, 0.0, [(-2, -1, 0), (0, 0, 0)])
    check_error_names(e, "f64[2,3]", "(-2, -1, 0)")
    with pytest.raises(BluTypeError) as e:
        lax.pad(x, np.float32(0), [(0, 0, 0), (0, 0, 0)])
    check_error_names(e, "f64[2,3]", "f32[]")


def test_rev_and_iota_errors():
    with pytest.raises(BluValueError) as e:
        lax.rev(np.zeros((2, 3)), (2,))
    check_error_names(e, "rank 2")
    with pytest.raises(BluValueError) as e:
        lax.iota(np.int32, (2, 3), 2)
    check_error_names(e, "(2, 3)")


def test_reshape_dimensions_transposes_first():
    # JAX's reshape(x, new_sizes, dimensions): the axes permuted by dimensions, then reshaped
    x = np.arange(24.0).reshape(2, 3, 4)
    want = np.transpose(x, (2, 0, 1)).reshape(4, 6)
    for fn in (lax.reshape, blu.jit(lax.reshape, static_argnums=(1, 2))):
        np.testing.assert_array_equal(np.asarray(fn(x, (4, 6), (2, 0, 1))), want)
    t = np.random.default_rng(0).normal(size=(2, 3, 4))
    _, dt = blu.jvp(lambda v: lax.reshape(v, (4, 6), (2, 0, 1)), (x,), (t,))
    np.testing.assert_array_equal(np.asarray(dt), np.transpose(t, (2, 0, 1)).reshape(4, 6))


def test_full_like_shape_argument():
    # JAX's full_like(x, fill_value, dtype=None, shape=None): x's dtype with another shape
    x = np.ones(3, np.int8)
    got = lax.full_like(x, 2, shape=(2, 2))
    assert got.dtype == np.int8 and np.asarray(got).tolist() == [[2, 2], [2, 2]]
    got = blu.jit(lambda v: lax.full_like(v, 2.5, np.float32, (4,)))(x)
    assert got.dtype == np.float32 and np.asarray(got).tolist() == [2.5] * 4
