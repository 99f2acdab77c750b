"""Link the tutorials' text to the API reference: in each ``docs/tutorials/*.md``, the first
inline-code mention of a public blu function, class or module (```grad```, ```blu.numpy```,
```bnp.mean```, ```lax.scan(f, init, xs)```) outside code blocks and headings becomes a
``{py:obj}`` reference to its entry, keeping the text as written::

    python scripts/link_docs.py          # rewrite the tutorials
    python scripts/link_docs.py --check  # exit 1 if a first mention is not a link (tests/docs)

``docs/coming_from_jax.md`` and ``docs/install.md`` link their ```blu.```-dotted names only
(their bare names are often JAX's). A bare name (```scan```) is looked up in ``blu``,
``blu.lax``, ``blu.tree_util`` and ``blu.parallel``, in that order; a call (```scan(f, init,
xs)```) links when its arguments are plain names; ``bnp.``, ``jnp.``, ``lax.``, ``nn.``,
``optim.``, ``random.`` stand for blu's modules.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "docs")]

import apigen  # noqa: E402

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
# pages where only ``blu.``-dotted names link (their bare names are often JAX's)
DOTTED_ONLY = [ROOT / "docs" / "coming_from_jax.md", ROOT / "docs" / "install.md"]
PREFIX = {"bnp": "blu.numpy", "jnp": "blu.numpy", "lax": "blu.lax", "nn": "blu.nn",
          "optim": "blu.optim", "random": "blu.random", "blu": "blu"}  # fmt: skip
BARE = ("blu", "blu.lax", "blu.tree_util", "blu.parallel")
_SPAN = re.compile(r"(?<![`{}\w])`([^`\n]+)`(?!`)")
_ROLE = re.compile(r"\{py:\w+\}`(?:[^`<]*<)?([\w.]+)>?`")
_NAME = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(\([\w\s,.*=]*\))?")


def resolve(code: str, cache: dict, dotted_only: bool = False) -> str | None:
    """The documented name that the inline code ``code`` mentions, else None."""
    m = _NAME.fullmatch(code)
    if not m:
        return None
    dotted = m.group(1)
    head, _, rest = dotted.partition(".")
    if dotted_only and head != "blu":
        return None
    if rest:
        if head not in PREFIX:
            return None
        candidates = [f"{PREFIX[head]}.{rest}"] if head != "blu" else [dotted]
    else:
        candidates = [dotted] if dotted == "blu" else [f"{mod}.{dotted}" for mod in BARE]
    for c in candidates:
        if c not in cache:
            cache[c] = apigen.reference_name(c)
        if cache[c]:
            return cache[c]
    return None


def link(text: str, cache: dict, dotted_only: bool = False) -> str:
    """``text`` with the first mention of each documented name made a reference."""
    done = set(_ROLE.findall(text))
    out, fence = [], False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or line.lstrip().startswith(("```", "#")):
            out.append(line)
            continue

        def sub(m: re.Match) -> str:
            target = resolve(m.group(1), cache, dotted_only)
            if target is None or target in done:
                return m.group(0)
            done.add(target)
            return f"{{py:obj}}`{m.group(1)} <{target}>`"

        out.append(_SPAN.sub(sub, line))
    return "".join(out)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    cache: dict = {}
    stale = []
    for path in TUTORIALS + DOTTED_ONLY:
        text = path.read_text(encoding="utf-8")
        new = link(text, cache, dotted_only=path in DOTTED_ONLY)
        if new != text:
            stale.append(path.relative_to(ROOT).as_posix())
            if not check:
                path.write_text(new, encoding="utf-8")
    if check and stale:
        print("first mentions not linked (run python scripts/link_docs.py):", *stale)
        return 1
    done = ", ".join(stale) if stale else f"{len(TUTORIALS + DOTTED_ONLY)} pages"
    print(("rewrote " if stale else "up to date: ") + done)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
