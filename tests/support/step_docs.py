"""The step order as the docs show it, made from the code (``common.job.config.step_diagram``, the order
``standard_steps`` places a job's steps in): every fenced block marked ``<!-- steps: ... -->`` in docs/ holds it,
and tests/common/steps/test_step_docs.py checks that they do.

    python -m tests.support.step_docs --write   # rewrite the marked blocks after a step is added or moved
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from common.job.config import step_diagram

REPO = Path(__file__).resolve().parents[2]
#: A marked block: the marker line, then a fenced block holding the diagram.
MARKED = re.compile(r"(<!-- steps:[^\n]*-->\n```\n)(.*?)(\n```)", re.S)


def marked_pages() -> dict[Path, list[str]]:
    """Each page of docs/ with a marked block, and what its blocks hold."""
    pages = {}
    for page in sorted((REPO / "docs").glob("*.md")):
        found = [match[2] for match in MARKED.finditer(page.read_text(encoding="utf-8"))]
        if found:
            pages[page] = found
    return pages


def regenerated(text: str) -> str:
    """``text`` with every marked block holding the code's order."""
    diagram = step_diagram()
    return MARKED.sub(lambda match: match[1] + diagram + match[3], text)


def write() -> list[Path]:
    """Rewrites the pages whose blocks differ; the pages rewritten."""
    changed = []
    for page in marked_pages():
        text = page.read_text(encoding="utf-8")
        if regenerated(text) != text:
            page.write_text(regenerated(text), encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    for page in write():
        print(f"rewrote {page.relative_to(REPO)}")
