"""Each feature is one place: holdout is declared in common/steps/holdout.py and dedup in common/steps/dedup/,
and no other module of the product names them.

"Names" is read from the syntax tree, not grepped: an identifier, an attribute, a keyword argument, an
imported name or module, a definition's name, or a string constant.  Comments, docstrings (and any string
standing alone as a statement) and an option's help text (``help=``, ``param(default, help)``) are prose: they
may explain that holdout exists, as this docstring does.  A role, the job, the wire or another step that needs
something of a feature asks the step (``Step.enabled``, ``plan``, ``required_tasks``, ``identity``, its
``Params``) instead.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
#: The product's packages (not tests/, docs/, bench/).
PRODUCT = ("common", "ventilator", "worker", "sink", "loader", "report")
#: Each feature: its one module or package, and the words that name it.
FEATURES = {
    "holdout": ("common/steps/holdout.py", re.compile("holdout", re.I)),
    "dedup": ("common/steps/dedup", re.compile("dedup|minhash", re.I)),
}
#: Modules that still name a feature while the "describe" branch makes dataset_info.json, the dataset card,
#: mlm-report, the loader, the formats, the manifest and mlm-verify ask each step for its own section or side
#: (issue 30).  That branch empties this set; an entry that no longer names a feature fails below, so the set
#: only shrinks.
PENDING_DESCRIBE: set[str] = set()


def _prose(tree: ast.AST) -> set[int]:
    """ids of the nodes that are prose: strings standing alone as statements (docstrings), help texts."""
    prose: set[int] = set()

    def mark(node: ast.AST) -> None:
        prose.update(id(inner) for inner in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            mark(node.value)
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "help":
                    mark(keyword.value)
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if called == "param" and len(node.args) >= 2:
                mark(node.args[1])
    return prose


def names_in(source: str) -> list[tuple[int, str]]:
    """Every name the module uses (line, text): identifiers, attributes, keywords, imports, definitions and
    string constants, prose left out."""
    tree = ast.parse(source)
    prose = _prose(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            found.append((line, node.id))
        elif isinstance(node, ast.Attribute):
            found.append((line, node.attr))
        elif isinstance(node, ast.keyword) and node.arg:
            found.append((line, node.arg))
        elif isinstance(node, ast.alias):
            found += [(line, node.name)] + ([(line, node.asname)] if node.asname else [])
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((line, node.module))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((line, node.name))
        elif isinstance(node, ast.arg):
            found.append((line, node.arg))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            found.append((line, node.value))
    return found


def product_modules() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (REPO / package).rglob("*.py"))


def naming(path: Path) -> dict[str, list[str]]:
    """Feature -> where the module names it ("line: text"), for the features it names outside their own place."""
    relative = path.relative_to(REPO).as_posix()
    named: dict[str, list[str]] = {}
    for feature, (home, words) in FEATURES.items():
        if relative == home or relative.startswith(home + "/"):
            continue
        hits = [f"{line}: {text[:60]!r}" for line, text in names_in(path.read_text(encoding="utf-8"))
                if words.search(text)]
        if hits:
            named[feature] = hits
    return named


def test_the_names_are_read_from_the_syntax_not_the_text():
    source = '''
"""Holdout and dedup are steps (a docstring may say so)."""
# a comment may too: holdout
from common.steps.holdout import SPLIT   # an import names it
x = param(0, "help that mentions --holdout-fraction")
y = option("--flag", help="after --dedup")
z = {"minhash": 1}                        # a string constant names it
def f(dedup_mode): return run.holdout     # an argument, an attribute
'''
    hits = [text for _line, text in names_in(source)]
    assert "common.steps.holdout" in hits and "minhash" in hits and "dedup_mode" in hits and "holdout" in hits
    assert not any("--holdout-fraction" in text or "--dedup" in text or "docstring" in text for text in hits)


def test_each_feature_is_declared_in_its_one_place():
    from common.steps import step_named

    for feature, (home, _words) in FEATURES.items():
        step = step_named(feature)
        for declared in (step, step.Params):
            where = Path(inspect.getfile(declared)).resolve().relative_to(REPO).as_posix()
            assert where == home or where.startswith(home + "/"), f"{declared.__qualname__} is in {where}, not {home}"
    assert not (REPO / "common" / "holdout.py").exists() and not (REPO / "common" / "dedup").exists()


@pytest.mark.parametrize("path", product_modules(), ids=lambda path: path.relative_to(REPO).as_posix())
def test_no_other_module_names_a_feature(path):
    relative = path.relative_to(REPO).as_posix()
    named = naming(path)
    if relative in PENDING_DESCRIBE:
        assert named, f"{relative} names no feature any more: take it out of PENDING_DESCRIBE"
        return
    assert not named, f"{relative} names {', '.join(named)} (ask the step instead): " + "; ".join(
        f"{feature} at {', '.join(hits[:4])}" for feature, hits in named.items())
