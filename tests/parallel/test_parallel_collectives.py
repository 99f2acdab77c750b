"""Collectives over named axes on virtual CPU devices, against a numpy oracle.

Each collective runs inside ``blu.shard`` on a 1-d or 2-d mesh with every device's output stacked
(out spec over all mesh axes), and is compared with a per-device numpy computation over the
device's group (the devices that differ only along the collective's axes, ordered by their index
over those axes, first name major). Derivatives against finite differences (float64), vmap
against a loop, jit against eager; every dtype each collective accepts.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluError, BluShapeError, BluTypeError, BluValueError
from blu.parallel import (
    Mesh,
    P,
    all_gather,
    all_to_all,
    axis_index,
    axis_size,
    devices,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
    shard,
)
from tests.helpers import arrays, check_grads, check_jit, check_vmap, rng_for


@pytest.fixture(autouse=True)
def _eight_devices(set_flag):
    set_flag("num_cpu_devices", 8)


MESH_SHAPES = [(4,), (2,), (1,), (2, 4), (4, 2), (2, 2), (1, 2)]


def _mesh(shape, names=("a", "b")):
    devs = np.empty(math.prod(shape), dtype=object)
    devs[:] = devices()[: math.prod(shape)]
    return Mesh(devs.reshape(shape), names[: len(shape)])


def _groups(mesh, names):
    """coords -> (member coords in member order, index of this device)."""
    axes = mesh.axis_names
    out = {}
    for c in itertools.product(*[range(s) for s in mesh.devices.shape]):
        cd = dict(zip(axes, c))
        members = [
            m
            for m in itertools.product(*[range(s) for s in mesh.devices.shape])
            if all(dict(zip(axes, m))[n] == cd[n] for n in axes if n not in names)
        ]

        def lin(m):
            md, i = dict(zip(axes, m)), 0
            for n in names:
                i = i * mesh.shape[n] + md[n]
            return i

        members.sort(key=lin)
        out[c] = (members, members.index(c))
    return out


def run_stacked(fn, mesh, x):
    """Each device's fn(block) stacked in device order (blocks: x split on dim 0 over all axes)."""
    allax = tuple(mesh.axis_names)
    f = shard(lambda b: fn(b)[None], mesh, P(allax), P(allax))
    return np.asarray(f(x))


def oracle(op, mesh, names, x):
    n_dev = mesh.size
    blocks = np.split(np.asarray(x), n_dev)  # device order = mesh.devices.flat order
    coords = list(itertools.product(*[range(s) for s in mesh.devices.shape]))
    by_c = dict(zip(coords, blocks))
    groups = _groups(mesh, names)
    return np.stack([op([by_c[m] for m in groups[c][0]], groups[c][1]) for c in coords])


@st.composite
def mesh_names_block(draw, block_dims=(0, 3), lead_group=False, lead_exact=False):
    shape = draw(st.sampled_from(MESH_SHAPES))
    mesh = _mesh(shape)
    k = draw(st.integers(1, len(shape)))
    names = tuple(draw(st.permutations(list(mesh.axis_names)))[:k])
    rank = draw(st.integers(*block_dims))
    bshape = [draw(st.integers(0, 3)) for _ in range(rank)]
    group = math.prod(mesh.shape[n] for n in names)
    if lead_group or lead_exact:  # dim 0 of a block is split over the group
        bshape[0] = group * (1 if lead_exact else draw(st.integers(1, 2)))
    if rank == 0:
        bshape = [1]
    x = draw(arrays((mesh.size * bshape[0],) + tuple(bshape[1:]) if bshape else (mesh.size,)))
    return mesh, names, x


# ---- values against the oracle ------------------------------------------------------------------


@given(mesh_names_block())
def test_psum_pmean_pmax_pmin(args):
    mesh, names, x = args
    for fn, op in (
        (psum, lambda v, i: np.sum(v, 0)),
        (pmean, lambda v, i: np.mean(v, 0)),
        (pmax, lambda v, i: np.max(v, 0)),
        (pmin, lambda v, i: np.min(v, 0)),
    ):
        got = run_stacked(lambda b: fn(b, names), mesh, x)
        np.testing.assert_allclose(got, oracle(op, mesh, names, x), rtol=1e-12, atol=1e-12)


@given(mesh_names_block(block_dims=(1, 3)), st.booleans(), st.data())
def test_all_gather(args, tiled, data):
    mesh, names, x = args
    ndim = x.ndim
    axis = data.draw(st.integers(0, ndim - 1 if tiled else ndim))
    got = run_stacked(lambda b: all_gather(b, names, axis=axis, tiled=tiled), mesh, x)
    op = (lambda v, i: np.concatenate(v, axis)) if tiled else (lambda v, i: np.stack(v, axis))
    np.testing.assert_array_equal(got, oracle(op, mesh, names, x))


@given(st.booleans(), st.data())
def test_psum_scatter(tiled, data):
    mesh, names, x = data.draw(mesh_names_block((1, 3), lead_group=tiled, lead_exact=not tiled))
    n = math.prod(mesh.shape[m] for m in names)
    got = run_stacked(lambda b: psum_scatter(b, names, tiled=tiled), mesh, x)

    def op(v, i):
        s = np.sum(v, 0)
        return np.split(s, n)[i] if tiled else s[i]

    np.testing.assert_allclose(got, oracle(op, mesh, names, x), rtol=1e-12, atol=1e-12)


@given(mesh_names_block(), st.data())
def test_ppermute(args, data):
    # a tuple of names (JAX's): perm indices over their product, first name major (it was
    # "ppermute: takes one axis name")
    mesh, names, x = args
    n = math.prod(mesh.shape[m] for m in names)
    dsts = data.draw(st.permutations(range(n)))
    keep = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    perm = [(s, d) for s, d, k in zip(range(n), dsts, keep) if k]
    name = names[0] if len(names) == 1 and data.draw(st.booleans()) else names
    got = run_stacked(lambda b: ppermute(b, name, perm), mesh, x)
    src_of = {d: s for s, d in perm}

    def op(v, i):
        return v[src_of[i]] if i in src_of else np.zeros_like(v[i])

    np.testing.assert_array_equal(got, oracle(op, mesh, names, x))


@given(mesh_names_block(block_dims=(2, 3)), st.booleans(), st.data())
def test_all_to_all(args, tiled, data):
    # a tuple of names (JAX's): chunk j goes to the member of index j over their product
    mesh, names, x = args
    n = math.prod(mesh.shape[m] for m in names)
    block = (x.shape[0] // mesh.size,) + x.shape[1:]
    split = data.draw(st.integers(0, len(block) - 1))
    concat = data.draw(st.integers(0, len(block) - 1))
    bshape = list(block)
    bshape[split] = n * (data.draw(st.integers(1, 2)) if tiled else 1)
    x = rng_for(x).standard_normal((mesh.size * bshape[0],) + tuple(bshape[1:]))
    got = run_stacked(lambda b: all_to_all(b, names, split, concat, tiled=tiled), mesh, x)

    def op(v, i):
        chunks = [np.split(u, n, axis=split)[i] for u in v]  # what member j sends to me
        if tiled:
            return np.concatenate(chunks, concat)
        return np.stack([np.squeeze(c, split) for c in chunks], concat)

    np.testing.assert_array_equal(got, oracle(op, mesh, names, x))


@given(mesh_names_block(), st.data())
def test_axis_index_groups(args, data):
    # JAX's axis_index_groups: the reduction / gather within each group of indices over the
    # names (it was a TypeError: unexpected keyword argument)
    mesh, names, x = args
    n = math.prod(mesh.shape[m] for m in names)
    order = data.draw(st.permutations(range(n)))
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=3))) if n > 1 else []
    groups = [list(order[a:b]) for a, b in zip([0, *cuts], [*cuts, n])]
    k = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    equal = [list(order[j : j + k]) for j in range(0, n, k)]

    def mine(v, i, gs):
        return [v[j] for g in gs if i in g for j in g]

    for fn, op in (
        (psum, lambda v: np.sum(v, 0)),
        (pmean, lambda v: np.mean(v, 0)),
        (pmax, lambda v: np.max(v, 0)),
        (pmin, lambda v: np.min(v, 0)),
    ):
        got = run_stacked(lambda b: fn(b, names, axis_index_groups=groups), mesh, x)
        want = oracle(lambda v, i: op(mine(v, i, groups)), mesh, names, x)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    got = run_stacked(lambda b: all_gather(b, names, axis_index_groups=equal), mesh, x)
    np.testing.assert_array_equal(got, oracle(lambda v, i: np.stack(mine(v, i, equal)), mesh,
                                              names, x))  # fmt: skip


def test_axis_index_groups_grad_and_errors():
    mesh = _mesh((4,))
    groups = [[0, 3], [2, 1]]
    x = np.linspace(-1, 1, 8)
    f = shard(lambda b: psum(b * b, "a", axis_index_groups=groups), mesh, P("a"), P("a"))
    check_grads(f, [x], order=1)
    # d/dx of sum over devices of the group sums: each member's x counts once per member
    g = blu.grad(lambda v: f(v).sum())(x)
    np.testing.assert_allclose(np.asarray(g), 2 * 2 * x, rtol=1e-12)
    run = lambda fn: shard(fn, mesh, P("a"), P("a"))(x)  # noqa: E731
    with pytest.raises(BluValueError, match=r"axis_index_groups .* exactly once"):
        run(lambda b: psum(b, "a", axis_index_groups=[[0, 1], [1, 2, 3]]))
    with pytest.raises(BluValueError, match=r"axis_index_groups .* same size"):
        run(lambda b: all_gather(b, "a", axis_index_groups=[[0], [1, 2, 3]]))
    with pytest.raises(BluTypeError, match="axis_index_groups must be a list of lists"):
        run(lambda b: pmax(b, "a", axis_index_groups=[0, 1, 2, 3]))


def test_vmap_spmd_axis_name():
    # JAX's spmd_axis_name only shards the mapped axis: accepted where nothing is partitioned
    # (it was a TypeError), refused inside a partitioned jit
    x = np.arange(6.0).reshape(3, 2)
    got = blu.vmap(lambda r: (r * r).sum(), spmd_axis_name="a")(x)
    np.testing.assert_allclose(np.asarray(got), (x * x).sum(1), rtol=1e-12)
    mesh = _mesh((2,))
    xs = blu.device_put(np.ones((4, 2)), blu.parallel.NamedSharding(mesh, P("a")))
    with pytest.raises(BluValueError, match="spmd_axis_name='a' inside a jit partitioned"):
        blu.jit(lambda v: blu.vmap(lambda r: r.sum(), spmd_axis_name="a")(v))(xs)


@given(st.sampled_from(MESH_SHAPES), st.data())
def test_axis_index(shape, data):
    mesh = _mesh(shape)
    names = tuple(data.draw(st.permutations(list(mesh.axis_names))))
    x = np.zeros((mesh.size,))
    got = run_stacked(lambda b: axis_index(names), mesh, x)
    np.testing.assert_array_equal(got, oracle(lambda v, i: np.int32(i), mesh, names, x))
    assert got.dtype == np.int32
    # axis_size of a tuple (or list) of names: the size of the group, as JAX's
    some = names[: data.draw(st.integers(1, len(names)))]
    for ns in (some, list(some)):
        got = run_stacked(lambda b: b.sum() * 0 + axis_size(ns), mesh, x)
        np.testing.assert_array_equal(got, oracle(lambda v, i: float(len(v)), mesh, some, x))


# ---- derivatives, vmap, jit ---------------------------------------------------------------------

COLLECTIVES = {
    "psum": lambda b, ns: psum(b, ns),
    "pmean": lambda b, ns: pmean(b, ns),
    "pmax": lambda b, ns: pmax(b, ns),
    "all_gather": lambda b, ns: all_gather(b, ns, axis=1, tiled=True),
    "psum_scatter": lambda b, ns: psum_scatter(b, ns, tiled=True),
    "ppermute": lambda b, ns: ppermute(b, ns[0], [(i, (i + 1) % 2) for i in range(2)]),
    "all_to_all": lambda b, ns: all_to_all(b, ns[0], 0, 1, tiled=True),
    "ppermute_tuple": lambda b, ns: ppermute(
        b, ns, [(i, (3 * i + 1) % axis_size(ns)) for i in range(axis_size(ns))]
    ),
    "all_to_all_tuple": lambda b, ns: all_to_all(b, ns, 0, 1, tiled=True),
    "mixed": lambda b, ns: (
        lax.sin(b) * psum(b * b, ns) + all_gather(lax.cos(b), ns, tiled=True)[:4]
    ),
}


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
@pytest.mark.parametrize("mesh_shape", [(2,), (2, 2)])
def test_derivatives_vmap_jit(name, mesh_shape):
    mesh = _mesh(mesh_shape)
    ns = ("a",) if name in ("ppermute", "all_to_all") else tuple(mesh.axis_names)[::-1]
    n_dev = mesh.size
    rng = np.random.default_rng(len(name) + n_dev)
    x = rng.standard_normal((n_dev * 4, 2))
    allax = tuple(mesh.axis_names)
    f = shard(lambda b: COLLECTIVES[name](b, ns)[None], mesh, P(allax), P(allax))
    check_grads(f, [x], order=2 if name in ("psum", "mixed") else 1)
    check_jit(f, [x], atol=1e-12, rtol=1e-12)
    check_vmap(f, [rng.standard_normal((3, n_dev * 4, 2))], [0], atol=1e-12)
    check_vmap(f, [rng.standard_normal((n_dev * 4, 3, 2))], [1], out_axis=2, atol=1e-12)


def test_grad_inside_shard_is_the_gradient_of_the_sum_over_devices():
    # pmap semantics: d/dx_d of sum_d' f_d'(x), with f_d = sum(sin(psum(x)) * x_d)
    mesh = _mesh((4,))
    x = np.linspace(-1, 1, 8)

    def local(b):
        return (lax.sin(psum(b, "a")) * b).sum()

    inner = shard(blu.grad(local), mesh, P("a"), P("a"))(x)
    outer = blu.grad(lambda v: shard(lambda b: local(b)[None], mesh, P("a"), P("a"))(v).sum())(x)
    np.testing.assert_allclose(np.asarray(inner), np.asarray(outer), rtol=1e-12)
    blocks = x.reshape(4, 2)
    s = blocks.sum(0)
    want = np.sin(s) + np.cos(s) * blocks.sum(0)  # own term + every device's term via psum
    np.testing.assert_allclose(np.asarray(inner).reshape(4, 2), np.tile(want, (4, 1)), rtol=1e-12)


# ---- dtypes -------------------------------------------------------------------------------------

NUMERIC = [
    np.float32,
    np.float64,
    ml_dtypes.bfloat16,
    np.float16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint32,
]


@pytest.mark.parametrize("dt", NUMERIC + [np.bool_])
def test_dtypes(dt):
    mesh = _mesh((2, 2))
    x = (np.arange(16) % 5).reshape(8, 2).astype(dt)
    got = run_stacked(lambda b: all_gather(b, ("a", "b")), mesh, x)
    assert got.dtype == np.dtype(dt)
    np.testing.assert_array_equal(got, oracle(lambda v, i: np.stack(v), mesh, ("a", "b"), x))
    got = run_stacked(lambda b: ppermute(b, "b", [(0, 1), (1, 0)]), mesh, x)
    assert got.dtype == np.dtype(dt)
    if dt == np.bool_:  # psum counts the True values as int32 (JAX's); pmax/pmin refuse
        for names in ("a", ("b", "a")):
            got = run_stacked(lambda b: psum(b, names), mesh, x)
            assert got.dtype == np.int32
            want = oracle(lambda v, i: np.stack(v).astype(np.int64).sum(0), mesh, names, x)
            np.testing.assert_array_equal(got, want)
        got = np.asarray(shard(lambda b: psum(b, ("a", "b")), mesh, P(), P())(x))  # replicated
        np.testing.assert_array_equal(got, 4 * x.astype(np.int64))
        assert got.dtype == np.int32
        with pytest.raises(BluTypeError, match="pmax requires a numeric operand"):
            run_stacked(lambda b: pmax(b, "a"), mesh, x)
    else:
        for fn, op in ((psum, np.sum), (pmax, np.max), (pmin, np.min)):
            got = run_stacked(lambda b: fn(b, ("a", "b")), mesh, x)
            assert got.dtype == np.dtype(dt)
            want = oracle(lambda v, i: op(np.stack(v), 0).astype(dt), mesh, ("a", "b"), x)
            np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    # pmean: integers and booleans are divided in float32 (JAX's pmean(arange(4)) is 1.5; it
    # raised "pmean requires a float"), floats keep their dtype
    got = run_stacked(lambda b: pmean(b, ("a", "b")), mesh, x)
    exact = np.issubdtype(np.dtype(dt), np.integer) or dt == np.bool_
    assert got.dtype == (np.float32 if exact else np.dtype(dt))
    want = oracle(lambda v, i: np.stack(v).astype(np.float64).mean(0), mesh, ("a", "b"), x)
    rtol = 1e-2 if np.dtype(dt).itemsize == 2 else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol)


# ---- errors -------------------------------------------------------------------------------------


def test_unbound_axis_name_outside_shard():
    with pytest.raises(BluValueError, match=r"unbound axis name 'x': use it inside blu.shard"):
        psum(np.ones(3), "x")
    with pytest.raises(BluValueError, match="unbound axis name 'x'"):
        blu.jit(lambda v: all_gather(v, "x"))(np.ones(3))
    with pytest.raises(BluValueError, match=r"unbound axis name 'y'.*bound here: \['x'\]"):
        blu.vmap(lambda v: psum(v, "y"), axis_name="x")(np.ones(3))
    # a staged collective run with no mesh: the impl says the same
    jaxpr = blu.make_jaxpr(blu.vmap(lambda v: blu.jit(lambda u: psum(u, "x"))(v), axis_name="x"))
    assert "psum" not in str(jaxpr(np.ones(2)))


def test_collective_argument_errors():
    mesh = _mesh((4,))
    run = lambda fn, x: shard(fn, mesh, P("a"), P("a"))(x)  # noqa: E731
    with pytest.raises(BluValueError, match="repeats a source or destination"):
        run(lambda b: ppermute(b, "a", [(0, 1), (1, 1)]), np.ones(8))
    with pytest.raises(BluValueError, match="outside axis 'a' of size 4"):
        run(lambda b: ppermute(b, "a", [(0, 4)]), np.ones(8))
    with pytest.raises(BluShapeError, match="must be equal to 4"):
        run(lambda b: psum_scatter(b, "a"), np.ones(8))
    with pytest.raises(BluShapeError, match="must be a multiple of 4"):
        run(lambda b: all_to_all(b, "a", 0, 0, tiled=True), np.ones(8))
    with pytest.raises(BluValueError, match="repeats a name"):
        run(lambda b: psum(b, ("a", "a")), np.ones(8))
    with pytest.raises(BluValueError, match="unbound axis name 'a2'"):
        run(lambda b: ppermute(b, ("a", "a2"), []), np.ones(8))
    mesh2 = _mesh((2, 2))
    with pytest.raises(BluValueError, match=r"outside axes \('a', 'b'\) of size 4"):
        shard(lambda b: ppermute(b, ("a", "b"), [(0, 4)]), mesh2, P("a"), P("a"))(np.ones(8))
    with pytest.raises(BluValueError, match="axis 3 out of range"):
        run(lambda b: all_gather(b, "a", axis=3), np.ones(8))
    assert issubclass(BluValueError, BluError)
