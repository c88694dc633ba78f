"""deploy/kubernetes, validated offline (no cluster can run here): the base and every overlay render, every
object is valid against the Kubernetes OpenAPI schemas (kubernetes-validate), KEDA's ScaledObject is checked
structurally, and the wiring holds: selectors match the pods' labels, ports agree with the command lines'
defaults and with each other, resources match --processes, and the KEDA query names a metric a live ventilator
serves."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import click
import pytest
import yaml

from common.wire.transport import SINK_PORT, VENTILATOR_PORT
from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, need_shared, python_module, scrape

KUBE = REPO / "deploy" / "kubernetes"
BASE = KUBE / "base"
OVERLAYS = sorted(p.parent for p in (KUBE / "overlays").glob("*/kustomization.yaml"))
KUBECTL = shutil.which("kubectl")
KEDA_API = "keda.sh/v1alpha1"
MONITORING_API = "monitoring.coreos.com/v1"
#: The oldest Kubernetes minor the manifests are validated against; every newer one kubernetes-validate ships is
#: too.  Upstream supports its last three minors, managed services (EKS, GKE, AKS) older ones for longer: 1.28 covers
#: every cluster still in any of those supports when this was written.  Raise it as they retire.
OLDEST_KUBERNETES = (1, 28)


def render_by_concatenation(directory: Path) -> list[dict]:
    """The base without kustomize: its kustomization may only list resources, so this is what kustomize gives
    (in another order)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    extra = set(kustomization) - {"apiVersion", "kind", "resources"}
    assert not extra, f"the base must only list resources (render_by_concatenation would miss {extra})"
    objects = []
    for name in kustomization["resources"]:
        objects += [doc for doc in yaml.safe_load_all((directory / name).read_text()) if doc]
    return objects


def render_by_kustomize(directory: Path) -> list[dict]:
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


COMPONENTS = sorted(p.parent for p in (KUBE / "components").glob("*/kustomization.yaml"))


def renders() -> dict[str, list[dict]]:
    """Every rendering users can apply: the base, and each overlay where kubectl can build it."""
    out = {"base": render_by_concatenation(BASE)}
    if KUBECTL:
        for overlay in OVERLAYS:
            out[f"overlays/{overlay.name}"] = render_by_kustomize(overlay)
    return out


def test_every_component_is_used_by_an_overlay():
    """A component is rendered (and so validated) only through an overlay that uses it."""
    used = {(overlay / c).resolve() for overlay in OVERLAYS
            for c in yaml.safe_load((overlay / "kustomization.yaml").read_text()).get("components", [])}
    assert set(COMPONENTS) <= used


RENDERS = renders()


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pods(objects: list[dict]) -> dict[str, dict]:
    """Pod templates by their owner's name."""
    return {o["metadata"]["name"]: o["spec"]["template"] for o in objects if o["kind"] in ("Job", "Deployment")}


def flag(container: dict, name: str) -> str | None:
    """The value of --name=VALUE in a container's args (the manifests use that one form)."""
    values = [a.split("=", 1)[1] for a in container.get("args", []) if a.startswith(f"--{name}=")]
    assert len(values) <= 1, f"--{name} given twice in {container['name']}"
    return values[0] if values else None


def selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels is checked here: {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def test_base_renders_the_same_by_kustomize_and_by_concatenation():
    if not KUBECTL:
        pytest.skip("no kubectl on PATH (for `kubectl kustomize`); the base is still tested by concatenation")
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(render_by_kustomize(BASE), key=key) == sorted(render_by_concatenation(BASE), key=key)


def test_overlays_are_rendered():
    if not KUBECTL:
        pytest.skip("no kubectl on PATH: overlays need `kubectl kustomize` (patches); the base is tested")
    assert OVERLAYS and all(f"overlays/{o.name}" in RENDERS for o in OVERLAYS)
    example = RENDERS["overlays/example"]
    assert {o["metadata"].get("namespace") for o in example} == {"mlm"}
    accounts = by_kind(example, "ServiceAccount")
    assert all("eks.amazonaws.com/role-arn" in a["metadata"]["annotations"] for a in accounts.values())


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_every_object_is_valid(name):
    import kubernetes_validate

    objects = RENDERS[name]
    kinds = {o["kind"] for o in objects}
    assert {"Job", "Service", "Deployment", "ServiceAccount", "ConfigMap", "PodDisruptionBudget",
            "NetworkPolicy", "ScaledObject"} <= kinds
    for obj in objects:
        if obj["apiVersion"] == KEDA_API:
            check_scaled_object(obj)
            continue
        if obj["apiVersion"] == MONITORING_API:
            check_monitor(obj)
            continue
        for version in supported_versions():
            # strict: an unknown field (a typo, a field of another version) is an error, not ignored
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                raise AssertionError(f"{obj['kind']} {obj['metadata']['name']} on Kubernetes {version}: "
                                     f"{error.message}") from None


def supported_versions() -> list[str]:
    """Every Kubernetes version kubernetes-validate has schemas for, from OLDEST_KUBERNETES on."""
    from kubernetes_validate import utils

    versions = sorted({v for v in utils.all_versions() if tuple(map(int, v.split(".")[:2])) >= OLDEST_KUBERNETES},
                      key=lambda v: tuple(map(int, v.split("."))))
    assert len(versions) >= 3, versions
    return versions


def check_scaled_object(obj: dict) -> None:
    """KEDA's CRD is not among kubernetes-validate's schemas: its required shape, by hand (keda.sh/v1alpha1)."""
    assert obj["kind"] == "ScaledObject"
    spec = obj["spec"]
    assert set(spec) <= {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval",
                         "cooldownPeriod", "idleReplicaCount", "initialCooldownPeriod", "fallback", "advanced",
                         "triggers"}, spec
    assert isinstance(spec["scaleTargetRef"]["name"], str)
    for field in ("minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod"):
        assert isinstance(spec[field], int) and spec[field] >= 0, field
    assert spec["maxReplicaCount"] > spec["minReplicaCount"]
    assert spec["triggers"]
    for trigger in spec["triggers"]:
        assert set(trigger) <= {"type", "metadata", "name", "metricType", "authenticationRef", "useCachedMetrics"}
        # KEDA reads trigger metadata as map[string]string: a bare number is refused by the API server
        assert all(isinstance(v, str) for v in trigger["metadata"].values()), trigger["metadata"]


def check_monitor(obj: dict) -> None:
    """The Prometheus Operator's CRDs are not among kubernetes-validate's schemas: their shape, by hand."""
    assert obj["kind"] in ("ServiceMonitor", "PodMonitor"), obj["kind"]
    spec = obj["spec"]
    endpoints = "endpoints" if obj["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    assert set(spec) <= {"selector", endpoints, "namespaceSelector", "jobLabel"}, spec
    assert set(spec["selector"]) == {"matchLabels"}
    for endpoint in spec[endpoints]:
        assert set(endpoint) <= {"port", "path", "interval", "scheme", "scrapeTimeout"}, endpoint
        assert isinstance(endpoint["port"], str), "a port by name"


def prometheus_of(objects: list[dict]) -> tuple[str, str]:
    """Which Prometheus the ScaledObject reads, from its server's Service name: ("annotations", "") for the
    prometheus-community chart's prometheus-server, ("operator", RELEASE) for kube-prometheus-stack's
    RELEASE-prometheus."""
    (trigger,) = by_kind(objects, "ScaledObject")["mlm-worker"]["spec"]["triggers"]
    host = re.match(r"https?://([^.:/]+)", trigger["metadata"]["serverAddress"]).group(1)
    if host == "prometheus-server":
        return "annotations", ""
    assert host.endswith("-prometheus"), f"a Prometheus this test does not know: {host}"
    return "operator", host.removesuffix("-prometheus")


def scraped(objects: list[dict], prometheus: tuple[str, str]) -> set[tuple[str, int]]:
    """(pod template's owner, container port) pairs the given Prometheus scrapes, by its discovery rules:
    the prometheus-community chart's jobs kubernetes-pods (a pod's prometheus.io/scrape and /port annotations) and
    kubernetes-service-endpoints (a Service's, on the pods it selects); the Prometheus Operator's ServiceMonitors
    labelled release=RELEASE (a Service by labels, its port by name, to the pods' named container port) and
    PodMonitors (pods by labels, a container port by name); kube-prometheus-stack ignores annotations."""
    templates = pods(objects)

    def container_port(template: dict, port) -> int:
        ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        return ports[port] if isinstance(port, str) else int(port)

    kind, release = prometheus
    targets = set()
    if kind == "annotations":
        for owner, template in templates.items():
            annotations = template["metadata"].get("annotations", {})
            if annotations.get("prometheus.io/scrape") == "true":
                targets.add((owner, int(annotations["prometheus.io/port"])))
        for service in by_kind(objects, "Service").values():
            annotations = service["metadata"].get("annotations", {})
            if annotations.get("prometheus.io/scrape") == "true":
                targets |= {(owner, int(annotations["prometheus.io/port"])) for owner, template in templates.items()
                            if selects({"matchLabels": service["spec"]["selector"]}, template["metadata"]["labels"])}
        return targets
    for monitor in by_kind(objects, "ServiceMonitor").values():
        if monitor["metadata"].get("labels", {}).get("release") != release:
            continue
        for service in by_kind(objects, "Service").values():
            if not selects(monitor["spec"]["selector"], service["metadata"].get("labels", {})):
                continue
            ports = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
            for endpoint in monitor["spec"]["endpoints"]:
                targets |= {(owner, container_port(template, ports[endpoint["port"]]))
                            for owner, template in templates.items()
                            if selects({"matchLabels": service["spec"]["selector"]}, template["metadata"]["labels"])}
    for monitor in by_kind(objects, "PodMonitor").values():
        if monitor["metadata"].get("labels", {}).get("release") == release:
            for owner, template in templates.items():
                if selects(monitor["spec"]["selector"], template["metadata"]["labels"]):
                    targets |= {(owner, container_port(template, e["port"]))
                                for e in monitor["spec"]["podMetricsEndpoints"]}
    return targets


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_the_prometheus_keda_reads_scrapes_the_ventilator_and_the_sink(name):
    """The Prometheus the ScaledObject queries scrapes, by the shipped objects alone, the ventilator's
    --metrics-port (where its query's mlm_ventilator_* series are served: the live test below) and the sink's
    --sink-metrics-port; else KEDA sees no series and keeps the workers at zero."""
    objects = RENDERS[name]
    (ventilator,) = pods(objects)["mlm-ventilator"]["spec"]["containers"]
    (trigger,) = by_kind(objects, "ScaledObject")["mlm-worker"]["spec"]["triggers"]
    metrics = set(re.findall(r"([a-z_:][a-z0-9_:]*)\{", trigger["metadata"]["query"]))
    assert metrics and all(m.startswith("mlm_ventilator_") for m in metrics), "served on the ventilator's port"
    targets = scraped(objects, prometheus_of(objects))
    assert ("mlm-ventilator", int(flag(ventilator, "metrics-port"))) in targets, targets
    assert ("mlm-ventilator", int(flag(ventilator, "sink-metrics-port"))) in targets, targets


def test_the_example_overlay_is_for_kube_prometheus_stack():
    if not KUBECTL:
        pytest.skip("no kubectl on PATH: overlays need `kubectl kustomize`")
    assert prometheus_of(RENDERS["overlays/example"]) == ("operator", "kube-prometheus-stack")
    assert prometheus_of(RENDERS["base"]) == ("annotations", "")


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_selectors_match_their_pods(name):
    objects = RENDERS[name]
    templates = pods(objects)
    ventilator_labels = templates["mlm-ventilator"]["metadata"]["labels"]
    worker_labels = templates["mlm-worker"]["metadata"]["labels"]
    deployment = by_kind(objects, "Deployment")["mlm-worker"]
    assert selects(deployment["spec"]["selector"], worker_labels)
    service = by_kind(objects, "Service")["mlm-ventilator"]
    assert selects({"matchLabels": service["spec"]["selector"]}, ventilator_labels)
    assert not selects({"matchLabels": service["spec"]["selector"]}, worker_labels)
    budgets = by_kind(objects, "PodDisruptionBudget")
    assert selects(budgets["mlm-ventilator"]["spec"]["selector"], ventilator_labels)
    assert budgets["mlm-ventilator"]["spec"]["maxUnavailable"] == 0
    assert selects(budgets["mlm-worker"]["spec"]["selector"], worker_labels)
    policies = by_kind(objects, "NetworkPolicy")
    assert selects(policies["mlm-ventilator"]["spec"]["podSelector"], ventilator_labels)
    assert selects(policies["mlm-worker"]["spec"]["podSelector"], worker_labels)
    scaled = by_kind(objects, "ScaledObject")["mlm-worker"]["spec"]["scaleTargetRef"]
    assert (scaled["kind"], scaled["name"]) == ("Deployment", deployment["metadata"]["name"])
    accounts = by_kind(objects, "ServiceAccount")
    for template in templates.values():
        assert template["spec"]["serviceAccountName"] in accounts
    assert templates["mlm-ventilator"]["spec"]["serviceAccountName"] != templates["mlm-worker"]["spec"][
        "serviceAccountName"], "each side gets its own IAM role"


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_ports_agree_with_the_command_lines(name):
    objects = RENDERS[name]
    templates = pods(objects)
    (ventilator,) = templates["mlm-ventilator"]["spec"]["containers"]
    (worker,) = templates["mlm-worker"]["spec"]["containers"]
    assert ventilator["command"] == ["mlm-ventilator"] and worker["command"] == ["mlm-worker"]
    assert int(flag(ventilator, "vport")) == VENTILATOR_PORT
    assert int(flag(ventilator, "sink-port")) == SINK_PORT
    listening = {"tasks": VENTILATOR_PORT, "acks": SINK_PORT, "metrics": int(flag(ventilator, "metrics-port")),
                 "sink-metrics": int(flag(ventilator, "sink-metrics-port"))}
    assert {p["name"]: p["containerPort"] for p in ventilator["ports"]} == listening
    service = by_kind(objects, "Service")["mlm-ventilator"]
    assert {p["targetPort"]: p["port"] for p in service["spec"]["ports"]} == listening
    host, port = flag(worker, "ventilator").rsplit(":", 1)
    assert host == service["metadata"]["name"] and int(port) == VENTILATOR_PORT
    annotations = templates["mlm-ventilator"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == listening["metrics"]
    policy = by_kind(objects, "NetworkPolicy")["mlm-ventilator"]["spec"]["ingress"]
    from_workers = [rule for rule in policy if any(selects(peer.get("podSelector", {"matchLabels": {"x": "-"}}),
                                                           templates["mlm-worker"]["metadata"]["labels"])
                                                    for peer in rule["from"])]
    assert {p["port"] for rule in from_workers for p in rule["ports"]} == {VENTILATOR_PORT, SINK_PORT}
    assert {p["port"] for rule in policy for p in rule["ports"]} == set(listening.values())
    assert by_kind(objects, "NetworkPolicy")["mlm-worker"]["spec"]["ingress"] == []


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_requests_match_processes_and_grace_covers_the_drain(name):
    templates = pods(RENDERS[name])
    spec = templates["mlm-worker"]["spec"]
    (worker,) = spec["containers"]
    processes = int(flag(worker, "processes"))
    assert float(worker["resources"]["requests"]["cpu"]) == processes
    assert spec["terminationGracePeriodSeconds"] > float(flag(worker, "drain-seconds"))
    for template in templates.values():
        context = template["spec"]["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == dockerfile_user()
        for container in template["spec"]["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}  # spooling, temp files


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_secrets_and_no_credentials_in_manifests(name):
    objects = RENDERS[name]
    text = yaml.safe_dump_all(objects)
    assert not re.search(r"AKIA|aws_secret_access_key|AWS_SECRET|AWS_ACCESS_KEY", text, re.IGNORECASE)
    assert not by_kind(objects, "Secret"), "keys are made by the user (mlm-keys) and never shipped"
    templates = pods(objects)
    for owner, needed in (("mlm-ventilator", {"server.key", "server.key_secret", "client.key",
                                              "client.key_secret", "authorized/client.key"}),
                          ("mlm-worker", {"server.key", "client.key_secret"})):
        spec = templates[owner]["spec"]
        (container,) = spec["containers"]
        curve_dir = flag(container, "curve-dir")
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == curve_dir]
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert {item["path"] for item in volume["secret"]["items"]} == needed, owner
    worker_secret = [v for v in templates["mlm-worker"]["spec"]["volumes"] if "secret" in v][0]["secret"]
    assert "server.key_secret" not in {i["key"] for i in worker_secret["items"]}


def test_job_settings_are_ventilator_options():
    """Every MLM_* variable the ConfigMaps set is one the ventilator reads (a typo, or another role's variable,
    would be silently ignored)."""
    from ventilator.cli import main

    context = click.Context(main, auto_envvar_prefix=main.context_settings["auto_envvar_prefix"])
    read = {p.envvar for p in main.get_params(context) if isinstance(p.envvar, str)}
    for name, objects in RENDERS.items():
        data = by_kind(objects, "ConfigMap")["mlm-job"]["data"]
        assert set(data) <= read, f"{name}: {set(data) - read}"
        assert {"MLM_VENTILATOR_DATA", "MLM_VENTILATOR_OUTPUT"} <= set(data)


def dockerfile_user() -> int:
    lines = (KUBE / "Dockerfile").read_text().splitlines()
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users, "the image runs as root"
    uid = int(users[-1].split(":")[0])
    assert uid != 0
    return uid


def test_dockerfile_builds_the_package_from_what_it_copies(tmp_path):
    """The files the Dockerfile copies make a wheel with every package and the commands the manifests run."""
    import configparser

    text = (KUBE / "Dockerfile").read_text()
    assert re.search(r"^FROM python:[\d.]+-slim", text, re.MULTILINE)
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.MULTILINE)
    sources = [s for line in copied for s in line.split()]
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    packages = {p.strip().split(".")[0] for p in config["options.packages.find"]["include"].split() if p.strip()}
    assert packages <= set(sources), f"not copied into the image: {packages - set(sources)}"
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert all(f"!{s}" in ignored or f"!{s}/" in ignored for s in sources), "copied but excluded by .dockerignore"
    build = tmp_path / "src"
    for source in sources:
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, build / source, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            build.mkdir(exist_ok=True)
            shutil.copy(REPO / source, build / source)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                             "--wheel-dir", str(tmp_path / "wheels"), str(build)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert packages == {n.split("/")[0] for n in names if n.endswith(".py")}
    assert any(n.startswith("common/_kernels") and n.endswith(".so") for n in names), "the kernels were not compiled"
    assert "**/*.so" in ignored  # a checkout's in-place build never reaches the image
    for template in pods(RENDERS["base"]).values():
        for container in template["spec"]["containers"]:
            assert re.search(rf"^{container['command'][0]} = ", entry_points, re.MULTILINE)


@pytest.mark.e2e
def test_keda_query_names_a_metric_a_live_ventilator_serves(tmp_path):
    """The ScaledObject's query, against what a real ventilator serves on its --metrics-port mid-job."""
    need_shared()
    selectors = set()
    for objects in RENDERS.values():
        for trigger in by_kind(objects, "ScaledObject")["mlm-worker"]["spec"]["triggers"]:
            assert trigger["type"] == "prometheus"
            selectors |= set(re.findall(r"([a-z_:][a-z0-9_:]*)\{([^}]*)\}", trigger["metadata"]["query"]))
    assert selectors
    vport, sink_port, metrics_port = free_ports(3)
    ventilator = python_module("ventilator", "--data", WIKI, "--output", tmp_path / "out", "--vocab-file", VOCAB,
                               "--task-size", "256K", "--vport", vport, "--sink-port", sink_port, "--bind-host",
                               "127.0.0.1", "--metrics-port", metrics_port, "--state-dir", tmp_path / "state")
    try:
        deadline = time.monotonic() + 120
        while True:  # no workers: every task stays pending
            try:
                samples = scrape(metrics_port)
                break
            except OSError:
                assert ventilator.poll() is None and time.monotonic() < deadline, ventilator.stdout.read()[-2000:]
                time.sleep(0.3)
    finally:
        ventilator.terminate()
        ventilator.wait(timeout=60)
    for metric, matchers in selectors:
        wanted = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', matchers)))
        matching = {labels: value for (sample, labels), value in samples.items()
                    if sample == metric and set(wanted) <= set(labels)}
        assert matching, f"{metric}{{{matchers}}} is not served; the ventilator serves {sorted(samples)[:20]}"
        assert sum(matching.values()) > 0, "pending tasks before any worker came"
