"""docs/fleet.md's Google Cloud walk-through on its default path, booted here: the release built as the page says
and uploaded below the job's prefix, the bucket's corpus and vocabulary, and the ventilator's and a worker's
startup scripts as terraform/gcp renders them from terraform/gcp/terraform.tfvars.example, each run by bash as the
VM's guest agent would, in a mount namespace of its own (its own /opt, /etc/systemd/system and /var/lib: one VM
each, nothing of this machine touched). Cloud Storage is the GCS emulator, the metadata server and Cloud
Monitoring are tests/support/fake_gcp.py's, both over real HTTP.

Stand-ins, and why: `systemctl` starts a unit's ExecStart as systemd would (its Environment, StateDirectory and
`$$`), as there is no systemd here; `useradd` and `apt-get` do nothing and are recorded (this machine has Python,
gcc and the headers, so the script must not call apt-get); `sleep` returns at once (the retries' pauses). pip
installs from the copied file only (no index here: PIP_NO_INDEX, PIP_NO_DEPS), the dependencies coming from this
machine's site-packages on PYTHONPATH, which the services inherit.

Not collected by `python -m pytest` (no test_ prefix): each VM builds the sdist in a venv of its own, installing in
the suite's clock. scripts/fleet-installs.sh runs it, as its own step of .ci/run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from bench.chinese_bench import chinese_vocabulary, make_corpus
from tests.fleet.fleethelpers import (
    ANSIBLE_DIR,
    TERRAFORM_DIR,
    apply_startup_module,
    terraform_binary,
)
from tests.fleet.test_fleet_terraform import load_hcl
from tests.support.fake_gcp import FakeCloudMonitoring, FakeGceMetadata
from tests.support.helpers import REPO, VOCAB, need_shared

pytest.importorskip("hcl2", reason="python-hcl2 is not installed (pip install -r tests/fleet/requirements.txt)")

pytestmark = [pytest.mark.gcs]

GCP_DIR = TERRAFORM_DIR / "gcp"
#: systemd's part: a unit's ExecStart in the background, with its Environment= and StateDirectory=, `$$` as `$`.
SYSTEMCTL = '''#!PYTHON
import os, shlex, subprocess, sys
logs = os.environ["FAKE_SYSTEMD_LOGS"]
args = sys.argv[1:]
if args == ["daemon-reload"]:
    sys.exit(0)
if args[:2] != ["enable", "--now"] or len(args) != 3:
    sys.exit(f"systemctl stand-in: {args} not understood")
keys = {}
for line in open(f"/etc/systemd/system/{args[2]}").read().splitlines():
    key, _, value = line.partition("=")
    keys.setdefault(key, []).append(value)
env = dict(os.environ)
for entry in keys.get("Environment", []):
    name, _, value = entry.partition("=")
    env[name] = value
for state in keys.get("StateDirectory", []):
    os.makedirs(f"/var/lib/{state}", exist_ok=True)
with open(f"{logs}/{args[2]}.log", "ab") as log:
    proc = subprocess.Popen(shlex.split(keys["ExecStart"][0].replace("$$", "$")), cwd="/", env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
with open(f"{logs}/{args[2]}.pid", "w") as pid:
    pid.write(str(proc.pid))
'''


def _free_ports(count: int) -> list[int]:
    """``count`` consecutive free ports (the metrics ports are a pair)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count > 65535:
            continue
        try:
            sockets = []
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("0.0.0.0", port))
            return list(range(first, first + count))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError("no free ports")


def _skip_reasons() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a mount namespace per VM)"
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        return "unshare --mount does not work here"
    if terraform_binary() is None:
        return "no terraform or tofu binary on PATH"
    if shutil.which("gcc") is None or shutil.which("curl") is None:
        return "needs gcc and curl (what a VM's startup script uses)"
    return None


def _render(variables: dict, work: Path) -> dict:
    """terraform/gcp/modules/startup applied with the walk-through's variables: its outputs."""
    return apply_startup_module(terraform_binary()[0], work, variables)


def _boot(script: str, name: str, tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """One VM's first boot: the startup script in a mount namespace with a fresh /opt, /etc/systemd/system and
    /var/lib; the services it starts stay in it."""
    path = tmp / f"{name}-startup.sh"
    path.write_text(script)
    mounts = " && ".join(f"mount -t tmpfs {name} {d}" for d in ("/opt", "/etc/systemd/system", "/var/lib"))
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                           f"{mounts} && exec bash {path}"], cwd="/", env=env, capture_output=True, text=True,
                          timeout=900)


def test_the_walkthroughs_default_path_installs_from_the_bucket_and_runs_the_job(gcs, tmp_path):
    reason = _skip_reasons()
    if reason:
        pytest.skip(reason)
    need_shared()
    example = load_hcl(GCP_DIR / "terraform.tfvars.example")
    prefix = example["bucket_prefix"].strip("/")
    job_uri = f"gs://{example['bucket_name']}/{prefix}/"
    assert example["package_spec"].startswith(job_uri) and example["package_spec"].endswith(".tar.gz"), \
        "the default path installs the release from the job's own prefix"
    bucket = gcs.new_bucket("corpora")

    def here(uri: str) -> str:
        """The walk-through's gs://my-corpora/... in the emulator's bucket."""
        return uri.replace(f"gs://{example['bucket_name']}/", f"gs://{bucket}/")

    def object_name(uri: str) -> str:
        return uri.removeprefix(f"gs://{example['bucket_name']}/")

    # Step 1 of the walk-through: the release, built as docs/fleet.md says, and the corpus and vocabulary.
    built = subprocess.run(["bash", str(ANSIBLE_DIR / "roles" / "mlm" / "files" / "build-sdist.sh"), str(REPO),
                            str(tmp_path / "dist")], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr
    sdist = Path(built.stdout.split()[-1])
    assert sdist.name == example["package_spec"].rsplit("/", 1)[1], "the walk-through names another file"
    client = gcs.client().bucket(bucket)
    client.blob(object_name(example["package_spec"])).upload_from_filename(str(sdist))
    make_corpus(tmp_path / "zh" / "AA", 0.05)
    gcs.upload_tree(bucket, tmp_path / "zh", f"{prefix}/corpus", "wiki_*")
    chinese_vocabulary(str(VOCAB), tmp_path)
    client.blob(object_name(example["vocab_file"])).upload_from_filename(str(tmp_path / "zh-vocab.txt"))

    vport, sink_port, metrics, _ = _free_ports(4)
    variables = {"fleet_name": example["fleet_name"], "project": example["project"],
                 "package_spec": here(example["package_spec"]), "bucket_name": bucket,
                 "bucket_prefix": example["bucket_prefix"], "vocab_file": here(example["vocab_file"]),
                 "job_args": example["job_args"], "ventilator_address": "127.0.0.1", "ventilator_port": vport,
                 "sink_port": sink_port, "metrics_port": metrics, "worker_processes": 1}
    rendered = _render(variables, tmp_path / "tf")

    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    calls = tmp_path / "calls"
    (stand_ins / "systemctl").write_text(SYSTEMCTL.replace("PYTHON", sys.executable, 1))
    for name in ("useradd", "apt-get"):
        (stand_ins / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {calls}\n')
    (stand_ins / "sleep").write_text("#!/bin/bash\nexit 0\n")
    for path in stand_ins.iterdir():
        path.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()
    purelib = sysconfig.get_paths()["purelib"]
    pids: list[int] = []
    with FakeGceMetadata(project=example["project"]) as metadata, FakeCloudMonitoring(metadata) as monitoring:
        env = {**os.environ, **gcs.env(), **metadata.env(),
               "PATH": f"{stand_ins}:{os.environ['PATH']}", "FAKE_SYSTEMD_LOGS": str(logs),
               "PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_IGNORE_INSTALLED": "1",
               "PYTHONPATH": purelib, "MLM_VENTILATOR_CLOUD_MONITORING_ENDPOINT": monitoring.endpoint}
        env.pop("PYTHONHOME", None)
        try:
            for vm, script in (("ventilator", rendered["ventilator_startup_script"]),
                               ("worker", rendered["worker_startup_script"])):
                booted = _boot(script, vm, tmp_path, env)
                assert booted.returncode == 0, f"{vm}: {booted.stdout[-3000:]}\n{booted.stderr[-5000:]}"
                assert "mlm-pipeline kernels: compiled" in booted.stdout, booted.stdout[-2000:]
                unit = f"mlm-{vm}.service"
                pid = int((logs / f"{unit}.pid").read_text())
                pids.append(pid)
                # What runs is the VM's own install, built there from the bucket's sdist.
                venv = Path(f"/proc/{pid}/root/opt/mlm-pipeline/venv")
                site = next(venv.glob("lib/python*/site-packages"))
                assert list((site / "common").glob(f"_kernels{sysconfig.get_config_var('EXT_SUFFIX')}")), \
                    f"{vm}: no kernels built on the VM"
                direct = json.loads(next(site.glob("mlm_pipeline-*.dist-info")).joinpath("direct_url.json")
                                    .read_text())
                assert direct["url"] == f"file:///opt/mlm-pipeline/{sdist.name}"
            assert not calls.exists() or "apt-get" not in calls.read_text()
            ventilator = pids[0]
            deadline = time.monotonic() + 600
            while Path(f"/proc/{ventilator}").exists() and time.monotonic() < deadline:
                time.sleep(1)
            log = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(logs.glob("*.log")))
            assert not Path(f"/proc/{ventilator}").exists(), f"the job did not end:\n{log}"
        finally:
            for pid in pids:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        worker_log = (logs / "mlm-worker.service.log").read_text()
        assert "kernels: compiled" in worker_log, worker_log[-3000:]
        latest = monitoring.latest()
        metric = rendered["metric_type"]
        assert latest.get(metric) == 0 and any(metric in json.dumps(c["body"]) for c in monitoring.created), latest
    # The job's output, in the bucket below the prefix, as the walk-through's `mlm-verify gs://...` checks it.
    verified = subprocess.run([sys.executable, "-m", "sink.verify", here(f"{job_uri}out")], cwd=REPO,
                              env={**os.environ, **gcs.env()}, capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "word segmenter: jieba" in (logs / "mlm-ventilator.service.log").read_text()
