"""The layout rules of ``docs/architecture.md``, checked on the code: the import graph of ``blu``
has no cycle (grimp's graph, function-level imports included, as import-linter reads it), no
module outside the backend folders and the target parser compares target strings or branches on
a ``gpu`` flag, and no source file passes 600 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")  # (import-linter brings it; the GPU machine lacks it)

ROOT = Path(__file__).resolve().parents[2]
BACKEND_FOLDERS = ("blu/lower/cpu/", "blu/lower/cuda/", "blu/lower/reference/")
TARGET_PARSER = "blu/lower/target.py"
MAX_LINES = 600

# a comparison with a target string, or a branch on a GPU flag (what backends' objects answer)
TARGET_TEST = re.compile(
    r"""\btarget\w*\s*[!=]=\s*["']"""  # target == "cpu"
    r"""|["'][\w:]*["']\s*[!=]=\s*\w*target\b"""  # "cpu" == target
    r"""|\btarget\w*\.startswith\("""  # target.startswith("cuda")
    r"""|\.startswith\(\s*["'](?:cuda|cpu)"""  # x.startswith("cuda")
    r"""|\bis_gpu\("""  # is_gpu(target)
    r"""|^\s*(?:el)?if\s+(?:not\s+)?gpu\b"""  # if gpu:
)


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _strongly_connected(edges) == [["a", "b", "c"]]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_blu():
    graph = grimp.build_graph("blu", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles = _strongly_connected(edges)
    detail = []
    for comp in cycles:
        members = set(comp)
        for a in comp:
            for b in sorted(edges[a] & members):
                lines = graph.get_import_details(importer=a, imported=b)
                where = ", ".join(f"line {d['line_number']}" for d in lines[:2])
                detail.append(f"  {a} -> {b} ({where})")
    assert not cycles, "import cycles in blu:\n" + "\n".join(detail)


@pytest.mark.parametrize(
    "line, hit",
    [
        ('if target == "cpu":', True),
        ('    return "cuda:sm_90" != target', True),
        ('if target.startswith("cuda"):', True),
        ('ok = t.startswith("cuda:sm_")', True),
        ("gpu = is_gpu(target)", True),
        ("    if not gpu:", True),
        ("backend = backend_for((), target)", False),
        ('share = host / gpu if gpu else float("inf")', False),
        ('if device == "cpu":', False),
    ],
)
def test_the_target_test_reads_comparisons(line, hit):
    assert bool(TARGET_TEST.search(line)) is hit


def test_no_target_string_comparison_outside_the_backends_and_the_parser():
    found = []
    for path in sorted((ROOT / "blu").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(BACKEND_FOLDERS) or rel == TARGET_PARSER:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if TARGET_TEST.search(code):
                found.append(f"  {rel}:{n}: {line.strip()}")
    assert not found, (
        "target strings are read by blu/lower/target.py and answered by the backend objects "
        "(blu/lower/backend.py); these modules compare them:\n" + "\n".join(found)
    )


def test_no_source_file_over_600_lines():
    long = []
    for folder in ("blu", "tests", "examples", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            n = len(path.read_text().splitlines())
            if n > MAX_LINES:
                long.append(f"  {path.relative_to(ROOT)}: {n} lines")
    assert not long, f"files over {MAX_LINES} lines (split them by concept):\n" + "\n".join(long)
