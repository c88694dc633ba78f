"""Cross-cutting: docs/architecture.md, the page a contributor reads first, says what the code is.  Every path
it names exists; its axes table lists exactly the packages that find variants by name (and their entry-point
groups); its step order is the one ``standard_steps`` computes; its layers hold for today's imports (measured
with grimp, imports inside functions included) except the upward imports it lists as known violations."""

from __future__ import annotations

import graphlib
import importlib
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
        # a module, a package, or an attribute of one (common.job.config.standard_steps, common.steps.split_of)
        if not (base.with_suffix(".py").exists() or (base / "__init__.py").exists()
                or parent.with_suffix(".py").exists() or (parent / "__init__.py").exists()):
            missing.append(dotted)
        elif not (base.with_suffix(".py").exists() or (base / "__init__.py").exists()):
            module = ".".join(dotted.split(".")[:-1])
            if not hasattr(importlib.import_module(module), dotted.rsplit(".", 1)[1]):
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


def layers(text: str | None = None) -> list[list[str]]:
    """The layers top to bottom, each a list of packages (or modules: ``common.job.config`` is above the rest of
    ``common.job``)."""
    return [line.split(":", 1)[1].split() for line in (text or marked_block("layers")).splitlines()]


def test_the_layers_name_every_package_of_common_and_every_role():
    listed = {package for layer in layers() for package in layer}
    common = {f"common.{p.stem if p.suffix else p.name}" for p in (REPO / "common").iterdir()
              if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    packages = {name for name in listed if name.count(".") <= 1}
    assert packages == common | set(ROLES), (sorted(common - packages), sorted(packages - common - set(ROLES)))
    modules = sorted(name for name in listed if name.count(".") > 1)
    missing = [name for name in modules if not REPO.joinpath(*name.split(".")).with_suffix(".py").exists()]
    assert not missing, missing


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("common", *ROLES)  # imports inside functions and under TYPE_CHECKING included


def layer_of(module: str, rank: dict[str, int]) -> tuple[str, int] | None:
    """The most specific entry of the layers that holds ``module`` (its module, else its package), with its rank."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in rank:
            return name, rank[name]
    return None


def upward_imports(graph, layered: list[list[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a module from its own layer's other package, or from above."""
    rank = {package: i for i, layer in enumerate(layered) for package in layer}  # 0 is the top
    found = set()
    for module in graph.modules:
        importer = layer_of(module, rank)
        if importer is None and any(package.startswith(module + ".") for package in rank):
            importer = (module, len(layered))  # a root of layered packages (common/__init__.py): below them all
        if importer is None:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = layer_of(imported, rank)
            if target is None or target[0] == importer[0]:
                continue
            if target[1] <= importer[1]:
                found.add((module, imported))
    return found


def import_cycle(graph) -> list[str] | None:
    """One cycle of module imports (each imports the next, the last the first), or None."""
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as error:
        return list(reversed(error.args[1][1:]))
    return None


def test_no_import_goes_up_a_layer(graph):
    found = sorted(f"{a} -> {b}" for a, b in upward_imports(graph, layers()))
    assert not found, f"imports against docs/architecture.md's layers (import from the layers below): {found}"


def test_no_import_cycle(graph):
    cycle = import_cycle(graph)
    assert cycle is None, "an import cycle: " + " -> ".join(cycle + cycle[:1])


def test_the_checks_see_imports_inside_functions_and_for_types(tmp_path, monkeypatch):
    """The two checks above on a package made here: a cycle closed only by an import inside a function, and an
    upward import only under TYPE_CHECKING, are both found."""
    package = tmp_path / "layered_demo"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "base.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                             "    from layered_demo import high\n")
    (package / "low" / "a.py").write_text("from layered_demo.low import b\n")
    (package / "low" / "b.py").write_text("def later():\n    from layered_demo.low import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    demo = grimp.build_graph("layered_demo", cache_dir=None)
    assert upward_imports(demo, layers("top: layered_demo.high\nbottom: layered_demo.low")) == {
        ("layered_demo.low.base", "layered_demo.high")}
    assert sorted(import_cycle(demo) or []) == ["layered_demo.low.a", "layered_demo.low.b"]
    (package / "low" / "b.py").write_text("def later():\n    pass\n")
    assert import_cycle(grimp.build_graph("layered_demo", cache_dir=None)) is None


def test_an_import_in_a_layered_packages_own_init_is_found(tmp_path, monkeypatch):
    """``common/__init__.py`` is in no layer (only its packages are), so an import of a role there went unseen:
    a root holding layered packages is below all of them, and what it imports from any layer goes up."""
    package = tmp_path / "rooted_demo"
    (package / "low").mkdir(parents=True)
    (package / "low" / "__init__.py").write_text("")
    (package / "high.py").write_text("")
    (package / "__init__.py").write_text("from rooted_demo import high\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    demo = grimp.build_graph("rooted_demo", cache_dir=None)
    assert upward_imports(demo, layers("top: rooted_demo.high\nbottom: rooted_demo.low")) == {
        ("rooted_demo", "rooted_demo.high")}


def test_design_md_points_here():
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    assert "architecture.md" in design[:2000]
    assert Path(REPO / "docs" / "architecture.md").exists()


def test_the_installed_top_level_names_are_the_ones_the_doc_lists():
    """setup.cfg ships exactly the packages docs/architecture.md names as installed (bench/ and tests/ not)."""
    import configparser
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    included = config["options.packages.find"]["include"]
    shipped = {line.strip().split(".")[0] for line in included.splitlines()
               if line.strip() and not line.strip().startswith("#")}
    paragraph = DOC[DOC.index("<!-- installed top-level names:"):].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(\w+)`", paragraph.split("(setup.cfg", 1)[0]))
    assert shipped == listed, (shipped, listed)
    assert not shipped & {"bench", "tests"}
