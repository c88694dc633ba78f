"""A new format is one class: written by a job, checked by mlm-verify and
served by the loader, with nothing about it in loader/ or sink/.

The format (tests/common/writers/throwaway_format.py) is installed the way
another package installs one: a distribution's entry point in the group
``mlm_pipeline.writers``, found on the path of every process of the job.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from common import writers
from loader.client import LoaderClient
from tests.common.writers import throwaway_format
from tests.support.factories import finished_job, wiki_prefix
from tests.support.helpers import REPO, VOCAB, manifest
from tests.support.loader_helpers import LoaderProcess
from tests.support.plugins import fake_install

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """A directory that holds the throwaway format's distribution metadata, as pip would install it."""
    return fake_install(tmp_path_factory.mktemp("plugin"), "mlm-throwaway-format", throwaway_format.ENTRY_POINTS,
                        version="0.1")


@pytest.fixture(scope="module")
def env(plugin_path):
    return {"PYTHONPATH": os.pathsep.join([str(plugin_path), str(REPO)])}


@pytest.fixture(scope="module")
def job(tmp_path_factory, env):
    """A real job (ventilator, sink, two workers) writing the new format."""
    return finished_job(tmp_path_factory.mktemp("job"), "--vocab-file", VOCAB, "--output-format",
                        throwaway_format.NAME, "--task-size", "24K", "--workers", "2", timeout=180, env=env,
                        data=wiki_prefix(tmp_path_factory.mktemp("corpus"), 60_000))


@pytest.fixture
def installed(monkeypatch, plugin_path):
    """The format visible to this process too (its entry point on sys.path), and gone afterwards."""
    monkeypatch.syspath_prepend(str(plugin_path))
    writers.writers.cache_clear()
    yield
    monkeypatch.undo()
    writers.writers.cache_clear()


def expected_records(output) -> list[dict]:
    """Every record in serving order (task id, then the task's files), parsed by json itself."""
    records = []
    for _, entry in sorted(manifest(output).items()):
        for shard in entry["shards"]:
            records += [json.loads(line) for line in (output / shard["name"]).read_text().splitlines()]
    return records


def verify(output, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_the_job_writes_the_new_format_and_describes_it(job):
    files = sorted(p.name for p in job.glob("part-*"))
    assert len(files) >= 2 and all(name.endswith(throwaway_format.SUFFIX) for name in files)
    info = json.loads((job / "dataset_info.json").read_text())
    assert info["format"] == throwaway_format.NAME and info["file_suffixes"] == [throwaway_format.SUFFIX]
    assert len(expected_records(job)) == info["records"] > 0


def test_mlm_verify_checks_the_new_format_through_its_reader(job, env, tmp_path):
    result = verify(job, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(expected_records(job)):,} records" in result.stdout
    # Damage one file: its own reader finds it (not JSON lines), not only the sha256.
    import shutil

    damaged = tmp_path / "out"
    shutil.copytree(job, damaged)
    victim = sorted(damaged.glob("part-*"))[0]
    victim.write_bytes(victim.read_bytes().replace(b"}\n", b"\n", 1))
    result = verify(damaged, env)
    assert result.returncode == 1
    assert f"{victim.name}: corrupt: not JSON lines" in result.stderr


def test_without_the_format_installed_verify_names_the_file_it_cannot_read(job):
    result = verify(job, {"PYTHONPATH": str(REPO)})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no output format writes such files" in result.stderr and throwaway_format.SUFFIX in result.stderr


def test_the_loader_serves_the_new_format(job, env):
    expected = expected_records(job)
    with LoaderProcess(job, "--batch-size", 16, env=env) as server:
        with LoaderClient(server.address, rank=0, world_size=1) as client:
            seen = []
            while True:
                batch = client.next_batch()
                for row, record_id in enumerate(batch.record_ids.tolist()):
                    record = expected[record_id]
                    for key, values in record.items():
                        np.testing.assert_array_equal(batch.features[key][row].reshape(-1), np.ravel(values))
                    seen.append(record_id)
                if batch.last_in_epoch:
                    break
    assert sorted(seen) == list(range(len(expected)))


def test_read_records_gives_each_record_as_a_dict_of_arrays(job, installed):
    writer = writers.writer_for_file(f"part-x{throwaway_format.SUFFIX}")
    assert writer.name == throwaway_format.NAME
    name = sorted(p.name for p in job.glob("part-*"))[0]
    data = (job / name).read_bytes()
    records = list(writer.read_records(name, data))
    assert records and len(records) == writer.count_records(name, data)
    first = json.loads(data.decode().splitlines()[0])
    assert set(records[0]) == set(first)
    for key, values in first.items():
        assert isinstance(records[0][key], np.ndarray)
        np.testing.assert_array_equal(records[0][key], values)
