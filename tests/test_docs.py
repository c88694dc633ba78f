"""Cross-cutting: the docs say what the code does, whatever package it is in.  Numbers and names the README and
the shipped dashboard state, checked against their source (the metrics a live role serves are checked by
tests/e2e/test_grafana_dashboard.py)."""

from __future__ import annotations

import json
import re

from common.wire.protocol import PROTOCOL_VERSION
from tests.support.helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_states_the_protocol_version_in_use():
    stated = re.findall(r"`common/wire/protocol\.py`, version (\d+)", README)
    assert stated == [str(PROTOCOL_VERSION)]


def test_the_dashboard_declares_only_inputs_it_uses():
    """Grafana's import asks for every `__inputs` entry; one no panel names (`${DS_PROMETHEUS}`) is a question
    whose answer goes nowhere.  Every `${variable}` a panel names is an input or a templating variable."""
    text = (REPO / "deploy" / "grafana" / "mlm-pipeline.json").read_text()
    dashboard = json.loads(text)
    inputs = {i["name"] for i in dashboard.get("__inputs", [])}
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    used = set(re.findall(r"\$\{(\w+)\}", text))
    assert inputs <= used, f"declared, never used: {sorted(inputs - used)}"
    assert used <= inputs | variables, f"used, never declared: {sorted(used - inputs - variables)}"


def readme_metrics() -> set[str]:
    """The metric names the README's metric table lists (a name, or a name with its labels)."""
    start = README.index("| Role | Metrics |")
    table = README[start:README.index("\n\n", start)]
    return set(re.findall(r"`(mlm_[a-z0-9_]+)", table))
