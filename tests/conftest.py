import sys
import types

import pytest

from tests.support import gcs_server, s3_server

#: The longest files (minutes each, on 2 cores), started first: the suite runs on three xdist workers with
#: --dist loadfile --no-loadscope-reorder (setup.cfg), which hands out files in collection order, so a long file
#: met last would run alone at the end.  (Without --no-loadscope-reorder xdist orders files by their number of
#: tests, and the longest file, of two tests, started last: the suite took 26 minutes instead of 20.)
LONGEST_FIRST = ("tests/e2e/test_loader_trainer.py", "tests/faults/test_objective_faults.py",
                 "tests/faults/test_faults.py", "tests/e2e/test_s3.py", "tests/slurm/test_slurm_job.py",
                 "tests/test_byte_matrix.py", "tests/e2e/test_loader_training.py", "tests/fleet/test_fleet_ansible.py",
                 "tests/faults/test_dedup_faults.py", "tests/faults/test_hostile_peers.py",
                 "tests/faults/test_interruption.py", "tests/fleet/test_fleet_terraform.py")


#: The fixtures that hand out the session's moto server: a test using one is a fleet test (AWS control plane).
MOTO_FIXTURES = {"moto", "moto_module"}


#: Tests with these markers start real processes, servers or clusters (minutes in all): conftest marks them `slow`,
#: and `python -m pytest -m "not slow"` is the day-to-day tier without them (README, "Development").
SLOW_MARKERS = ("e2e", "faults", "fleet", "slurm", "s3", "gcs", "bench")

#: Tests without those markers measured slow, by file or by node id without parameters.  Times: wall seconds in the
#: whole suite on 2 cores at a load average of 2-4 (a per-test CPU plugin, 2026-11-29), after the references and
#: oracles were shared (they were 3-5x that before).  The byte matrix and the job ids (42 s and 13 s there)
#: stay in the quick tier on purpose: they guard every change's output.
SLOW_TESTS: tuple[str, ...] = (
    "tests/common/objectives/test_corpus_statistics.py",  # 68 s: BERT's algorithm token by token, 8 passes
    # 35 s and 20 s: the same corpus fixture, ALBERT's algorithm
    "tests/common/objectives/test_albert.py::test_instance_statistics_match_alberts_algorithm",
    "tests/common/objectives/test_albert.py::test_masking_statistics_match_alberts_algorithm",
    "tests/common/dedup/test_dedup_accuracy.py",  # 55 s: the planted corpus and datasketch
    "tests/fleet/test_fleet_terraform.py::test_root_module_autoscaling_terraform_test",  # 63 s: `terraform test`
    "tests/common/test_holdout.py::test_each_side_is_made_of_its_own_documents_whatever_the_task_size",  # 32 s
    # 31 s: transformers 4 in its own process
    "tests/common/tokenization/test_han_words.py::test_chinese_ref_masks_whole_words_in_huggingfaces_collator",
    "tests/faults/test_full_disk.py",  # 19 s: a whole job against a full disk
)


#: The packages the roles' processes import.
PACKAGES = ("mlm_pipeline", "common", "ventilator", "worker", "sink", "loader", "report", "bench", "tests")


def pytest_configure(config):
    """Compile the project's modules once, before the workers start.  The suite starts thousands of Python
    processes (every role of every job), and with PYTHONDONTWRITEBYTECODE set (as on this project's development machine)
    each of them compiled every module it imported from source: 0.1-0.2 CPU-s a process, a quarter of a small
    job's CPU.  Bytecode in __pycache__ is read whatever that variable says."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for package in PACKAGES:
        compileall.compile_dir(root / package, quiet=2, workers=1)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers set here
def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)  # stable: every file keeps its own order
    for item in items:
        if MOTO_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.fleet)
        if is_slow(item):
            item.add_marker(pytest.mark.slow)


def is_slow(item: pytest.Item) -> bool:
    """A test of a slow kind (SLOW_MARKERS) or measured slow (SLOW_TESTS)."""
    node = item.nodeid.split("[", 1)[0]
    return (any(item.get_closest_marker(name) for name in SLOW_MARKERS)
            or any(node == slow or node.startswith(slow + "::") for slow in SLOW_TESTS))


@pytest.fixture(autouse=True)
def _sys_intern_left_alone():
    """A test must not leave ``sys.intern`` patched for the rest of its xdist worker: importing Ansible does (a
    callable object, to accept str subclasses), and torch's dynamo, imported by a later test there, then fails to
    load.  Such imports go in a subprocess (tests/fleet/test_fleet_gcp.py)."""
    yield
    assert isinstance(sys.intern, types.BuiltinFunctionType), \
        "this test patched sys.intern process-wide (importing Ansible does): import it in a subprocess"


@pytest.fixture(scope="session")
def s3():
    """One local radosgw for the whole session (about 2 s to start)."""
    reason = s3_server.available()
    if reason:
        pytest.skip(reason)
    with s3_server.S3Server() as server:
        yield server


@pytest.fixture(scope="session")
def gcs():
    """One local GCS emulator (fake-gcs-server, scripts/gcs-server.sh) for the whole session (well under 1 s)."""
    reason = gcs_server.available()
    if reason:
        pytest.skip(reason)
    with gcs_server.GCSServer() as server:
        yield server


@pytest.fixture(scope="session")
def moto_server():
    """One moto server process per test session (a few seconds to start: it imports all of moto)."""
    from tests.support.moto_lifecycle import MotoServer

    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def moto_module(moto_server):
    """The session's moto server, emptied when a module starts using it: no module sees another's state."""
    moto_server.reset()
    return moto_server


@pytest.fixture
def moto(moto_server):
    """The session's moto server, emptied for this test."""
    moto_server.reset()
    return moto_server


from tests.support.loader_helpers import loader_dataset  # noqa: E402,F401  (the loader tests' output, built once per session)
