"""The generated docs stay true to the code."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_primitives_doc_is_current():
    """docs/primitives.md lists every primitive with its rules (regenerate with the script)."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_primitives_doc.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_primitive_has_the_basic_rules():
    import blu  # noqa: F401
    from blu.core.primitive import Primitive

    missing = [
        name
        for name, p in Primitive.registry.items()
        if p.abstract_eval is None or (p.impl is None and p.partial_eval is None)
    ]
    assert not missing, f"primitives without impl/abstract_eval: {missing}"


def test_every_path_the_architecture_doc_names_exists():
    """docs/architecture.md names files and folders (``blu/lower/backend.py``, ``blu/lax/``...)
    that exist; a bare file name after a path (``bits.py``) is read in that path's folder."""
    import re

    text = re.sub(r"```.*?```", "", (ROOT / "docs" / "architecture.md").read_text(), flags=re.S)
    missing, checked = [], 0
    for cell in re.findall(r"`([^`]+)`", text):
        for token in re.split(r"[,\s]+", cell):
            if not re.fullmatch(r"(blu|scripts|tests|benchmarks|examples|docs)/[\w/.-]*", token):
                continue
            checked += 1
            if not (ROOT / token).exists():
                missing.append(token)
    assert checked >= 30, checked
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_tutorials_link_first_mentions_to_the_reference():
    """The first mention of each public blu name in a tutorial's text is a reference to its
    API entry (rewrite them with the script)."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "link_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
