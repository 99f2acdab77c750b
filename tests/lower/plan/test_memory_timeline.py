"""The memory plan as JAX reports it (``memory_analysis()``'s field names) and its picture
(blu.lower.memory_timeline): the per-node live bytes peak where the analysis says, arena buffers
never share bytes while both are live, and the timeline is written as a valid HTML page / PNG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

import blu
from blu import lax, nn
from blu.lower.plan.memory_timeline import buffers, draw_timeline


def _lowered():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    ws = [rng.standard_normal((32, 32)).astype(np.float32) / 6 for _ in range(4)]
    labels = rng.integers(0, 32, 64).astype(np.int32)

    def loss(ws, x, labels):
        for w in ws:
            x = lax.tanh(x @ w)
        return nn.cross_entropy(x, labels)

    low = blu.jit(blu.value_and_grad(loss)).lower(ws, x, labels, target="cpu")
    return low, low._program  # the target's Lowered: its plan and MemoryPlan


def test_memory_analysis_has_jax_fields_and_the_old_names():
    low, prog = _lowered()
    m = low.memory_analysis()
    assert m.argument_size_in_bytes == m.argument_bytes == 4 * 32 * 32 * 4 + 64 * 32 * 4 + 64 * 4
    assert m.output_size_in_bytes == m.output_bytes == 4 + 4 * 32 * 32 * 4
    assert m.alias_size_in_bytes == m.alias_bytes == 0
    assert m.temp_size_in_bytes == m.temp_bytes == prog.memory.arena_size
    assert m.generated_code_size_in_bytes == 0 and m.host_temp_size_in_bytes == 0
    assert m.peak_memory_in_bytes == m.peak_bytes
    assert low.compile().memory_analysis().temp_size_in_bytes == m.temp_bytes
    # the per-node live bytes: one per node, the peak their maximum, arguments always live
    assert len(m.live_bytes_at) == len(prog.plan.nodes)
    assert max(m.live_bytes_at) == m.peak_bytes
    assert min(m.live_bytes_at) >= m.argument_bytes


def test_arena_buffers_never_share_bytes_while_live():
    _, prog = _lowered()
    bufs = buffers(prog.plan, prog.memory)
    assert bufs == sorted(bufs, key=lambda b: (-b.nbytes, b.start))
    arena = [b for b in bufs if b.place == "arena"]
    assert arena and all(b.start <= b.end for b in arena)
    for i, a in enumerate(arena):
        for b in arena[i + 1 :]:
            if a.end < b.start or b.end < a.start:
                continue  # not live at once: may reuse bytes
            # a kernel may write its output over an input dying in it (in place)
            if a.end == b.start or b.end == a.start:
                continue
            assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
    assert all(b.producer.startswith("argument") for b in bufs if b.place == "arg")


def test_timeline_html_is_valid_and_labels_the_largest(tmp_path):
    _, prog = _lowered()
    out = draw_timeline(prog.plan, prog.memory, tmp_path / "plan.html", top=3, title="loss")
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>")
    svg = text[text.index("<svg") : text.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    rects = root.findall(f"{ns}rect")
    assert len(rects) == len(buffers(prog.plan, prog.memory))
    largest = buffers(prog.plan, prog.memory)[0]
    assert largest.label in text and largest.producer in text
    assert "peak" in text


def test_timeline_png(tmp_path):
    pytest.importorskip("matplotlib")
    _, prog = _lowered()
    out = draw_timeline(prog.plan, prog.memory, tmp_path / "plan.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
