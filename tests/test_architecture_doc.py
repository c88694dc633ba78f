"""Cross-cutting: docs/architecture.md, the page a contributor reads first, says what the code is.  Every path
it names exists; its axes table lists exactly the packages that find variants by name (and their entry-point
groups); its step order is the one ``standard_steps`` computes; its layers hold for today's imports (measured
with grimp, imports inside functions included) except the upward imports it lists as known violations."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest

from common.job.params import entry_point_group
from tests.support.helpers import REPO

DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
ROLES = ("ventilator", "worker", "sink", "loader", "report")


def marked_block(marker: str) -> str:
    """The fenced block or table that follows ``<!-- marker: ... -->``."""
    start = DOC.index(f"<!-- {marker}:")
    body = DOC[DOC.index("-->", start) + 3:].lstrip("\n")
    if body.startswith("```"):
        return body[3:body.index("```", 3)].strip("\n")
    return body[:body.index("\n\n")]


def table_rows(table: str) -> list[list[str]]:
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()]
    return [row for row in rows[2:] if row]  # past the header and its rule


def test_every_path_the_doc_names_exists():
    named = set(re.findall(r"`((?:[\w.-]+/)+[\w.-]*)`", DOC))
    named |= {path for path in re.findall(r"\b((?:[\w-]+/)+[\w-]+\.(?:py|json|sh|md|c))\b", DOC)}
    assert len(named) > 40, named  # the pattern still finds what the page names
    missing = sorted(path for path in named if not (REPO / path).exists() and not (REPO / "docs" / path).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_dotted_module_the_doc_names_exists():
    named = set(re.findall(r"\b((?:common|ventilator|worker|sink|loader|report)(?:\.\w+)+)\b", DOC))
    missing = []
    for dotted in sorted(named):
        base = REPO.joinpath(*dotted.split("."))
        parent = REPO.joinpath(*dotted.split(".")[:-1])
        # a module, a package, or an attribute of one (common.job.config.standard_steps)
        if not (base.with_suffix(".py").exists() or (base / "__init__.py").exists()
                or parent.with_suffix(".py").exists()):
            missing.append(dotted)
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def axis_packages_in_code() -> set[str]:
    """The packages that find their variants by name: a ``Registry(__name__, ...)`` or ``discover(__name__, ...)``
    in their ``__init__.py``."""
    found = set()
    for init in REPO.glob("*/**/__init__.py"):
        if "tests" in init.parts or "build" in init.parts:
            continue
        if re.search(r"\b(Registry|discover)\(__name__", init.read_text(encoding="utf-8")):
            found.add(init.parent.relative_to(REPO).as_posix() + "/")
    return found


def test_the_axes_table_lists_every_registry_and_its_entry_point_group():
    rows = table_rows(marked_block("axes"))
    listed = {row[1].strip("`"): row[2].strip("`") for row in rows}
    in_code = axis_packages_in_code()
    assert len(in_code) >= 9, in_code
    assert set(listed) == in_code, (f"axes in the code, not in docs/architecture.md: {sorted(in_code - set(listed))}; "
                                    f"listed, not an axis: {sorted(set(listed) - in_code)}")
    for package, group in listed.items():
        assert group == entry_point_group(package.rstrip("/").replace("/", ".")), package


def test_the_plugin_demo_uses_only_groups_the_doc_lists():
    groups = set(re.findall(r'entry-points\."(mlm_pipeline\.\w+)"',
                            (REPO / "tests/data/plugin_demo/pyproject.toml").read_text()))
    listed = {row[2].strip("`") for row in table_rows(marked_block("axes"))}
    assert groups and groups <= listed, sorted(groups - listed)


def step_order_text() -> str:
    """The data path as the code computes it (tests.support.step_docs, which the marked block is made with)."""
    from common.job.config import step_diagram

    return step_diagram()


def test_the_step_order_is_the_one_the_code_computes():
    assert marked_block("steps") == step_order_text()


def test_the_step_table_names_every_step_in_order():
    start = DOC.index("| step | file |")
    rows = table_rows(DOC[start:DOC.index("\n\n", start)])
    assert [row[0] for row in rows] == [name.strip("[]") for name in step_order_text().split(" → ")]


def layers() -> list[list[str]]:
    return [line.split(":", 1)[1].split() for line in marked_block("layers").splitlines()]


def known_violations() -> set[tuple[str, str]]:
    known = set()
    for row in table_rows(marked_block("known-violations")):
        importer = row[0].strip("`")
        for imported in re.findall(r"`([\w.]+)`", row[1]):
            known.add((importer, imported))
    return known


def test_the_layers_name_every_package_of_common_and_every_role():
    listed = {package for layer in layers() for package in layer}
    common = {f"common.{p.stem if p.suffix else p.name}" for p in (REPO / "common").iterdir()
              if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert listed == common | set(ROLES), (sorted(common - listed), sorted(listed - common - set(ROLES)))


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("common", *ROLES)


def layer_of(module: str, rank: dict[str, int]) -> tuple[str, int] | None:
    parts = module.split(".")
    group = ".".join(parts[:2]) if parts[0] == "common" and len(parts) > 1 else parts[0]
    return (group, rank[group]) if group in rank else None


def upward_imports(graph) -> set[tuple[str, str]]:
    rank = {package: i for i, layer in enumerate(layers()) for package in layer}  # 0 is the top
    found = set()
    for module in graph.modules:
        importer = layer_of(module, rank)
        if importer is None:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = layer_of(imported, rank)
            if target is None or target[0] == importer[0]:
                continue
            if target[1] <= importer[1]:  # its own layer's other package, or above
                found.add((module, imported))
    return found


def test_no_upward_import_but_the_known_violations(graph):
    known = known_violations()
    unlisted = sorted(f"{a} -> {b}" for a, b in upward_imports(graph)
                      if (a, b) not in known and not any(a == k and b.startswith(v + ".") for k, v in known))
    assert not unlisted, ("imports against docs/architecture.md's layers (import downward, or list it as a "
                          f"known violation being removed): {unlisted}")


def test_every_known_violation_is_still_there(graph):
    """A violation removed from the code is removed from the page (the list says what is left to do)."""
    found = upward_imports(graph)
    gone = sorted(f"{a} -> {b}" for a, b in known_violations()
                  if not any(x == a and (y == b or y.startswith(b + ".")) for x, y in found))
    assert not gone, f"docs/architecture.md lists upward imports that are gone: remove them: {gone}"


def test_design_md_points_here():
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    assert "architecture.md" in design[:2000]
    assert Path(REPO / "docs" / "architecture.md").exists()
