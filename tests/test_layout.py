"""The layout of the tree holds (docs/design.md, "Layout of common/" and "The public plugin API").

Cross-cutting, so at the root of tests/: it reads every package's imports.  The import graph is read from
the source (every import, at the top or inside a function), and the wire's independence is also checked in a
fresh interpreter, where a lazy import or a package ``__init__`` that the source reading misses would show.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.support.helpers import REPO

PROJECT = ("mlm_pipeline", "common", "ventilator", "worker", "sink", "loader", "report")
ROLES = ("ventilator", "worker", "sink", "loader", "report")
#: The axis packages of common/ (docs/design.md, "The axes"), and tokenization and dedup (until it moves into its
#: step) beside them.
AXES = ("steps", "readers", "segmenters", "word_segmenters", "objectives", "writers", "storage", "tokenization",
        "dedup")
#: The parts of common/ that are not axes.
PARTS = ("wire", "output", "job", "describe")
#: Small leaves every role uses, kept loose in common/ on purpose (docs/design.md says why); kernels loads the
#: compiled common._kernels built beside it.
LOOSE = {"__init__", "hashing", "lazy_import", "logs", "metrics", "version", "protobuf_wire", "kernels", "one_blas_thread"}
#: What the wire may import of the project: itself, and the neutral record of a written file.
WIRE_MAY_IMPORT = ("common.wire", "common.output.files")
#: Edges that break a rule today, each with the change that removes it.  Remove a line when its edge goes.
KNOWN: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PROJECT for path in sorted((REPO / package).rglob("*.py"))}


def imported(path: Path) -> set[str]:
    """The project modules ``path`` imports (``from a.b import c`` counts a.b.c when that is a module)."""
    modules = project_modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing module's package
                package = module_name(path).split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
    return {name for name in found if name.split(".")[0] in PROJECT}


@cache
def graph() -> dict[str, set[str]]:
    return {name: imported(path) for name, path in project_modules().items()}


def edges(source_prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    return sorted((source, target) for source, targets in graph().items()
                  if source.startswith(source_prefixes) for target in targets)


def under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_common_has_no_loose_module_but_its_leaves():
    loose = {path.stem for path in (REPO / "common").glob("*.py")}
    assert loose - LOOSE == set(), "place these in a part of common/ (docs/design.md, \"Layout of common/\")"
    parts = {path.name for path in (REPO / "common").iterdir() if (path / "__init__.py").exists()}
    assert parts <= set(AXES) | set(PARTS), "a new package of common/: say in docs/design.md which part it is"
    assert set(PARTS) <= parts


def test_the_wire_imports_nothing_of_the_job_the_steps_or_the_axes():
    wrong = [(source, target) for source, target in edges(("common.wire",))
             if not under(target, WIRE_MAY_IMPORT) and (source, target) not in KNOWN]
    assert wrong == []


#: What importing each wire module may load of the project besides common and common.wire: the neutral file
#: record (the Welcome carries the job encoded, so nothing of common.job).
FRESH = {"common.wire.transport": set(), "common.wire.envelope": set(), "common.wire.security": set(),
         "common.wire.inbox": set(), "common.wire.protocol": {"common.output", "common.output.files"}}


@pytest.mark.parametrize("module", sorted(FRESH))
def test_the_wire_loads_no_step_axis_or_role_in_a_fresh_interpreter(module):
    loaded = subprocess.run([sys.executable, "-c", f"import sys, {module}; print(*sorted(sys.modules))"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    project = {name for name in loaded if name.split(".")[0] in PROJECT}
    assert project - {"common"} - {name for name in project if under(name, ("common.wire",))} <= FRESH[module]


def test_common_imports_no_role_and_nothing_imports_the_public_api():
    assert [(s, t) for s, t in edges(("common",)) if under(t, ROLES + ("mlm_pipeline",))] == []
    # The public API sits above everything: internal code imports internals, so the API can never be in a cycle.
    assert [(s, t) for s, t in edges(PROJECT) if under(t, ("mlm_pipeline",)) and not s.startswith("mlm_pipeline")] \
        == []


def test_the_public_api_names_resolve_to_the_internal_objects():
    import importlib

    from mlm_pipeline import plugin

    assert sorted(plugin.__all__) == sorted(plugin._WHERE)
    for name, where in plugin._WHERE.items():
        assert getattr(plugin, name) is getattr(importlib.import_module(where), name), name
    with pytest.raises(AttributeError, match="the public names"):
        plugin.NoSuchThing  # noqa: B018
    # What mypy sees (the TYPE_CHECKING imports) is what the module hands out.
    tree = ast.parse((REPO / "mlm_pipeline" / "plugin.py").read_text())
    checking = next(node for node in tree.body if isinstance(node, ast.If))  # if TYPE_CHECKING:
    typed = {alias.name: statement.module for statement in checking.body if isinstance(statement, ast.ImportFrom)
             for alias in statement.names}
    assert typed == plugin._WHERE


def test_a_plugin_importing_a_step_loads_no_ventilator_module():
    loaded = subprocess.run([sys.executable, "-c", "import sys; from mlm_pipeline.plugin import Step, param; "
                             "print(*sorted(sys.modules))"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    assert "common.steps.base" in loaded
    assert [name for name in loaded if under(name, ("ventilator", "worker", "sink"))] == []


def test_the_plugin_packages_of_the_tests_import_only_the_public_api():
    demo = REPO / "tests" / "data" / "plugin_demo"
    plugins = [*sorted(path for path in demo.rglob("*.py") if "build" not in path.relative_to(demo).parts),
               REPO / "tests" / "common" / "writers" / "throwaway_format.py"]
    for path in plugins:
        roots = {name.split(".")[0] for name in imported(path)}
        assert roots <= {"mlm_pipeline"}, f"{path.relative_to(REPO)} imports {sorted(imported(path))}"


def test_a_plugin_step_with_a_side_needs_only_the_public_api(tmp_path):
    """A step that adds a side and its sections (docs/design.md, "How a step describes itself") declares them
    with ``Side``, ``InfoSection`` and ``ReportSection``: tests/common/steps/test_describe.py's plugin step
    imports them, as a plugin's author would, from the public API alone."""
    from tests.common.steps.test_describe import PLUGIN

    source = tmp_path / "demo_validation.py"
    source.write_text(PLUGIN)
    assert {name.split(".")[0] for name in imported(source)} <= {"mlm_pipeline"}, sorted(imported(source))
