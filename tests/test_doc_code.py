"""Every ```python block of the README and the documentation runs, so the docs cannot drift.

Each Markdown file's blocks run in order in one fresh Python process (as a reader would type them
into one session), in a temporary working directory. A block whose first line starts with
``# not run:`` (a visible marker saying why: a GPU, minutes of work) is skipped. A line
``print(...)  # -> TEXT`` checks that the print wrote exactly ``TEXT``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "index.md",
        *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]  # fmt: skip
SKIP = "# not run:"
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_CHECK = re.compile(r"^(\s*)(print\(.*\))\s+# -> (.*)$")

_PRELUDE = '''
import contextlib as __cl, io as __io, sys as __sys
def __expect(buf, want, where):
    got = buf.getvalue().rstrip("\\n")
    __sys.stdout.write(buf.getvalue())
    if got != want:
        raise AssertionError(f"{where}: printed {got!r}, the docs say {want!r}")
'''


def blocks(path: Path) -> list[tuple[int, str]]:
    """``(line, code)`` of each ```python block of ``path`` (line: where its code starts)."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _FENCE.finditer(text)]


def _with_checks(code: str, where: str, first: int) -> str:
    out = []
    for i, line in enumerate(code.splitlines()):
        m = _CHECK.match(line)
        if m:
            indent, call, want = m.groups()
            ast.parse(call)  # one whole print call on the line
            loc = f"{where}:{first + i}"
            out += [f"{indent}with __cl.redirect_stdout(__io.StringIO()) as __buf:",
                    f"{indent}    {call}",
                    f"{indent}__expect(__buf, {want.strip()!r}, {loc!r})"]  # fmt: skip
        else:
            out.append(line)
    return "\n".join(out)


def script(path: Path) -> tuple[str, int, int]:
    """The program that runs ``path``'s blocks: (source, blocks run, blocks skipped)."""
    rel = path.relative_to(ROOT).as_posix()
    parts, run, skipped = [_PRELUDE], 0, 0
    for line, code in blocks(path):
        if code.lstrip().startswith(SKIP):
            skipped += 1
            continue
        run += 1
        parts.append(f"# ---- {rel}:{line}\n{_with_checks(code, rel, line)}\n"
                     f"print('[doc block {rel}:{line} ok]', flush=True)\n")  # fmt: skip
    return "\n".join(parts), run, skipped


def test_every_doc_has_code():
    counts = {p.name: script(p)[1:] for p in DOCS}
    assert len(DOCS) >= 11, counts
    assert all(run > 0 for run, _ in counts.values()), counts
    skipped = sum(s for _, s in counts.values())
    assert skipped <= 10, f"keep the blocks that are not run few: {counts}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_doc_code_runs(path: Path, tmp_path: Path):
    src, n_run, _ = script(path)
    prog = tmp_path / "doc_blocks.py"
    prog.write_text(src, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    for k in ("BLU_NUM_CPU_DEVICES", "BLU_PROFILE", "BLU_JIT_BACKEND", "BLU_LOG_COMPILES"):
        env.pop(k, None)  # the docs describe the defaults
    work = tmp_path / "cwd"
    work.mkdir()
    r = subprocess.run([sys.executable, str(prog)], cwd=work, env=env, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    done = r.stdout.count("[doc block ")
    assert r.returncode == 0, (
        f"{path.name}: block {done + 1} of {n_run} failed\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    )
    assert done == n_run
