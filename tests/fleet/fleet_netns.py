"""The whole fleet on a real network: 4 hosts (network namespaces on a bridge,
10.213.0.0/24, one sshd each), driven by the same playbooks over ssh.

host0 runs the ventilator and its sink, host1-3 the workers; the job turns
../shared/corpus/wiki into TFRecord shards in a local directory (the hosts
share this machine's filesystem), and every shard is read back with
TensorFlow. The playbooks run with mlm_process_manager=pidfile (these hosts
have no systemd). Every playbook that should be idempotent is run twice and
the second run must change nothing. Everything is torn down, also on failure.

Not collected by `python -m pytest` (no test_ prefix): it installs the package five times (a venv and a build of
the sdist on each host, then a pinned version), minutes of installing in the suite's clock. scripts/fleet-installs.sh
runs it, as its own step of .ci/run (`python -m pytest -n 0 tests/fleet/fleet_netns.py` by hand).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.fleet import fleetnet
from tests.fleet.fleethelpers import ANSIBLE_DIR, ansible_env, ansible_tool, recap
from tests.support.fake_imds import FakeImds
from tests.support.helpers import REPO, VOCAB
from tests.support.helpers import WIKI as CORPUS
from tests.support.tf_reader import read_columns

pytestmark = pytest.mark.fleet

MAX_SEQ_LENGTH = 128
#: The controller's platform in this test: another OS and architecture than the hosts'.
FOREIGN_PLATFORM = "macosx-11.0-arm64"
#: The worker host without a C compiler.
NO_COMPILER = 2
MAX_PREDICTIONS = 20
HOSTS = 4


def _skip_reasons() -> list[str]:
    reasons = []
    if not CORPUS.is_dir() or not VOCAB.is_file():
        reasons.append(f"needs ../shared (corpus and vocabulary) beside the repository: {CORPUS.parents[1]} is absent")
    problem = fleetnet.preflight()
    if problem:
        reasons.append(f"cannot create test hosts: {problem}")
    for module in ("ventilator", "worker", "sink"):
        proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, timeout=120)
        if proc.returncode != 0:
            reasons.append(f"`python -m {module} --help` fails: the package is not installed or not ready")
            break
    return reasons


@pytest.fixture
def fleet(tmp_path):
    reasons = _skip_reasons()
    if reasons:
        pytest.skip("; ".join(reasons))
    directory = tmp_path / "fleet"
    python = sys.executable
    created = fleetnet.up(str(directory), HOSTS, owner_pid=os.getpid(), python=python)
    try:
        yield created
    finally:
        problems = fleetnet.down(str(directory))
        leftovers = [n for n in fleetnet.list_netns() if n.startswith(created.tag)]
        assert not problems and not leftovers, f"teardown: {problems} {leftovers}"


class Ansible:
    def __init__(self, fleet: fleetnet.Fleet, tmp: Path):
        self.fleet = fleet
        self.env = ansible_env(tmp)
        self.log = tmp / "ansible.log"
        self.vars = tmp / "job-vars.yml"
        purelib = sysconfig.get_paths()["purelib"]
        job = {
            "mlm_python": sys.executable,
            # The hosts share this machine's filesystem: reuse its dependencies (tensorflow-free; pyzmq,
            # tokenizers, ...) instead of downloading them, and its setuptools to build the sdist (no index
            # here). As a plain directory on sys.path, not the venv's system site-packages: those hold the
            # editable install of /work/main, whose import hook would lend a host without a build of its own the
            # controller's common._kernels.
            "mlm_venv_site_packages": False,
            "mlm_venv_extra_site_dirs": [purelib],
            "mlm_pip_extra_args": "--no-deps --no-build-isolation",
            "mlm_sdist_dir": str(tmp / "sdist"),
            "mlm_build_pythonpath": purelib,
            # One worker host has no C compiler: it runs the numpy code.
            "mlm_build_env_host": {fleet.hosts[NO_COMPILER].name: {"CC": "false"}},
            "mlm_build_env": "{{ {'PYTHONPATH': mlm_build_pythonpath}"
                             " | combine(mlm_build_env_host[inventory_hostname] | default({})) }}",
            "mlm_data": str(CORPUS),
            "mlm_output": str(fleet.dir + "/out"),
            "mlm_vocab_file": str(VOCAB),
            "mlm_worker_processes": 1,
            "mlm_stop_timeout": 60,
            "mlm_wait_timeout": 240,
            "mlm_job_args": {"dupe-factor": 1, "task-size": "256K", "max-seq-length": MAX_SEQ_LENGTH,
                             "max-predictions-per-seq": MAX_PREDICTIONS, "random-seed": 12345},
        }
        self.vars.write_text(yaml.safe_dump(job))
        # The controller's platform is not the hosts': the controller's Python calls itself macOS on arm64
        # (sysconfig.get_platform(), which names the wheels it builds), the hosts (over ssh, their own
        # environment) are this machine, Linux.
        self.env["_PYTHON_HOST_PLATFORM"] = FOREIGN_PLATFORM
        # The inventory is a YAML file: the other plugins ansible.cfg enables (amazon.aws.aws_ec2 first) are not
        # loaded on each of the ~17 playbook runs (0.7 CPU-s a run).
        self.env["ANSIBLE_INVENTORY_ENABLED"] = "ansible.builtin.yaml"

    last_output = ""

    def play(self, playbook: str, *extra: str, timeout: float = 300) -> dict[str, dict[str, int]]:
        argv = [ansible_tool("ansible-playbook"), "-i", self.fleet.inventory_path, "-e", f"@{self.vars}",
                *extra, playbook]
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=ANSIBLE_DIR, capture_output=True, text=True, env=self.env, timeout=timeout)
        with open(self.log, "a") as log:
            log.write(f"\n===== {' '.join(argv[1:])} ({time.monotonic() - started:.1f}s, rc {proc.returncode})\n")
            log.write(proc.stdout + proc.stderr)
        assert proc.returncode == 0, f"{playbook} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}\n{self.logs()}"
        self.last_output = proc.stdout
        counts = recap(proc.stdout)
        assert counts, proc.stdout
        assert all(c["unreachable"] == 0 and c["failed"] == 0 for c in counts.values()), proc.stdout
        return counts

    def logs(self) -> str:
        """Tail of every service log on the hosts, for failure messages."""
        parts = []
        for host in self.fleet.hosts:
            for log in sorted(Path(host.dir, "state", "procs").glob("*.log")):
                parts.append(f"--- {host.name} {log.name}\n" + "\n".join(log.read_text().splitlines()[-15:]))
        return "\n".join(parts)


def _changed(counts: dict[str, dict[str, int]]) -> dict[str, int]:
    return {host: c["changed"] for host, c in counts.items() if c["changed"]}


def _status(host: fleetnet.Host, name: str) -> dict:
    path = Path(host.dir, "state", "procs", f"{name}.json")
    return json.loads(path.read_text()) if path.exists() else {}


def test_fleet_job_over_ssh(fleet, tmp_path):
    ansible = Ansible(fleet, tmp_path)
    ventilator, workers = fleet.hosts[0], fleet.hosts[1:]
    worker_names = {h.name for h in workers}

    # Reachable over the bridge with the generated key, and the inventory has the expected shape.
    counts = ansible.play("ping.yaml")
    assert {h.name for h in fleet.hosts} <= set(counts)

    # Install from the local checkout, from a controller whose platform is not the hosts': each host builds the
    # source distribution itself, with its compiler; one host has none (CC=false) and runs the numpy code.
    # The second run changes nothing.
    no_compiler = fleet.hosts[NO_COMPILER]
    first = ansible.play("init.yaml")
    assert all(first[h.name]["changed"] > 0 for h in fleet.hosts)
    kernels = dict(re.findall(r'ok: \[(\S+)\] => \{\s*"msg": "kernels: ([^"]*)"', ansible.last_output))
    assert kernels == {h.name: ("numpy (common/_kernels.c is not built here)" if h is no_compiler else "compiled")
                       for h in fleet.hosts}, kernels
    (sdist,) = (tmp_path / "sdist").iterdir()
    assert sdist.name.endswith(".tar.gz"), "the controller ships source, not a wheel of its own platform"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")  # the hosts' own: this machine's, not the controller's
    for host in fleet.hosts:
        built = sorted(p.name for p in Path(host.dir, "venv").glob("lib/python*/site-packages/common/_kernels*"))
        assert built == (["_kernels.c"] if host is no_compiler else ["_kernels.c", f"_kernels{suffix}"]), built
    assert _changed(ansible.play("init.yaml")) == {}, "init.yaml is not idempotent"

    # Workers start (no ventilator yet: they wait for it); the second run changes nothing.
    assert set(_changed(ansible.play("working.yaml"))) == worker_names
    assert _changed(ansible.play("working.yaml")) == {}, "working.yaml is not idempotent"
    pids = {h.name: _status(h, "worker@1")["pid"] for h in workers}

    # Graceful drain: SIGTERM, wait; the workers exit 0. Nothing left to stop the second time.
    assert set(_changed(ansible.play("stopping.yaml"))) == worker_names
    for host in workers:
        status = _status(host, "worker@1")
        assert status["state"] == "exited" and status["exit_code"] == 0, status
        assert not fleetnet.pid_alive(pids[host.name])
    assert _changed(ansible.play("stopping.yaml")) == {}, "stopping.yaml is not idempotent"

    # Workers again, waiting for a ventilator (so that every host is up when the tasks come);
    # then the ventilator and its sink on host0 (the second run changes nothing), and the job
    # runs over the bridge; waiting.yaml checks everyone exited 0.
    # One worker host watches a fake IMDSv2 served on the bridge (--spot-watch); once the job
    # has shards, it says the spot instance is going: that host drains mid-job and exits 0.
    drained = workers[0]
    longer = ["-e", json.dumps({"mlm_job_args": {**yaml.safe_load(ansible.vars.read_text())["mlm_job_args"],
                                                 "dupe-factor": 10}})]
    with FakeImds(host=fleet.bridge_address) as imds:
        watch = ["-e", json.dumps({"mlm_imds_args": {drained.name: [
                     "--spot-watch", "--spot-watch-seconds", "0.1", "--imds-endpoint", imds.endpoint]}}),
                 "-e", '{"mlm_worker_extra_args": "{{ mlm_imds_args[inventory_hostname] | default([]) }}"}']
        ansible.play("working.yaml", *watch)
        assert "--spot-watch" in _status(drained, "worker@1")["argv"]
        assert "--spot-watch" not in _status(workers[1], "worker@1")["argv"]
        notice = threading.Thread(target=_notice_after_first_shard, args=(imds, Path(fleet.dir, "out")), daemon=True)
        notice.start()
        assert set(_changed(ansible.play("ventilating.yaml", *longer))) == {ventilator.name}
        assert _changed(ansible.play("ventilating.yaml", *longer)) == {}, "ventilating.yaml is not idempotent"
        ansible.play("waiting.yaml", timeout=400)
        notice.join(timeout=5)
        assert imds.polled("/latest/meta-data/spot/instance-action") > 0, "the watched worker never asked IMDS"
    assert _status(ventilator, "ventilator")["exit_code"] == 0, ansible.logs()
    drained_log = Path(drained.dir, "state", "procs", "worker@1.log").read_text()
    assert "interruption watch: spot-interruption" in drained_log, drained_log[-3000:]
    assert re.search(r"drained, exiting|released 1 task\(s\) unfinished", drained_log), drained_log[-3000:]
    assert _status(drained, "worker@1")["exit_code"] == 0
    for host in workers:  # each worker ran what its host built
        log = Path(host.dir, "state", "procs", "worker@1.log").read_text()
        assert ("kernels: numpy" if host is no_compiler else "kernels: compiled") in log, log[-3000:]
    assert "lease expired" not in Path(ventilator.dir, "state", "procs", "ventilator.log").read_text()
    # The finished job is not started again by a second run (-e mlm_rerun=true would).
    assert _changed(ansible.play("ventilating.yaml", *longer)) == {}, "ventilating.yaml restarted a finished job"

    # A pip requirement at a given version ("mlm-pipeline==0.1.0"), from a local find-links
    # directory standing in for an index, into a fresh install dir on one host.
    ansible.play("init.yaml", "--limit", workers[-1].name,
                 "-e", "mlm_install_source=pip", "-e", "mlm_version=0.1.0",
                 "-e", f"mlm_install_dir={workers[-1].dir}/pinned",
                 # --ignore-installed: with system site-packages pip would take this machine's own
                 # mlm-pipeline as "already satisfied" and install nothing into the new venv.
                 "-e", f"mlm_pip_extra_args='--no-deps --no-build-isolation --ignore-installed --no-index "
                       f"--find-links {tmp_path / 'sdist'}'")
    pinned = Path(workers[-1].dir, "pinned", "venv", "bin", "mlm-worker")
    assert pinned.exists()

    check_output(fleet, ansible)

    # A second job with the sink as its own service (mlm_separate_sink): the ventilator is
    # told where it is, the sink's own unit runs, and the output is as complete as the first.
    second = ["-e", "mlm_separate_sink=true", "-e", f"mlm_output={fleet.dir}/out-separate-sink",
              "-e", '{"mlm_sink_extra_args": ["--publish-seconds", "5"]}']
    ansible.play("working.yaml")
    assert set(_changed(ansible.play("ventilating.yaml", *second))) == {ventilator.name}
    sink = _status(ventilator, "sink")
    assert sink["argv"][-2:] == ["--publish-seconds", "5"] and "mlm-sink" in sink["argv"][0]
    vent_argv = _status(ventilator, "ventilator")["argv"]
    assert vent_argv[vent_argv.index("--sink") + 1].endswith(":5558") and "--sink-port" not in vent_argv
    ansible.play("waiting.yaml", timeout=400)
    assert _status(ventilator, "ventilator")["exit_code"] == 0, ansible.logs()
    sink_log = Path(ventilator.dir, "state", "procs", "sink.log").read_text()
    assert "all tasks done" in sink_log, sink_log[-2000:]
    check_output(fleet, ansible, Path(fleet.dir, "out-separate-sink"))


def _notice_after_first_shard(imds: FakeImds, out: Path, timeout: float = 300) -> None:
    """The spot notice, as soon as the job has written its first manifest line (mid-job)."""
    deadline = time.monotonic() + timeout
    manifest = out / "manifest.jsonl"
    while time.monotonic() < deadline:
        if manifest.exists() and manifest.read_text().strip():
            imds.spot_action = {"action": "terminate", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                             time.gmtime(time.time() + 120))}
            return
        time.sleep(0.02)


def check_output(fleet: fleetnet.Fleet, ansible: Ansible, out: Path | None = None) -> None:
    out = out or Path(fleet.dir, "out")
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines() if line.strip()]
    shards = sorted(out.glob("*.tfrecord"))
    assert manifest and shards
    assert sorted(shard["name"] for m in manifest for shard in m["shards"]) == [s.name for s in shards], \
        "every shard is in the manifest, every manifest entry has its shard"
    assert len({m["task"] for m in manifest}) == len(manifest)

    # The work crossed the network: workers acknowledged to the ventilator host's bridge address,
    # and more than one worker host wrote shards.
    ventilator = fleet.hosts[0]
    by_host = {}
    for host in fleet.hosts[1:]:
        log = Path(host.dir, "state", "procs", "worker@1.log").read_text()
        assert f"tcp://{ventilator.address}:" in log or ventilator.address in log, log[-2000:]
        by_host[host.name] = {m["task"] for m in manifest if m.get("worker") and m["worker"] in log}
    if all("worker" in m for m in manifest):
        assert set().union(*by_host.values()) == {m["task"] for m in manifest}
        assert sum(1 for tasks in by_host.values() if tasks) >= 2, f"one host did all the work: {by_host}"

    pytest.importorskip("tensorflow", reason="TensorFlow is needed to read the shards back")
    vocab_size = sum(1 for _ in open(VOCAB, encoding="utf-8"))
    total = 0
    for entry in manifest:
        (shard,) = entry["shards"]
        path = out / shard["name"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == shard["sha256"], path
        # tf.data.TFRecordDataset + tf.io.parse_example with run_pretraining.py's features; every record checked,
        # a column of the shard at a time (a row per record)
        ex = read_columns(str(path), MAX_SEQ_LENGTH, MAX_PREDICTIONS)
        records = len(ex["input_mask"]) if ex else 0
        if records:
            lengths = ex["input_mask"].sum(axis=1)
            assert ((5 <= lengths) & (lengths <= MAX_SEQ_LENGTH)).all(), path
            assert np.isin(ex["input_mask"], (0, 1)).all(), path
            padding = np.arange(MAX_SEQ_LENGTH) >= lengths[:, None]
            assert (ex["input_ids"][padding] == 0).all() and (ex["input_ids"] < vocab_size).all(), path
            assert np.isin(ex["segment_ids"], (0, 1)).all(), path
            assert np.isin(ex["next_sentence_labels"][:, 0], (0, 1)).all(), path
            n_masked = ex["masked_lm_weights"].sum(axis=1).astype(np.int64)
            assert ((1 <= n_masked) & (n_masked <= MAX_PREDICTIONS)).all(), path
            masked = np.arange(MAX_PREDICTIONS) < n_masked[:, None]
            assert (ex["masked_lm_positions"] < lengths[:, None])[masked].all(), path
            assert (ex["masked_lm_ids"][masked] < vocab_size).all(), path
        assert records == entry["records"], f"{path}: {records} records, manifest says {entry['records']}"
        total += records
    assert total > 0
    summary_path = out / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if "records" in summary:
            assert summary["records"] == total
    print(f"fleet job: {len(manifest)} shards, {total} records, "
          f"tasks per worker host: { {h: len(t) for h, t in by_host.items()} }")
    assert re.search(r"exited with 0", Path(ventilator.dir, "state", "procs", "ventilator.log").read_text())

