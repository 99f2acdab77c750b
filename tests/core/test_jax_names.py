"""JAX's names for blu features: every public name of JAX's main modules is in blu or listed
with its reason in docs/coming_from_jax.md; blu.tree_util / blu.tree, block_until_ready,
device_get, disable_jit, the collectives in blu.lax, and shard_map where JAX users import it."""

from __future__ import annotations

import collections
import dataclasses
import importlib
import pathlib
import re

import numpy as np
import pytest

import blu
import blu.numpy as bnp
import blu.tree_util as tu
from blu import lax
from blu.core.errors import BluTypeError, BluValueError
from blu.parallel import P, make_mesh

# ---- JAX's public names: in blu, or on the "coming from JAX" page --------------------------------

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
# a bullet that lists names: "- `a`, `b`, ...: the reason"
_NAMES_BULLET = re.compile(r"^- ((?:`[^`]+`,? ?)+):")


def _jax_names() -> dict[str, list[str]]:
    """docs/jax_names.txt (scripts/gen_jax_names.py): module -> JAX's public names."""
    names: dict[str, list[str]] = collections.defaultdict(list)
    for line in (DOCS / "jax_names.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            module, name = line.split()
            names[module].append(name)
    return names


def _listed_on_page() -> dict[str, set[str]]:
    r"""docs/coming_from_jax.md: module (its `## \`jax...\`` section) -> the names its bullets
    list as missing."""
    listed: dict[str, set[str]] = collections.defaultdict(set)
    section, bullet = None, ""

    def flush() -> None:
        m = _NAMES_BULLET.match(bullet)
        if section and m:
            listed[section].update(re.findall(r"`([^`]+)`", m.group(1)))

    for line in (DOCS / "coming_from_jax.md").read_text().splitlines():
        if line.startswith("- ") or line.startswith("#") or not line.strip():
            flush()
            bullet = line if line.startswith("- ") else ""
            if line.startswith("## "):
                m = re.match(r"## `(jax[\w.]*)`", line)
                section = m.group(1) if m else None
        elif bullet:
            bullet += " " + line.strip()
    flush()
    return listed


def _blu_module(jax_module: str):
    return importlib.import_module("blu" + jax_module[len("jax") :])


def test_the_names_list_covers_the_modules():
    names = _jax_names()
    assert set(names) == {"jax", "jax.numpy", "jax.lax", "jax.nn", "jax.nn.initializers",
                          "jax.random", "jax.scipy.special", "jax.tree_util", "jax.sharding",
                          "jax.debug"}  # fmt: skip
    assert len(names["jax.numpy"]) > 300 and "unique" in names["jax.numpy"]
    assert "pure_callback" in names["jax"] and "print" in names["jax.debug"]


def test_every_jax_name_is_in_blu_or_explained():
    listed = _listed_on_page()
    missing = []
    for module, names in _jax_names().items():
        mod = _blu_module(module)
        missing += [
            f"{module}.{n}" for n in names if not hasattr(mod, n) and n not in listed[module]
        ]
    assert not missing, (
        f"{len(missing)} JAX names are neither in blu nor listed in docs/coming_from_jax.md: "
        + ", ".join(missing)
    )


def test_the_page_lists_no_name_blu_has():
    names = _jax_names()
    stale = []
    for module, listed in _listed_on_page().items():
        assert module in names, f"coming_from_jax.md has a section for {module}, not in the list"
        mod = _blu_module(module)
        stale += [f"{module}.{n}" for n in sorted(listed) if hasattr(mod, n)]
        stale += [
            f"{module}.{n} (not a JAX name)" for n in sorted(listed) if n not in names[module]
        ]
    assert not stale, "coming_from_jax.md lists names blu has (or JAX lacks): " + ", ".join(stale)


def test_the_page_parser_reads_bullets_across_lines():
    listed = _listed_on_page()
    assert {"pmap", "smap"} <= listed["jax"]
    assert "GatherScatterMode" in listed["jax.lax"] and "add_p" in listed["jax.lax"]  # 2nd line
    assert "reduce_window" not in listed["jax.lax"]  # built
    assert "transfer_guard_host_to_device" in listed["jax"]  # on a bullet's third line
    assert "delta_orthogonal" not in listed["jax.nn.initializers"]  # built
    assert "unique" not in listed["jax.numpy"]


# ---- tree_util ---------------------------------------------------------------------------------


def test_tree_map_several_trees_and_is_leaf():
    a = {"x": 1, "y": (2, 3)}
    b = {"x": 10, "y": (20, 30)}
    assert tu.tree_map(lambda u, v: u + v, a, b) == {"x": 11, "y": (22, 33)}
    # is_leaf stops at the tuples: f sees them whole
    got = tu.tree_map(lambda t: len(t), [(1, 2), (3,)], is_leaf=lambda t: isinstance(t, tuple))
    assert got == [2, 1]
    with pytest.raises(BluValueError):
        tu.tree_map(lambda u, v: u, a, {"x": 1})


def test_flatten_unflatten_structure_roundtrip():
    Point = collections.namedtuple("Point", "x y")
    tree = {"b": [Point(1, 2), None], "a": (3,)}
    leaves, treedef = tu.tree_flatten(tree)
    assert leaves == [3, 1, 2]  # dict keys sorted, None is an empty node
    assert tu.tree_unflatten(treedef, leaves) == tree
    assert tu.tree_structure(tree) == treedef
    assert tu.tree_leaves(tree) == leaves
    assert treedef.num_leaves == 3
    assert [c.num_leaves for c in tu.treedef_children(treedef)] == [1, 2]


def test_key_paths():
    tree = {"w": [np.zeros(1), np.ones(2)], "b": 5}
    pairs, _ = tu.tree_flatten_with_path(tree)
    assert [tu.keystr(p) for p, _ in pairs] == ["['b']", "['w'][0]", "['w'][1]"]
    assert pairs[1][0] == (tu.DictKey("w"), tu.SequenceKey(0))
    got = tu.tree_map_with_path(lambda p, x: tu.keystr(p), tree)
    assert got == {"w": ["['w'][0]", "['w'][1]"], "b": "['b']"}


@tu.register_pytree_node_class
class _Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def tree_flatten(self):
        return (self.a, self.b), "tag"

    @classmethod
    def tree_unflatten(cls, aux, children):
        assert aux == "tag"
        return cls(*children)


@tu.register_pytree_with_keys_class
class _Named:
    def __init__(self, w):
        self.w = w

    def tree_flatten_with_keys(self):
        return ((tu.GetAttrKey("w"), self.w),), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def test_registered_classes_go_through_transforms():
    def f(p):
        return bnp.sum(p.a * p.b)

    g = blu.grad(f)(_Pair(np.array([1.0, 2.0]), np.array([3.0, 4.0])))
    np.testing.assert_allclose(np.asarray(g.a), [3.0, 4.0])
    np.testing.assert_allclose(np.asarray(g.b), [1.0, 2.0])
    pairs, _ = tu.tree_flatten_with_path(_Named(np.zeros(2)))
    assert tu.keystr(pairs[0][0]) == ".w"


def test_register_pytree_node_and_dataclass():
    class Box:
        def __init__(self, v):
            self.v = v

    tu.register_pytree_node(Box, lambda b: ((b.v,), None), lambda aux, ch: Box(ch[0]))
    out = blu.jit(lambda b: Box(b.v * 2))(Box(np.float32(3.0)))
    assert isinstance(out, Box) and float(out.v) == 6.0

    @tu.register_dataclass
    @dataclasses.dataclass
    class Params:
        w: np.ndarray
        b: np.ndarray

    leaves = tu.tree_leaves(Params(np.zeros(2), np.ones(1)))
    assert [x.shape for x in leaves] == [(2,), (1,)]


def test_partial_is_a_pytree_through_jit():
    p = tu.Partial(lambda scale, x: scale * x, np.float32(3.0))
    assert tu.tree_leaves(p) == [np.float32(3.0)]
    out = blu.jit(lambda f, x: f(x))(p, np.float32(2.0))
    assert float(out) == 6.0


def test_blu_tree_short_names():
    t = {"a": 1, "b": [2, 3]}
    assert blu.tree.map(lambda x: x * 2, t) == {"a": 2, "b": [4, 6]}
    assert blu.tree.leaves(t) == [1, 2, 3]
    leaves, td = blu.tree.flatten(t)
    assert blu.tree.unflatten(td, leaves) == t
    assert blu.tree.reduce(lambda a, b: a + b, t) == 6
    assert blu.tree.structure(t) == td


# ---- host helpers ------------------------------------------------------------------------------


def test_block_until_ready_returns_the_tree():
    tree = {"a": bnp.ones(3), "b": [np.zeros(2), 1.5, "s"]}
    assert blu.block_until_ready(tree) is tree


def test_device_get_gives_numpy():
    tree = {"a": bnp.arange(3.0), "b": (np.int32(4), 2.5, "s")}
    got = blu.device_get(tree)
    assert isinstance(got["a"], np.ndarray) and got["a"].dtype == np.float32
    np.testing.assert_array_equal(got["a"], [0.0, 1.0, 2.0])
    assert got["b"][1] == 2.5 and got["b"][2] == "s"

    def traced(x):
        return blu.device_get(x)

    with pytest.raises(BluTypeError, match="device_get"):
        blu.jit(traced)(np.ones(2))


def test_disable_jit_runs_python_eagerly():
    seen = []

    @blu.jit
    def f(x):
        seen.append(type(x))
        return x * 2 if float(x[0]) > 0 else x  # needs a concrete value

    with blu.disable_jit():
        np.testing.assert_allclose(np.asarray(f(np.ones(2, np.float32))), [2.0, 2.0])
        assert blu.config.disable_jit
        with blu.disable_jit(False):
            assert not blu.config.disable_jit
    assert not blu.config.disable_jit
    assert all(not issubclass(t, blu.core.interpreter.Tracer) for t in seen)
    with pytest.raises(Exception):  # noqa: B017 - staged: float() of a tracer is an error
        f(np.ones(2, np.float32))


# ---- collectives in blu.lax and shard_map --------------------------------------------------------


def test_lax_collectives_are_blu_parallels():
    import blu.parallel as par

    for name in ["psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute",
                 "all_to_all", "axis_index", "ragged_all_to_all"]:  # fmt: skip
        assert getattr(lax, name) is getattr(par, name)


def test_lax_collectives_under_vmap_against_numpy():
    x = np.arange(12.0).reshape(4, 3)
    f = blu.vmap(lambda r: (lax.psum(r, "i"), lax.pmax(r, "i"), lax.axis_index("i")), axis_name="i")
    s, m, i = f(x)
    np.testing.assert_allclose(np.asarray(s), np.broadcast_to(x.sum(0), x.shape))
    np.testing.assert_allclose(np.asarray(m), np.broadcast_to(x.max(0), x.shape))
    np.testing.assert_array_equal(np.asarray(i), np.arange(4))
    g = blu.vmap(lambda r: lax.all_gather(r, "i"), axis_name="i")(x)
    np.testing.assert_allclose(np.asarray(g), np.broadcast_to(x, (4, 4, 3)))


@pytest.fixture
def _four_devices(set_flag):
    set_flag("num_cpu_devices", 4)


def test_shard_map_spellings(_four_devices):
    from blu.experimental.shard_map import shard_map as exp_shard_map

    mesh = make_mesh((4,), ("d",))
    x = np.arange(8.0, dtype=np.float32)

    def total(b):
        return lax.psum(bnp.sum(b), "d")

    a = blu.shard_map(total, mesh=mesh, in_specs=P("d"), out_specs=P())(x)
    b = exp_shard_map(total, mesh, P("d"), P(), check_rep=True)(x)

    @blu.shard_map(mesh=mesh, in_specs=(P("d"),), out_specs=P("d"))
    def doubled(blk):
        return blk * 2

    np.testing.assert_allclose(float(np.asarray(a)), x.sum())
    np.testing.assert_allclose(float(np.asarray(b)), x.sum())
    np.testing.assert_allclose(np.asarray(doubled(x)), x * 2)
    with pytest.raises(BluValueError, match="auto"):
        blu.shard_map(total, mesh=mesh, in_specs=P("d"), out_specs=P(), auto={"d"})


def test_shard_map_check_vma_false_takes_device_zero(_four_devices):
    mesh = make_mesh((4,), ("d",))
    x = np.arange(8.0, dtype=np.float32)

    def local_sum(b):
        return bnp.sum(b)  # differs per device, out_spec P() does not name "d"

    with pytest.raises(BluValueError, match="differs across mesh axis"):
        blu.shard_map(local_sum, mesh=mesh, in_specs=P("d"), out_specs=P())(x)
    got = blu.shard_map(local_sum, mesh=mesh, in_specs=P("d"), out_specs=P(), check_vma=False)(x)
    np.testing.assert_allclose(float(np.asarray(got)), x[:2].sum())
