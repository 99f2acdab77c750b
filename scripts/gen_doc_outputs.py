"""Write the outputs the docs show: run the ```python blocks of the README, docs/index.md and the
tutorials (as ``tests/docs/test_doc_code.py`` runs them, in order, one process per file) and put
what each block prints in a ```text block right after it::

    python scripts/gen_doc_outputs.py [FILE.md ...]

A block whose prints are all checked in place (``print(x) # -> TEXT``) gets no ```text block; a
block with one gets it rewritten with the new output. A figure line ``% figure from the run:
runs/tiny/loss.png`` right above an image ``![...](figures/x.png)`` copies the file the blocks
wrote to the image's path (plots rendered from the page's own code). The doc tests fail when a
block prints something the page does not show, or shows something it no longer prints, so the
outputs on the pages are the real ones. Blocks marked ``# not run:`` are left alone; a block
marked ``# output varies`` (timings, the machine) gets one run's output once, which is then kept
(trim it by hand) and not compared.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _doc_code():
    spec = importlib.util.spec_from_file_location(
        "doc_code", ROOT / "tests" / "docs" / "test_doc_code.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def outputs(path: Path, dc) -> dict[int, tuple[str, str]]:
    """{line of a block's code: (what the block printed, what its checked prints printed)};
    copies the figures the page takes from the run (``dc.FIGURE``) next to the page."""
    src, _, _ = dc.script(path)
    with tempfile.TemporaryDirectory() as tmp:
        prog, record = Path(tmp) / "doc_blocks.py", Path(tmp) / "outputs.json"
        prog.write_text(src, encoding="utf-8")
        env = dict(os.environ, DOC_OUTPUTS_RECORD=str(record), MPLBACKEND="Agg")
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        for k in ("BLU_NUM_CPU_DEVICES", "BLU_PROFILE", "BLU_JIT_BACKEND", "BLU_LOG_COMPILES"):
            env.pop(k, None)  # the docs describe the defaults
        work = Path(tmp) / "cwd"
        work.mkdir()
        r = subprocess.run([sys.executable, str(prog)], cwd=work, env=env, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
        if r.returncode != 0:
            raise SystemExit(f"{path}: a block failed\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
        got = json.loads(record.read_text()) if record.exists() else {}
        for src, dest in dc.figures(path):
            (path.parent / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(work / src, path.parent / dest)
            print(f"  {path.name}: {src} -> {(path.parent / dest).relative_to(ROOT)}")
    return {int(k.rsplit(":", 1)[1]): tuple(v) for k, v in got.items()}


def rewrite(path: Path, dc) -> bool:
    text = path.read_text(encoding="utf-8")
    outs = outputs(path, dc)
    edits = []  # (start, end, replacement), applied from the end
    for m in dc._FENCE.finditer(text):
        line = text.count("\n", 0, m.start(1)) + 1
        if line not in outs:
            continue  # not run
        whole, checked = outs[line]
        shown = dc._OUTPUT.match(text, m.end() + 1)
        want = whole.rstrip("\n")
        block = f"\n\n```text\n{want}\n```" if want else ""  # (prints nothing any more)
        if shown and m.group(1).lstrip().startswith(dc.VARIES):
            continue  # one run's output, maybe trimmed by hand: kept
        if shown:
            edits.append((m.end(), shown.end(), block))
        elif whole != checked:
            edits.append((m.end(), m.end(), block))
    new = text
    for start, end, rep in sorted(edits, reverse=True):
        new = new[:start] + rep + new[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str]) -> int:
    dc = _doc_code()
    paths = [Path(a).resolve() for a in argv] or dc.DOCS
    for p in paths:
        print(("rewrote " if rewrite(p, dc) else "unchanged ") + p.relative_to(ROOT).as_posix())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
