"""Ansible without hosts: syntax, lint, the rendered systemd unit, the secret guard,
and mlm-procctl (the pidfile process manager the playbooks use without systemd).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.fleet.fleethelpers import ANSIBLE_DIR, ansible_env, ansible_tool, terraform_binary

PLAYBOOKS = ["ping.yaml", "init.yaml", "ventilating.yaml", "working.yaml", "waiting.yaml", "stopping.yaml", "job.yaml"]
PROCCTL = ANSIBLE_DIR / "roles" / "mlm" / "files" / "mlm-procctl"


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check(playbook, tmp_path):
    proc = subprocess.run([ansible_tool("ansible-playbook"), "--syntax-check", "-i",
                           str(ANSIBLE_DIR / "inventory" / "static.example.yml"), playbook],
                          cwd=ANSIBLE_DIR, capture_output=True, text=True, env=ansible_env(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_static_example_inventory_has_the_terraform_shape():
    inventory = yaml.safe_load((ANSIBLE_DIR / "inventory" / "static.example.yml").read_text())
    children = inventory["all"]["children"]
    assert set(children) == {"ventilator", "worker"}
    assert len(children["ventilator"]["hosts"]) == 1
    for group in children.values():
        for host in group["hosts"].values():
            assert {"ansible_host", "mlm_private_address"} <= set(host)


def test_no_secrets_or_etc_environment():
    for path in ANSIBLE_DIR.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        assert "/etc/environment" not in text, path
        assert not re.search(r"AKIA[0-9A-Z]{16}", text), path
        assert not re.search(r"aws_secret_access_key\s*[:=]", text, re.I), path


def _play(tmp_path: Path, tasks: list, extra_vars: dict) -> subprocess.CompletedProcess:
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"name": "test", "hosts": "localhost", "gather_facts": False,
                                         "tasks": tasks}]))
    (tmp_path / "vars.json").write_text(json.dumps({"ansible_python_interpreter": sys.executable, **extra_vars}))
    env = ansible_env(tmp_path)
    env["ANSIBLE_ROLES_PATH"] = str(ANSIBLE_DIR / "roles")
    return subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"@{tmp_path / 'vars.json'}", str(playbook)],
                          capture_output=True, text=True, env=env, timeout=180)


def test_credentials_in_mlm_env_are_refused(tmp_path):
    proc = _play(tmp_path, [{"name": "m", "ansible.builtin.include_role": {"name": "mlm", "tasks_from": "manager"}}],
                 {"mlm_process_manager": "pidfile", "mlm_env": {"AWS_SECRET_ACCESS_KEY": "x"}})
    assert proc.returncode != 0 and "must not" in proc.stdout, proc.stdout
    proc = _play(tmp_path, [{"name": "m", "ansible.builtin.include_role": {"name": "mlm", "tasks_from": "manager"}}],
                 {"mlm_process_manager": "pidfile", "mlm_env": {"AWS_REGION": "us-east-1"}})
    assert proc.returncode == 0, proc.stdout


def _service_keys(unit: str) -> dict[str, str]:
    section, keys = None, {}
    for line in unit.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif "=" in line and not line.startswith("#") and section == "[Service]":
            key, _, value = line.partition("=")
            if key != "Environment":
                keys[key] = value
    return keys


def test_worker_unit_renders_valid_and_matches_terraform(tmp_path, request):
    """working.yaml's unit passes systemd-analyze verify and has the same [Service] policy as cloud-init's."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("mlm-worker", "mlm-ventilator"):
        (venv / "bin" / name).write_text("#!/bin/sh\n")
        (venv / "bin" / name).chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    proc = _play(tmp_path, [{
        "name": "render",
        "ansible.builtin.template": {"src": str(ANSIBLE_DIR / "roles/mlm/templates/mlm.service.j2"),
                                     "dest": str(units / "mlm-worker@.service"), "mode": "0644"},
        "vars": {"mlm_unit": {"description": "worker %i", "restart": "on-failure",
                              "argv": [str(venv / "bin/mlm-worker"), "--ventilator", "10.0.0.5:5557",
                                       "--processes", "4", "--odd", "50% of $HOME \"x\""]}},
    }], {"mlm_service_user": "root", "mlm_stop_timeout": 900, "mlm_env": {"AWS_REGION": "us-east-1"}})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    unit = (units / "mlm-worker@.service").read_text()
    assert "Restart=on-failure" in unit and "KillMode=mixed" in unit
    assert '"--odd" "50%% of $$HOME \\"x\\""' in unit, unit
    analyze = shutil.which("systemd-analyze")
    if analyze:
        proc = subprocess.run([analyze, "verify", str(units / "mlm-worker@1.service")],
                              capture_output=True, text=True, timeout=60)
        problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                    if "mlm-worker" in line and re.search(r"ignoring|Unknown|Failed|not executable|Invalid", line)]
        assert not problems, "\n".join(problems)
    if terraform_binary() is None:
        return  # the rest compares with Terraform's rendering of the same unit
    module_outputs = request.getfixturevalue("module_outputs")
    cloud = yaml.safe_load(module_outputs(fleet_name="mlm", number_of_worker=1, bucket_name="b",
                                          ventilator_private_ip="10.0.0.5")["worker_user_data"])
    terraform_unit = next(f["content"] for f in cloud["write_files"] if f["path"].endswith("mlm-worker@.service"))
    ours, theirs = _service_keys(unit), _service_keys(terraform_unit)
    assert set(ours) == set(theirs)
    for key in ("Type", "Restart", "RestartSec", "KillMode", "KillSignal", "TimeoutStopSec"):
        assert ours[key] == theirs[key], key


# ---------------------------------------------------------------- mlm-procctl

def procctl(state: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROCCTL), "--dir", str(state), *args],
                          capture_output=True, text=True, timeout=timeout)


def status(state: Path, name: str) -> dict:
    return json.loads(procctl(state, "status", name).stdout)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "procs"
    yield directory
    # Stop whatever a failed test left behind (only our own supervisors, by pidfile).
    for pidfile in directory.glob("*.pid"):
        procctl(directory, "stop", pidfile.stem, "--timeout", "2")


def test_procctl_start_is_idempotent_and_stop_drains(state):
    script = "trap 'echo draining; sleep 0.3; echo drained; exit 0' TERM; echo up; while :; do sleep 0.05; done"
    first = procctl(state, "start", "w", "--restart", "on-failure", "--", "sh", "-c", script)
    assert first.returncode == 0 and first.stdout.startswith("started"), first.stdout + first.stderr
    second = procctl(state, "start", "w", "--restart", "on-failure", "--", "sh", "-c", script)
    assert second.returncode == 0 and second.stdout.startswith("already running"), second.stdout
    assert procctl(state, "list").stdout.split() == ["w"]
    assert wait_for(lambda: "up" in (state / "w.log").read_text())
    stop = procctl(state, "stop", "w", "--timeout", "10")
    assert stop.returncode == 0 and stop.stdout.startswith("stopped") and "exit code 0" in stop.stdout, stop.stdout
    log = (state / "w.log").read_text()
    assert "draining" in log and "drained" in log, log  # SIGTERM, then the process finished on its own
    again = procctl(state, "stop", "w")
    assert again.returncode == 0 and again.stdout.startswith("not running")
    assert procctl(state, "list").stdout.split() == []


def test_procctl_restarts_on_failure_not_on_success(state):
    procctl(state, "start", "f", "--restart", "on-failure", "--restart-sec", "0.1", "--",
            "sh", "-c", "echo run; sleep 0.1; exit 3")
    assert wait_for(lambda: status(state, "f").get("restarts", 0) >= 2)
    assert status(state, "f")["running"]
    procctl(state, "stop", "f", "--timeout", "5")
    procctl(state, "start", "ok", "--restart", "on-failure", "--", "sh", "-c", "exit 0")
    wait = procctl(state, "wait", "ok", "--timeout", "10")
    assert wait.returncode == 0 and "exit code 0" in wait.stdout
    assert status(state, "ok")["restarts"] == 0


def test_procctl_on_abnormal_restarts_only_after_a_signal(state):
    procctl(state, "start", "v", "--restart", "on-abnormal", "--restart-sec", "0.1", "--", "sh", "-c", "exit 3")
    wait = procctl(state, "wait", "v", "--timeout", "10")
    assert wait.returncode == 1 and "exit code 3" in wait.stdout  # a clean failure is final
    procctl(state, "start", "k", "--restart", "on-abnormal", "--restart-sec", "0.1", "--", "sleep", "30")
    assert wait_for(lambda: status(state, "k").get("pid"))
    os.kill(status(state, "k")["pid"], signal.SIGKILL)  # a crash is resumed
    assert wait_for(lambda: status(state, "k").get("restarts", 0) == 1 and status(state, "k").get("state") == "running")
    procctl(state, "stop", "k", "--timeout", "5")


def test_procctl_changed_command_restarts_or_keeps(state):
    procctl(state, "start", "c", "--", "sleep", "30")
    pid = status(state, "c")["pid"]
    keep = procctl(state, "start", "c", "--on-change", "keep", "--", "sleep", "31")
    assert keep.stdout.startswith("already running") and status(state, "c")["pid"] == pid
    restart = procctl(state, "start", "c", "--", "sleep", "31")
    assert restart.stdout.startswith("command line changed"), restart.stdout
    assert status(state, "c")["argv"] == ["sleep", "31"] and status(state, "c")["pid"] != pid
    procctl(state, "stop", "c", "--timeout", "5")


def test_procctl_kills_after_timeout_and_reports_bad_commands(state):
    procctl(state, "start", "stubborn", "--", "sh", "-c", "trap '' TERM; while :; do sleep 0.05; done")
    assert wait_for(lambda: status(state, "stubborn").get("pid"))
    stop = procctl(state, "stop", "stubborn", "--timeout", "1")
    assert stop.returncode == 1 and "did not stop" in stop.stderr
    assert wait_for(lambda: not status(state, "stubborn")["running"])
    bad = procctl(state, "start", "bad", "--", "/nonexistent/binary")
    assert bad.returncode == 1 and "failed to start" in bad.stderr
    assert procctl(state, "wait", "never-started").returncode == 2


def test_procctl_ignores_a_reused_pid(state):
    state.mkdir(parents=True, exist_ok=True)
    # A pidfile naming a live process that is not ours (pid 1, wrong start time) is not "running".
    (state / "ghost.pid").write_text("1 999999999\n")
    assert not status(state, "ghost")["running"]
    assert procctl(state, "stop", "ghost").stdout.startswith("not running")


def test_process_manager_auto_follows_pid1(tmp_path):
    """mlm_process_manager=auto picks systemd only where PID 1 is systemd (else the pidfile fallback)."""
    proc = _play(tmp_path, [
        {"name": "m", "ansible.builtin.include_role": {"name": "mlm", "tasks_from": "manager"}},
        {"name": "show", "ansible.builtin.debug": {"msg": "PM={{ mlm_pm }}"}},
    ], {"mlm_process_manager": "auto"})
    assert proc.returncode == 0, proc.stdout
    pid1 = Path("/proc/1/comm").read_text().strip()
    assert f"PM={'systemd' if pid1 == 'systemd' else 'pidfile'}" in proc.stdout, proc.stdout


def test_procctl_once_does_not_rerun_a_completed_job(state):
    procctl(state, "start", "job", "--once", "--", "sh", "-c", "exit 0")
    assert procctl(state, "wait", "job", "--timeout", "10").returncode == 0
    again = procctl(state, "start", "job", "--once", "--", "sh", "-c", "exit 0")
    assert again.stdout.startswith("already completed"), again.stdout
    other = procctl(state, "start", "job", "--once", "--", "sh", "-c", "exit 0 # another job")
    assert other.stdout.startswith("started"), other.stdout
    procctl(state, "wait", "job", "--timeout", "10")
    procctl(state, "start", "failed", "--once", "--", "sh", "-c", "exit 5")
    procctl(state, "wait", "failed", "--timeout", "10")
    retry = procctl(state, "start", "failed", "--once", "--", "sh", "-c", "exit 5")
    assert retry.stdout.startswith("started"), "a failed job is started again"
    procctl(state, "wait", "failed", "--timeout", "10")


def test_the_controller_ships_source_not_a_wheel_of_its_own_platform(tmp_path):
    """The compiled kernels make a wheel specific to the platform that built it: a controller that is not the
    hosts' (here one whose Python calls itself macOS on arm64) makes a wheel that pip on this Linux host refuses.
    build-sdist.sh, which init.yaml runs on the controller, makes the same bytes on either platform: source,
    which each host builds (tests/fleet/fleet_netns.py installs it from such a controller)."""
    script = ANSIBLE_DIR / "roles" / "mlm" / "files" / "build-sdist.sh"
    foreign = {**os.environ, "_PYTHON_HOST_PLATFORM": "macosx-11.0-arm64", "PYTHON": sys.executable}
    native = {**os.environ, "PYTHON": sys.executable}
    built = {}
    for name, env in (("foreign", foreign), ("native", native)):
        proc = subprocess.run(["bash", str(script), str(ANSIBLE_DIR.parent), str(tmp_path / name)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        built[name] = Path(proc.stdout.strip().splitlines()[-1])
    assert built["foreign"].name == built["native"].name and built["foreign"].name.endswith(".tar.gz")
    assert built["foreign"].read_bytes() == built["native"].read_bytes(), "the sdist depends on the controller"

    # What the controller used to ship: a wheel of the same source, built where the playbook runs.
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                           "--wheel-dir", str(tmp_path / "wheel"), str(built["foreign"])], env=foreign,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    assert wheel.name.endswith("-macosx_11_0_arm64.whl"), wheel.name
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
                           "--ignore-installed", str(wheel)], env=native, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "is not a supported wheel on this platform" in proc.stderr, proc.stderr
