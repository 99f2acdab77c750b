"""Results of the GPT-2 benchmark: the JSON file, merging, the ratio table, BENCHMARKS.md.

The results file (``benchmarks/gpt2_124m.py --json``) is::

    {"schema": 1,
     "runs": [{"system", "mode", "config", "B", "T", "vocab", "ok", "tok_s", "step_ms",
               "peak_GiB", "error", "date", "machine", "command", ...}, ...],
     "fidelity": [{"system", "check", "config", "B", "T", "vocab", "steps", "inputs", "ok",
                   "losses", "grad_norms", "error", "date", "machine", "command", ...}, ...]}

A new record replaces the one with the same key (:func:`record_key`), so invocations that each
run some systems build one table. Ratios are blu's figure divided by the peer's, per mode:
tokens/s (above 1: blu is faster) and peak memory (below 1: blu needs less).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.peers import fidelity as fid

SCHEMA = 1
SYSTEMS = ("blu", "torch", "torch-compile", "jax")
MODES = ("fp32", "tf32", "bf16")
BEGIN = "<!-- gpt2_124m benchmark: begin"
END = "<!-- gpt2_124m benchmark: end -->"
BEGIN_LINE = BEGIN + " (written by `benchmarks/gpt2_124m.py --update-benchmarks`) -->"


class ReportError(Exception):
    """A results file or BENCHMARKS.md that cannot be read or rewritten safely."""


# ---- the results file --------------------------------------------------------------------------


# max_batch: benchmarks/gpt2_124m.py --find-max-batch (benchmarks/peers/max_batch.py)
KINDS = ("runs", "fidelity", "max_batch")


def empty() -> dict:
    return {"schema": SCHEMA, "runs": [], "fidelity": [], "max_batch": []}


def load(path: str | os.PathLike) -> dict:
    """The results in ``path`` (an empty set when the file does not exist).

    Raises:
        ReportError: not JSON, or not a results file of this schema.
    """
    p = Path(path)
    if not p.exists():
        return empty()
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise ReportError(f"{p} is not JSON ({e}); move it away or pass another --json") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReportError(f"{p} is not a GPT-2 benchmark results file (schema {SCHEMA})")
    for kind in KINDS:
        data.setdefault(kind, [])
    return data


def save(path: str | os.PathLike, results: dict) -> None:
    """Write ``results`` atomically (a temporary file, then a rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    os.replace(tmp, p)


def record_key(kind: str, r: dict) -> tuple:
    """What a record stands for: runs by system and mode, fidelity by system and check, both
    for one config, batch, block and vocabulary."""
    which = (
        (r.get("system"), r.get("mode"))
        if kind in ("runs", "max_batch")
        else (r.get("system"), r.get("check"))
    )
    return (*which, r.get("config"), r.get("B"), r.get("T"), r.get("vocab"))


def merge(results: dict, kind: str, records: list[dict]) -> dict:
    """Put ``records`` into ``results[kind]`` (``runs`` or ``fidelity``), replacing records of
    the same key; order: first appearance. Returns ``results`` (changed in place)."""
    if kind not in KINDS:
        raise ReportError(f"unknown record kind {kind!r}")
    index = {record_key(kind, r): i for i, r in enumerate(results[kind])}
    for r in records:
        k = record_key(kind, r)
        if k in index:
            results[kind][index[k]] = r
        else:
            index[k] = len(results[kind])
            results[kind].append(r)
    return results


def select(results: dict, config: str, B: int, T: int, vocab: int) -> dict:
    """The records of one config, batch, block and (padded) vocabulary."""
    keep = lambda r: (
        (r.get("config"), r.get("B"), r.get("T"), r.get("vocab"))
        == (  # noqa: E731
            config,
            B,
            T,
            vocab,
        )
    )
    return {k: [r for r in results[k] if keep(r)] for k in ("runs", "fidelity")}


# ---- tables ------------------------------------------------------------------------------------


def ratio_rows(runs: list[dict]) -> list[dict]:
    """One row per run in mode, then system order, with blu's ratios to that peer.

    Returns:
        ``{"system", "mode", "ok", "tok_s", "step_ms", "peak_GiB", "plan_peak_GiB" (blu's
        memory plan's prediction), "speed", "memory", "error"}``; ``speed`` = blu tok/s /
        peer tok/s and ``memory`` = blu peak / peer peak (None on blu's own row, or where a
        figure is missing).
    """
    order = {(m, s): i for i, (m, s) in enumerate((m, s) for m in MODES for s in SYSTEMS)}
    runs = sorted(runs, key=lambda r: order.get((r["mode"], r["system"]), len(order)))
    blu = {r["mode"]: r for r in runs if r["system"] == "blu" and r.get("ok")}
    rows = []
    for r in runs:
        keys = ("system", "mode", "ok", "tok_s", "step_ms", "peak_GiB", "plan_peak_GiB")
        row = {k: r.get(k) for k in keys}
        row.update(speed=None, memory=None, error=r.get("error"))
        b = blu.get(r["mode"])
        if b is not None and r["system"] != "blu" and r.get("ok"):
            if b.get("tok_s") and r.get("tok_s"):
                row["speed"] = b["tok_s"] / r["tok_s"]
            if b.get("peak_GiB") and r.get("peak_GiB"):
                row["memory"] = b["peak_GiB"] / r["peak_GiB"]
        rows.append(row)
    return rows


def _fmt(v: Any, spec: str, suffix: str = "") -> str:
    return "—" if v is None else format(v, spec) + suffix


def _cells(row: dict) -> list[str]:
    if not row["ok"]:
        return [row["system"], row["mode"], "failed", "—", "—", "—", "—", "—"]
    return [
        row["system"],
        row["mode"],
        _fmt(row["tok_s"], ",.0f"),
        _fmt(row["step_ms"], ".1f"),
        _fmt(row["peak_GiB"], ".2f"),
        _fmt(row.get("plan_peak_GiB"), ".2f"),
        _fmt(row["speed"], ".2f", "x"),
        _fmt(row["memory"], ".2f", "x"),
    ]


HEADER = ["system", "mode", "tok/s", "step ms", "peak GiB", "plan GiB", "blu/peer tok/s",
          "blu/peer peak"]  # fmt: skip


def _fidelity_cells(row: dict) -> list[str]:
    result = {True: "PASS", False: "FAIL", None: "—"}[row["passed"]]
    what = {"fp32": "losses of steps 1-3, grad norm at step 1", "bf16": "loss at every step"}[
        row["check"]
    ]
    return [
        row["check"],
        _fmt(row["steps"], "d"),
        what,
        _fmt(row["worst_rel"], ".1e"),
        format(row["tol"], "g"),
        result,
        row["detail"],
    ]


FIDELITY_HEADER = ["check", "steps", "compared", "worst rel diff", "tol", "result", "detail"]


def _runs_info(view: dict) -> list[tuple[str, str, str]]:
    seen = {
        (r.get("date", "?"), r.get("machine", "?"), r.get("command", "?"))
        for kind in ("runs", "fidelity")
        for r in view[kind]
    }
    return sorted(seen)


def _vocab(view: dict) -> str:
    vocabs = sorted({r.get("vocab") for k in ("runs", "fidelity") for r in view[k]} - {None})
    return ", ".join(map(str, vocabs)) or "?"


def text_report(view: dict, config: str, B: int, T: int) -> str:
    """For the terminal: the runs it comes from, the fidelity checks, then the table (last)."""
    lines = [f"run {d} on {m}: {c}" for d, m, c in _runs_info(view)]
    checks = fid.compare(view["fidelity"])
    if checks:
        lines.append("fidelity (blu vs PyTorch, same initial weights and batches):")
        for c in checks:
            cells = _fidelity_cells(c)
            lines.append(
                f"  {cells[0]}: {cells[5]} (worst rel diff {cells[3]}, tol {cells[4]}, "
                f"{cells[1]} steps, {c['data'] or '?'}): {cells[6]}"
            )
    rows = ratio_rows(view["runs"])
    lines += [f"failed: {r['system']} {r['mode']}: {r['error']}" for r in rows if not r["ok"]]
    lines.append(
        f"{'LLaMA' if config.startswith('llama') else 'GPT-2'} {config} (vocabulary "
        f"{_vocab(view)}), batch {B} x {T}: tokens/s of the median "
        "step, peak GiB, blu/peer ratios"
    )
    cells = [_cells(r) for r in rows]
    if not cells:
        lines.append("(no throughput results)")
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(HEADER, *cells)]
    for row in [HEADER, *cells]:
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )
        )
    return "\n".join(lines)


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def markdown_section(view: dict, config: str, B: int, T: int) -> str:
    """This benchmark's section of BENCHMARKS.md, markers included."""
    out = [BEGIN_LINE, f"## GPT-2 training step on the GPU: blu, PyTorch and JAX ({config})", ""]
    out += [
        f"Config `{config}` (tied embeddings, vocabulary {_vocab(view)}), batch {B} × {T} tokens, "
        "AdamW (lr 6e-4, decay 0.1 on matrices only); each system and mode in its own process, "
        "measured as `shared/reference/` measures the peers: median step after warm-up; peak = "
        "each framework's own allocator peak; plan = blu's memory plan's predicted peak "
        "(`memory_analysis()`). Ratios are blu ÷ peer (tokens/s: above 1 is "
        "faster; peak memory: below 1 is smaller).",
        "",
        "Runs:",
    ]
    out += [f"- {date}, {machine}: `{command}`" for date, machine, command in _runs_info(view)]
    out += ["", _md_row(HEADER), "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rows = ratio_rows(view["runs"])
    out += [_md_row(_cells(r)) for r in rows] or ["| (no results) | | | | | | | |"]
    failures = [r for r in rows if not r["ok"]]
    if failures:
        out += [""] + [f"- {r['system']} {r['mode']} failed: {r['error']}" for r in failures]
    checks = fid.compare(view["fidelity"])
    if checks:
        out += [
            "",
            "Fidelity: blu against PyTorch from the same initial weights on the same "
            "batches (" + (checks[0]["data"] or "?") + ").",
            "",
        ]
        out += [_md_row(FIDELITY_HEADER), "| --- | ---: | --- | ---: | ---: | --- | --- |"]
        out += [_md_row(_fidelity_cells(c)) for c in checks]
    out += ["", END]
    return "\n".join(out)


def rewrite_section(text: str, section: str) -> str:
    """``text`` with its marked section replaced by ``section`` (appended when absent).

    Raises:
        ReportError: the markers are unbalanced, repeated or out of order.
    """
    nb, ne = text.count(BEGIN), text.count(END)
    if nb == ne == 0:
        return text.rstrip("\n") + "\n\n" + section + "\n"
    if nb != 1 or ne != 1:
        raise ReportError(
            f"BENCHMARKS.md has {nb} begin and {ne} end markers of the GPT-2 "
            "benchmark section; fix them by hand (one of each)"
        )
    i, j = text.index(BEGIN), text.index(END)
    if j < i:
        raise ReportError("BENCHMARKS.md: the GPT-2 section's end marker precedes its begin")
    return text[:i] + section + text[j + len(END) :]


# ---- the machine -------------------------------------------------------------------------------


def machine_name() -> str:
    """The GPU's name (``nvidia-smi``, else the driver's /proc entry), else the CPU's."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout
            names = [n.strip() for n in out.splitlines() if n.strip()]
            if names:
                return names[0] + (f" (x{len(names)})" if len(names) > 1 else "")
        except (OSError, subprocess.SubprocessError):
            pass
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        for line in Path(info).read_text().splitlines():
            if line.startswith("Model:"):
                return line.split(":", 1)[1].strip()
    cpu = platform.processor() or platform.machine()
    for line in (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"CPU only: {cpu}, {os.cpu_count()} cores"
