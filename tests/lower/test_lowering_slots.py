"""Lowerings registered on the primitive (``prim.lowerings``, ``blu/lower/lowering.py``): every
primitive lowers or is listed as a host fallback with its reason; library nodes
(``NodeKind.LIBRARY``) and decompositions on the CPU, with small test primitives."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.lax as lax
from blu.core.aval import ShapedArray
from blu.core.primitive import Primitive
from blu.core.staging import hoist_consts
from blu.lax.elementwise import add_p
from blu.lax.shapes import broadcast_in_dim_p, reshape_p, transpose_p
from blu.lower.backend import prepare
from blu.lower.cpu.executable import CpuExecutable
from blu.lower.library import LibraryLowering, register_library
from blu.lower.lowering import declared_host_fallbacks, host_fallbacks, targets


def test_every_primitive_lowers_or_is_a_listed_host_fallback():
    HOST_FALLBACK = declared_host_fallbacks()  # noqa: N806  (the "host" slots, by name)
    unlisted = sorted(
        name
        for name, p in Primitive.registry.items()
        if "host fallback" in targets(p).values()
        and name not in HOST_FALLBACK
        and not name.startswith("test_")
    )
    assert not unlisted, (
        f"primitives {unlisted} would run on the host: give them a lowering "
        "(blu/lower/slots.py), a decomposition, or declare them (slots.host_fallback) "
        "with the reason"
    )
    stale = sorted(n for n in HOST_FALLBACK if n in Primitive.registry
                   and "host fallback" not in targets(Primitive.registry[n]).values())  # fmt: skip
    assert not stale, f"{stale} lower now: drop them from HOST_FALLBACK"
    assert all(len(reason) > 10 for reason in HOST_FALLBACK.values())


# What may still fall back to the host: transform-level boundaries, and work in flight
# elsewhere, to be dropped from here when it lands. Nothing else (issue #34). The collectives
# are library nodes on both targets (issue #35: blu/lower/collectives.py).
_TRANSFORM_LEVEL = {"checkpoint", "custom_lin"}
_COLLECTIVES = {"psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute",
                "reduce_scatter", "axis_index"}  # fmt: skip
_IN_FLIGHT: dict[str, set] = {"cpu": set(), "cuda": set()}


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_host_fallbacks_are_only_the_allowed_remainder(platform):
    allowed = _TRANSFORM_LEVEL | _IN_FLIGHT[platform]
    assert set(host_fallbacks(platform)) == allowed
    assert {targets(Primitive.registry[n])[platform] for n in _COLLECTIVES} == {"library"}


def test_callbacks_and_cuda_rewrites_are_not_fallbacks():
    reg = Primitive.registry
    for name in ("pure_callback", "debug_callback"):
        assert set(targets(reg[name]).values()) == {"host callback"}
    for name in ("dot_bias", "dot_bias_gelu", "dot_dgelu", "dot_product_attention_fwd_packed",
                 "dot_product_attention_bwd_packed"):  # fmt: skip
        assert targets(reg[name]) == {"cpu": "n/a (made by the CUDA plan only)", "cuda": "library"}


def test_checkpoint_name_is_the_value_itself_in_a_compiled_program():
    from blu.transforms.remat import checkpoint_name

    x = np.arange(6, dtype=np.float32)
    j = blu.make_jaxpr(lambda x: checkpoint_name(lax.exp(x), "e") * 2.0)(x).jaxpr
    for target in ("cpu", "cuda:sm_90"):
        _, plan, _ = prepare(j, (False,), target)
        assert [n.kind for n in plan.nodes] == ["kernel"], plan
    np.testing.assert_allclose(CpuExecutable(j)(x)[0], np.exp(x) * 2.0, rtol=1e-6)


def test_lowerings_are_keyed_by_primitive_not_name():
    assert "elementwise" in add_p.lowerings and "index" in broadcast_in_dim_p.lowerings
    assert targets(reshape_p) == {
        "cpu": "fused (index) or view",
        "cuda": "fused (index) or view",
    }
    assert targets(transpose_p)["cuda"] == "fused (index)"  # a GPU view must not move data
    impostor = Primitive("test_impostor_add")  # a name is not a lowering
    impostor.def_impl(np.add)
    impostor.def_abstract_eval(lambda x, y: x)
    assert impostor.lowerings == {} and targets(impostor)["cpu"] == "host fallback"


# ---- a library node on the CPU -----------------------------------------------------------------

scaled_cumsum_p = Primitive("test_scaled_cumsum", multiple_results=True)
scaled_cumsum_p.def_impl(lambda x, *, scale: [np.cumsum(x, -1) * scale, np.sum(x, -1)])
scaled_cumsum_p.def_abstract_eval(lambda x, *, scale: [x, ShapedArray(x.shape[:-1], x.dtype)])
calls: list[dict] = []


def _cpu_call(ins, outs, workspace, *, scale):
    (x,), (y, s) = ins, outs
    n = x.shape[-1]
    # the planned workspace holds the running sum, one row at a time
    acc = workspace[: x.dtype.itemsize * x[..., 0].size].view(x.dtype).reshape(x.shape[:-1])
    acc[...] = 0
    for i in range(n):
        acc += x[..., i]
        y[..., i] = acc * scale
    s[...] = acc
    calls.append(dict(workspace=workspace.nbytes, y_in_arena=y.base is not None))


register_library(
    scaled_cumsum_p,
    LibraryLowering(
        workspace=lambda avals, params, target: (
            avals[0].size // avals[0].shape[-1] * avals[0].dtype.itemsize
        ),
        cpu=_cpu_call,
        gpu=None,
    ),
)


def test_library_node_on_the_cpu_writes_planned_buffers_with_a_workspace():
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)

    def f(x):
        y, s = scaled_cumsum_p.bind(lax.exp(x), scale=0.5)  # exp: a kernel before the library
        return lax.tanh(y) + 1.0, s * 2.0

    closed = blu.make_jaxpr(f)(x)
    exe = CpuExecutable(hoist_consts(closed.jaxpr))
    kinds = [n.kind for n in exe.plan.nodes]
    assert "library" in kinds and "fallback" not in kinds, exe.plan
    k = kinds.index("library")
    assert exe.plan.nodes[k].workspace == 5 * 4
    assert exe.memory.scratch[k], "the workspace is planned scratch"
    calls.clear()
    got_y, got_s = exe(x)
    ref = np.cumsum(np.exp(x.astype(np.float64)), -1)
    np.testing.assert_allclose(got_y, np.tanh(0.5 * ref) + 1.0, rtol=1e-5)
    np.testing.assert_allclose(got_s, 2.0 * ref[:, -1], rtol=1e-5)
    assert calls and calls[0]["workspace"] >= 20  # a slice of the arena


def test_library_lowering_that_does_not_apply_falls_back():
    only_cuda = Primitive("test_only_cuda")
    only_cuda.def_impl(lambda x: x * 3)
    only_cuda.def_abstract_eval(lambda x: x)
    register_library(only_cuda, LibraryLowering(
        workspace=lambda *a: 0, cpu=lambda ins, outs, ws: None, gpu=None,
        applies=lambda avals, params, target: target.startswith("cuda")))  # fmt: skip
    x = np.arange(4, dtype=np.float32)
    j = blu.make_jaxpr(lambda x: only_cuda.bind(x) + 1.0)(x).jaxpr
    _, plan, _ = prepare(j, (False,), "cpu")
    assert [n.kind for n in plan.nodes] == ["fallback", "kernel"]
    np.testing.assert_array_equal(CpuExecutable(j)(x)[0], x * 3 + 1)


# ---- decompositions ----------------------------------------------------------------------------

softsign_p = Primitive("test_softsign")
softsign_p.def_impl(lambda x, *, k: x / (k + np.abs(x)))
softsign_p.def_abstract_eval(lambda x, *, k: x)
softsign_p.decomposition = lambda x, *, k: x / (lax.abs(x) + k)


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_decomposition_is_inlined_and_fused(target):
    x = np.linspace(-4, 4, 33, dtype=np.float32)
    j = blu.make_jaxpr(lambda x: lax.exp(softsign_p.bind(x, k=2.0)) * 3.0)(x).jaxpr
    _, plan, _ = prepare(j, (False,), target)
    assert [n.kind for n in plan.nodes] == ["kernel"], plan  # one fused kernel, no fallback
    assert "test_softsign" not in str(plan)


def test_decomposition_runs_as_its_impl_computes():
    x = np.linspace(-4, 4, 33, dtype=np.float32)
    got = blu.jit(lambda x: lax.exp(softsign_p.bind(x, k=2.0)) * 3.0)(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got, np.exp(x64 / (2.0 + np.abs(x64))) * 3.0, rtol=2e-6)


def test_sort_and_top_k_are_library_nodes_on_both_targets():
    """Issue #34: sort and top_k run blu's own kernels (CUDA) or numpy's sort into planned
    buffers (CPU), never the generic host fallback."""
    from blu.lax import sorting

    for p in (sorting.sort_p, sorting.top_k_p):
        assert targets(p) == {"cpu": "library", "cuda": "library"}, targets(p)
        assert p.name not in host_fallbacks()
