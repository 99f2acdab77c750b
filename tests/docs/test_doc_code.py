"""Every ```python block of the README and the documentation runs, so the docs cannot drift.

Each Markdown file's blocks run in order in one fresh Python process (as a reader would type them
into one session), in a temporary working directory. A block whose first line starts with
``# not run:`` (a visible marker saying why: a GPU, minutes of work) is skipped. A line
``print(...)  # -> TEXT`` checks that the print wrote exactly ``TEXT``; a ```text block right
after a block (only blank lines between) is what that whole block prints. A block without a
```text block prints nothing but its ``# ->`` lines: every output a reader would see is shown, and
``python scripts/gen_doc_outputs.py`` writes the ```text blocks from a run of the docs. A block
whose first line starts with ``# output varies`` (timings, the machine) shows one run's output,
which is not compared. ``% figure from the run: SRC`` above an image line says the blocks write
SRC and the image is a copy of it.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "docs" / "index.md",
        *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]  # fmt: skip
SKIP = "# not run:"
VARIES = "# output varies"
# "% figure from the run: SRC" above "![...](DEST)": the blocks write SRC, the page shows DEST
_FIGURE = re.compile(r"^% figure from the run: (\S+)\n!\[[^\]]*\]\((\S+)\)", re.M)


def figures(path: Path) -> list[tuple[str, str]]:
    """(file the blocks write, image the page shows, relative to the page) of each figure."""
    return _FIGURE.findall(path.read_text(encoding="utf-8"))


_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_CHECK = re.compile(r"^(\s*)(print\(.*\))\s+# -> (.*)$")
_OUTPUT = re.compile(r"\s*```text[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)

_PRELUDE = """
import contextlib as __cl, io as __io, json as __json, os as __os, sys as __sys
__RECORD = __os.environ.get("DOC_OUTPUTS_RECORD")  # gen_doc_outputs.py: write, don't compare
__PASS, __CHECKED, __OUTPUTS = [True], [], {}
def __expect(buf, want, where):
    got = buf.getvalue().rstrip("\\n")
    __CHECKED.append(buf.getvalue())
    if __PASS[0]:
        __sys.stdout.write(buf.getvalue())
    if got != want:
        raise AssertionError(f"{where}: printed {got!r}, the docs say {want!r}")
def __run_expect(code, want, where):
    if __RECORD:
        return __run_record(code, where)
    with __cl.redirect_stdout(__io.StringIO()) as buf:
        exec(compile(code, where, "exec"), globals())
    __expect(buf, want, where)
def __run_quiet(code, where):
    if __RECORD:
        return __run_record(code, where)
    __PASS[0] = False
    try:
        with __cl.redirect_stdout(__io.StringIO()) as buf:
            exec(compile(code, where, "exec"), globals())
    finally:
        __PASS[0] = True
    if buf.getvalue():
        raise AssertionError(f"{where}: prints {buf.getvalue()!r}, which the docs do not show "
                             "(python scripts/gen_doc_outputs.py writes it after the block)")
def __run_varies(code, where):
    if __RECORD:
        return __run_record(code, where)
    exec(compile(code, where, "exec"), globals())
def __run_record(code, where):
    __CHECKED.clear()
    with __cl.redirect_stdout(__io.StringIO()) as buf:
        exec(compile(code, where, "exec"), globals())
    __OUTPUTS[where] = [buf.getvalue(), "".join(__CHECKED)]
    with open(__RECORD, "w") as f:
        __json.dump(__OUTPUTS, f)
"""


def blocks(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, code, output)`` of each ```python block of ``path`` (line: where its code starts;
    output: the ```text block right after it, else None)."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        shown = _OUTPUT.match(text, m.end() + 1)
        out.append((text.count("\n", 0, m.start(1)) + 1, m.group(1),
                    shown.group(1).rstrip("\n") if shown else None))  # fmt: skip
    return out


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
    for line, code, shown in blocks(path):
        if code.lstrip().startswith(SKIP):
            skipped += 1
            continue
        run += 1
        body = _with_checks(code, rel, line)
        if code.lstrip().startswith(VARIES):
            body = f"__run_varies({body!r}, {f'{rel}:{line}'!r})"
        elif shown is not None:  # run it as its own code object, to catch all it prints
            body = f"__run_expect({body!r}, {shown!r}, {f'{rel}:{line}'!r})"
        else:  # it prints nothing but its checked lines
            body = f"__run_quiet({body!r}, {f'{rel}:{line}'!r})"
        parts.append(f"# ---- {rel}:{line}\n{body}\n"
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
    for src, dest in figures(path):  # the figures are the blocks' (gen_doc_outputs.py copies them)
        assert (work / src).is_file(), f"{path.name}: the blocks no longer write {src}"
        assert (path.parent / dest).is_file(), f"{path.name}: {dest} is missing"


# ---- the README's claims -------------------------------------------------------------------------

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_paths_exist():
    paths = set(re.findall(r"`((?:docs|scripts|benchmarks|examples|tests)/[\w./-]+|[A-Z]+\.md)`",
                           README))  # fmt: skip
    paths |= {m.replace(".", "/") + ".py" for m in re.findall(r"python -m (examples\.\w+)\.py",
                                                              README)}  # fmt: skip
    assert len(paths) >= 5, paths
    missing = [p for p in paths if not (ROOT / p.split(" ")[0]).exists()]
    assert not missing, missing


def test_readme_blu_names_exist():
    """Every ``blu.x.y`` the README names resolves (after ``import blu``)."""
    import importlib

    import blu  # noqa: F401

    names = set(re.findall(r"\bblu(?:\.[A-Za-z_]\w*)+", README))
    names = {n for n in names if not n.startswith(("blu.parallel.launch",))}
    assert len(names) > 20, names
    bad = []
    for n in sorted(names):
        parts = n.split(".")
        try:
            obj = importlib.import_module(parts[0])
            for i, a in enumerate(parts[1:], 1):
                try:
                    obj = getattr(obj, a)
                except AttributeError:
                    obj = importlib.import_module(".".join(parts[: i + 1]))
        except (AttributeError, ImportError):
            bad.append(n)
    assert not bad, bad


def test_readme_environment_variables_are_read_by_blu():
    """Each BLU_* variable the README mentions is read somewhere in blu."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "blu").rglob("*.py"))
    names = set(re.findall(r"\bBLU_[A-Z_]+", README))
    assert {"BLU_CACHE_DIR", "BLU_PROFILE", "BLU_LOG_COMPILES"} <= names
    assert not [n for n in names if f'"{n}"' not in source], names


def test_readme_example_flags_exist():
    """The flags the README gives ``python -m examples.gpt2`` are the example's flags."""
    sys.path.insert(0, str(ROOT))
    from examples.gpt2 import train

    known = {s for a in train.build_parser()._actions for s in a.option_strings}
    used = set()
    for line in re.findall(r"python -m\s+examples\.gpt2[^`]*", README):
        used |= set(re.findall(r"(?<!\w)--[a-z][a-z0-9-]*", line))
    assert {"--overwrite", "--device", "--precision"} <= used
    assert used <= known, used - known


def test_readme_defaults(tmp_path):
    """The kernel cache defaults to ~/.cache/blu; CUDA graphs replay training steps unless
    BLU_CUDA_GRAPHS=0 (the README says so); the jit backend is the compiled one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLU_")}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    code = ("import blu, os; from pathlib import Path; print(Path(blu.config.cache_dir) == "
            "Path.home() / '.cache' / 'blu', blu.config.cuda_graphs)")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)  # fmt: skip
    assert r.stdout.strip() == "True auto", r.stderr
    assert "`~/.cache/blu`" in README and "BLU_CUDA_GRAPHS=0" in README
    assert "off by\ndefault" not in README  # the old claim: graphs were opt-in
