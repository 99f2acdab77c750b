"""blu.numpy under transformations: derivatives of composite functions against finite
differences (check_grads), vmap against per-slice loops (check_vmap), and a table of every
public function under jit against eager evaluation (check_jit)."""

import numpy as np
import pytest
from helpers import arrays, check_grads, check_jit, check_vmap, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp

# ---- derivatives -------------------------------------------------------------------------------

R = np.random.default_rng(0)


def _r(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape)


GRADS = [
    ("mean", lambda x: bnp.mean(x, axis=1), [_r(3, 4)]),
    ("mean_keepdims", lambda x: bnp.mean(x, axis=(0, 2), keepdims=True), [_r(2, 3, 4)]),
    ("var", lambda x: bnp.var(x, axis=0), [_r(5, 3)]),
    ("var_ddof", lambda x: bnp.var(x, ddof=1), [_r(4, 3)]),
    ("std", lambda x: bnp.std(x, axis=-1), [_r(3, 5)]),
    ("einsum_matmul", lambda a, b: bnp.einsum("ij,jk->ik", a, b), [_r(2, 3), _r(3, 4)]),
    ("einsum_batch", lambda a, b: bnp.einsum("bij,bkj->bik", a, b), [_r(2, 2, 3), _r(2, 4, 3)]),
    ("einsum_diag", lambda a: bnp.einsum("ii->i", a), [_r(3, 3)]),
    ("einsum_three", lambda a, b, c: bnp.einsum("i,ij,j", a, b, c), [_r(2), _r(2, 3), _r(3)]),
    ("einsum_ellipsis", lambda a, b: bnp.einsum("...ij,jk", a, b), [_r(2, 2, 3), _r(3, 2)]),
    ("getitem_slices", lambda x: x[1:, ::-2, None], [_r(3, 5)]),
    ("getitem_ints", lambda x: x[np.array([0, 2, 2, -1])], [_r(4, 2)]),
    ("getitem_mixed", lambda x: x[:, np.array([1, 1]), 0], [_r(2, 3, 2)]),
    ("getitem_mask", lambda x: x[np.array([True, False, True])], [_r(3, 2)]),
    ("at_add", lambda x, v: bnp.asarray(x).at[np.array([0, 0, 2])].add(v), [_r(3, 2), _r(3, 2)]),
    ("at_set", lambda x, v: bnp.asarray(x).at[1:, 0].set(v), [_r(3, 2), _r(2)]),
    ("at_set_strided", lambda x, v: bnp.asarray(x).at[::2].set(v), [_r(5), _r(3)]),
    (
        "at_multiply",
        lambda x, v: bnp.asarray(x).at[np.array([1, 1, 0])].multiply(v),
        [_r(3), _r(3)],
    ),
    ("at_max", lambda x, v: bnp.asarray(x).at[np.array([2, 0])].max(v), [_r(3), _r(2)]),
    ("where", lambda c, x, y: bnp.where(c > 0, x, y), [_r(3, 1), _r(3, 4), _r(4)]),
    ("matmul_broadcast", lambda a, b: a @ b, [_r(2, 1, 2, 3), _r(3, 3, 2)]),
    ("matmul_vec", lambda a, b: bnp.matmul(a, b), [_r(3), _r(2, 3, 2)]),
    ("logaddexp", bnp.logaddexp, [_r(3, 2), _r(2)]),
    ("sinh_arcsinh", lambda x: bnp.arcsinh(bnp.sinh(x) * 3.0), [_r(4)]),
    ("arcsin_arccos", lambda x: bnp.arcsin(x) + 2 * bnp.arccos(x), [_r(4, lo=-0.9, hi=0.9)]),
    ("hypot", bnp.hypot, [_r(3), _r(3)]),
    ("power", lambda x, y: bnp.power(x, y), [_r(3, lo=0.5, hi=2), _r(3)]),
    ("cbrt", bnp.cbrt, [_r(4, lo=0.5, hi=3)]),
    ("cumsum_cumprod", lambda x: bnp.cumsum(x, 0) + bnp.cumprod(x, 1), [_r(3, 3)]),
    ("sort", lambda x: bnp.sort(x, 0), [_r(4, 2)]),
    ("take_along_axis", lambda x: bnp.take_along_axis(x, np.array([[2], [0]]), 1), [_r(2, 3)]),
    ("take", lambda x: bnp.take(x, np.array([1, -1]), axis=1), [_r(2, 3)]),
    ("pad_roll", lambda x: bnp.roll(bnp.pad(x, 1), 2, 0), [_r(2, 3)]),
    (
        "concat_split",
        lambda x, y: bnp.split(bnp.concatenate([x, y], 1), [1], 1)[1],
        [_r(2, 2), _r(2, 1)],
    ),
    ("stack_tile_repeat", lambda x: bnp.repeat(bnp.tile(bnp.stack([x, x]), 2), 2, 0), [_r(2)]),
    ("clip_max", lambda x: bnp.clip(x, -1.0, 1.0) + bnp.maximum(x, 0.3), [_r(5)]),
    ("norm", lambda x: bnp.linalg.norm(x, axis=1), [_r(3, 2)]),
    ("norm_inf_fro", lambda x: bnp.linalg.norm(x, np.inf) + bnp.linalg.norm(x, "fro"), [_r(3, 2)]),
    ("linspace", lambda a, b: bnp.linspace(a, b, 4), [_r(2), _r(2)]),
    ("trace_diag", lambda x: bnp.trace(x) + bnp.sum(bnp.diag(bnp.diagonal(x, 1))), [_r(3, 3)]),
    ("prod", lambda x: bnp.prod(x, 1), [_r(2, 3)]),
    ("max_min", lambda x: bnp.max(x, 0) - bnp.min(x, 1)[:, None], [_r(3, 3)]),
    (
        "true_divide_mod",
        lambda x, y: x / y + bnp.mod(x, 1.5),
        [_r(3, lo=0.1, hi=1.4), _r(3, lo=1, hi=2)],
    ),
    ("quantile", lambda x: bnp.quantile(x, np.array([0.3, 0.5]), 1), [_r(2, 5)]),
    ("kron_outer", lambda a, b: bnp.kron(a, b) + bnp.outer(a, b).sum(), [_r(2, 2), _r(2, 2)]),
    ("tensordot", lambda a, b: bnp.tensordot(a, b, ((0, 1), (1, 0))), [_r(2, 3, 2), _r(3, 2)]),
]


@pytest.mark.parametrize("name,f,args", GRADS, ids=[g[0] for g in GRADS])
def test_grads_against_finite_differences(name, f, args):
    check_grads(f, args)


@pytest.mark.parametrize("name,f,args", GRADS[::3], ids=[g[0] for g in GRADS[::3]])
def test_jit_of_grad_matches_grad(name, f, args):
    def loss(*xs):
        return bnp.sum(bnp.sin(f(*xs)))

    argnums = tuple(range(len(args)))
    want = blu.grad(loss, argnums=argnums)(*args)
    got = blu.jit(blu.grad(loss, argnums=argnums))(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)


def test_logaddexp_gradient_is_split_at_ties():
    gx, gy = blu.grad(lambda x, y: bnp.logaddexp(x, y), argnums=(0, 1))(1.5, 1.5)
    assert abs(float(gx) - 0.5) < 1e-6 and abs(float(gy) - 0.5) < 1e-6
    g = blu.grad(lambda x: bnp.sum(bnp.logaddexp(x, -x)))(np.array([100.0, -100.0, 0.0]))
    np.testing.assert_allclose(np.asarray(g), [1.0, -1.0, 0.0], atol=1e-12)


def test_rounding_functions_have_zero_gradient():
    for f in (
        bnp.round,
        bnp.floor,
        bnp.ceil,
        bnp.trunc,
        bnp.sign,
        lambda x: bnp.floor_divide(x, 0.7),
    ):
        g = blu.grad(lambda x: bnp.sum(f(x)))(np.array([0.3, 1.7, -2.2]))
        np.testing.assert_array_equal(np.asarray(g), 0.0)


# ---- vmap --------------------------------------------------------------------------------------

VMAPS = [
    ("getitem_basic", lambda x: x[1:, None, ::-1], [(3, 4, 2)], [0]),
    ("getitem_int_array", lambda x: x[np.array([2, 0, 2]), 1], [(3, 4, 2)], [1]),
    ("getitem_batched_index", lambda x, i: x[i, :], [(3, 4, 2), None], [0, 0]),
    ("getitem_batched_scalar", lambda x, i: x[:, i], [(3, 4, 2), None], [2, 0]),
    ("einsum", lambda a, b: bnp.einsum("ij,jk->ik", a, b), [(3, 2, 4), (3, 4, 5)], [0, 0]),
    ("einsum_unbatched", lambda a, b: bnp.einsum("ij,kj", a, b), [(2, 3, 4), (5, 4)], [1, None]),
    ("sum_axis", lambda x: bnp.sum(x, axis=1), [(3, 4, 5)], [2]),
    ("mean_var", lambda x: bnp.mean(x) + bnp.var(x, 0), [(3, 4, 5)], [1]),
    ("max_argmax", lambda x: bnp.max(x, -1) + bnp.argmax(x, 0).sum(), [(3, 4, 5)], [0]),
    ("matmul", lambda a, b: a @ b, [(3, 2, 4), (4, 5)], [0, None]),
    ("sort_argsort", lambda x: bnp.sort(x) + bnp.argsort(x, 0), [(3, 4, 5)], [1]),
    ("at_add", lambda x, i, v: bnp.asarray(x).at[i].add(v), [(3, 6), None, (3, 2)], [0, 0, 0]),
    ("at_set_window", lambda x, v: bnp.asarray(x).at[1:3].set(v), [(3, 6), (3, 2)], [0, 0]),
    ("at_traced_scalar", lambda x, i: bnp.asarray(x).at[i].multiply(3.0), [(3, 6), None], [0, 0]),
    ("take_along_axis", lambda x: bnp.take_along_axis(x, np.array([[1, 0]]), 1), [(2, 3, 4)], [2]),
    ("cumsum_where", lambda x: bnp.where(x > 0, bnp.cumsum(x, 0), 0.0), [(3, 4)], [1]),
    ("concatenate", lambda x, y: bnp.concatenate([x, y], 0), [(2, 3), (3, 1)], [1, 0]),
]


@pytest.mark.parametrize("name,f,arg_shapes,in_axes", VMAPS, ids=[v[0] for v in VMAPS])
def test_vmap_against_loop(name, f, arg_shapes, in_axes):
    rng = np.random.default_rng(1)
    args = []
    for s in arg_shapes:
        if s is None:  # an integer index, batched
            n = arg_shapes[0][in_axes[0]]
            args.append(rng.integers(-2, 3, size=(n, 2) if name == "at_add" else (n,)))
        else:
            args.append(rng.standard_normal(s))
    check_vmap(f, args, in_axes)


@given(st.data())
def test_vmap_getitem_random(data):
    shape = data.draw(shapes(min_dims=2, max_dims=3, min_side=1))
    x = data.draw(arrays(shape))
    ax = data.draw(st.integers(0, len(shape) - 1))
    n_inner = shape[1] if ax == 0 else shape[0]
    i = data.draw(st.integers(-n_inner, n_inner - 1))
    j = np.array(data.draw(st.lists(st.integers(-n_inner, n_inner - 1), min_size=1, max_size=3)))
    check_vmap(lambda x: x[i, ..., None], [x], [ax])
    check_vmap(lambda x: x[j], [x], [ax])
    if len(shape) == 3:
        check_vmap(lambda x: x[j, ::-1], [x], [ax])
        check_vmap(lambda x: bnp.asarray(x).at[j, 1:].add(1.0), [x], [ax])


# ---- jit of everything -------------------------------------------------------------------------


def _a(*shape, dtype=np.float32, lo=-2.0, hi=2.0):
    return np.random.default_rng(len(shape) + sum(shape)).uniform(lo, hi, shape).astype(dtype)


def _i(*shape, lo=0, hi=3, dtype=np.int32):
    return np.random.default_rng(7 + sum(shape)).integers(lo, hi, shape).astype(dtype)


_UNARY = """negative positive abs fabs sign sqrt cbrt square reciprocal exp exp2 expm1 log log2
log10 log1p sin cos tan arcsin arccos arctan sinh cosh tanh arcsinh arccosh arctanh deg2rad
rad2deg floor ceil trunc rint round isfinite isnan isinf signbit logical_not nan_to_num ravel
transpose squeeze flip atleast_1d atleast_2d atleast_3d sort argsort sum prod mean var std max
min argmax argmin all any cumsum cumprod ptp count_nonzero median nansum nanmean nanmax nanmin
copy zeros_like ones_like empty_like real conj""".split()
_BINARY = """add subtract multiply divide true_divide floor_divide mod remainder fmod power
float_power arctan2 hypot maximum minimum fmax fmin logaddexp logaddexp2 copysign equal
not_equal less less_equal greater greater_equal logical_and logical_or logical_xor isclose
allclose array_equal matmul dot inner outer vdot kron""".split()
_INT_BINARY = (
    "bitwise_and bitwise_or bitwise_xor left_shift right_shift floor_divide mod power".split()
)

JITS = (
    [(n, getattr(bnp, n), [_a(3, 3, lo=1.1, hi=2.0)]) for n in _UNARY]
    + [(n, getattr(bnp, n), [_a(3, 3, lo=0.5), _a(3, 3, lo=0.5)]) for n in _BINARY]
    + [(n + "_int", getattr(bnp, n), [_i(4, hi=9), _i(4, lo=1)]) for n in _INT_BINARY]
    + [
        ("invert", bnp.invert, [_i(5)]),
        ("divmod", bnp.divmod, [_a(4), _a(4, lo=0.5)]),
        ("where", bnp.where, [_a(3) > 0, _a(3), _i(3)]),
        ("clip", lambda x: bnp.clip(x, -1, 1), [_a(4)]),
        ("reshape", lambda x: bnp.reshape(x, (-1, 2)), [_a(2, 3)]),
        ("moveaxis_swap", lambda x: bnp.swapaxes(bnp.moveaxis(x, 0, -1), 0, 1), [_a(2, 3, 4)]),
        ("expand_dims", lambda x: bnp.expand_dims(x, (0, 2)), [_a(2, 3)]),
        ("broadcast", lambda x, y: bnp.broadcast_arrays(x, y), [_a(3, 1), _a(4)]),
        ("broadcast_to", lambda x: bnp.broadcast_to(x, (2, 3)), [_a(3)]),
        (
            "stacks",
            lambda x: [
                bnp.stack([x, x], 1),
                bnp.hstack([x, x]),
                bnp.vstack([x, x]),
                bnp.dstack([x, x]),
                bnp.column_stack([x, x]),
            ],
            [_a(3)],
        ),
        (
            "splits",
            lambda x: bnp.array_split(x, 3) + bnp.hsplit(x, 2) + bnp.vsplit(x, 2),
            [_a(4, 2)],
        ),
        ("tile_repeat", lambda x: [bnp.tile(x, (2, 1)), bnp.repeat(x, 2, 1)], [_a(2, 3)]),
        (
            "roll_pad",
            lambda x: [bnp.roll(x, 1), bnp.pad(x, 1, "edge"), bnp.pad(x, (1, 2))],
            [_a(2, 3)],
        ),
        (
            "take",
            lambda x, i: [bnp.take(x, i, 1), bnp.take_along_axis(x, i[None], 1)],
            [_a(2, 3), _i(3)],
        ),
        (
            "diagonal",
            lambda x: [bnp.diagonal(x, 1), bnp.diag(x), bnp.trace(x), bnp.tril(x), bnp.triu(x, 1)],
            [_a(3, 3)],
        ),
        ("astype", lambda x: [x.astype(bnp.int8), bnp.astype(x, bnp.bfloat16)], [_a(3)]),
        ("einsum", lambda a, b: bnp.einsum("bij,bjk->bki", a, b), [_a(2, 2, 3), _a(2, 3, 2)]),
        ("tensordot", lambda a, b: bnp.tensordot(a, b, 1), [_a(2, 3), _a(3, 2)]),
        (
            "getitem",
            lambda x, i: [x[i], x[1:, ::-1], x[None, ..., 0], x[x.shape[0] - 1]],
            [_a(3, 4), _i(2)],
        ),
        (
            "at",
            lambda x, i: [
                x.at[i].set(0.0),
                x.at[i].add(1.0),
                x.at[i].multiply(2.0),
                x.at[i].min(0.0),
                x.at[1:].max(1.0),
                x.at[i].get(),
            ],
            [_a(3, 4), _i(5)],
        ),
        (
            "creation",
            lambda x: [
                bnp.zeros((2, 2)),
                bnp.ones(3, bnp.int8),
                bnp.full((2,), 3.0),
                bnp.arange(5),
                bnp.linspace(0, 1, 5),
                bnp.eye(3, k=1),
                bnp.identity(2),
                bnp.tri(3),
                bnp.full_like(x, 2),
                bnp.logspace(0, 1, 3),
                bnp.meshgrid(x, x)[0],
                bnp.array([1.0, 2.0]) * x[0],
                bnp.empty(2),
            ],
            [_a(3)],
        ),
        ("searchsorted", lambda a, v: bnp.searchsorted(a, v), [np.sort(_a(6)), _a(3)]),
        ("quantile", lambda x: bnp.quantile(x, np.array([0.1, 0.9]), axis=0), [_a(5, 2)]),
        ("average", lambda x, w: bnp.average(x, 0, w), [_a(3, 2), _a(3, 2, lo=0.5)]),
        (
            "cumulative",
            lambda x: [bnp.cumulative_sum(x, axis=0), bnp.cumulative_prod(x, axis=0)],
            [_a(4)],
        ),
        (
            "norm",
            lambda x: [bnp.linalg.norm(x), bnp.linalg.norm(x, 1, axis=0), bnp.linalg.norm(x, 3, 1)],
            [_a(3, 2)],
        ),
        ("sum_where", lambda x: bnp.sum(x, 0, where=x > 0, initial=1.0), [_a(3, 2)]),
        ("concatenate", lambda x, y: bnp.concatenate([x, y], None), [_a(2, 2), _i(3)]),
    ]
)


@pytest.mark.parametrize("name,f,args", JITS, ids=[j[0] for j in JITS])
def test_jit_matches_eager(name, f, args):
    with np.errstate(all="ignore"):
        check_jit(f, [bnp.asarray(a) for a in args])
