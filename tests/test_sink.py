"""The sink's end of a job, apart from sockets."""

import logging

from common.manifest import Manifest
from common.storage import LocalStorage, StorageError
from sink.server import SinkOptions, SinkServer


class Unreachable(LocalStorage):
    def put_bytes(self, name, data):
        raise StorageError(f"put {name}: endpoint down")


def test_a_manifest_it_cannot_publish_is_exit_status_1(tmp_path, caplog):
    """The ventilator has already exited 0: the sink's status is what tells
    the operator (and the one-machine command) that the output is incomplete."""
    server = SinkServer(SinkOptions(ventilator="127.0.0.1:1", state_dir=str(tmp_path / "state")))
    server.output = Unreachable(str(tmp_path / "out"))
    server.manifest = Manifest(server.output, "j1", str(tmp_path / "state"))
    server.manifest.load()
    with caplog.at_level(logging.ERROR, logger="sink"):
        assert server._finish("all tasks done", job_over=True) == 1
    assert "could not publish" in caplog.text and "run the ventilator's command again" in caplog.text

    server.output = LocalStorage(str(tmp_path / "out"))
    assert server._finish("all tasks done", job_over=True) == 0
    assert (tmp_path / "out" / "summary.json").exists()
    server.manifest.close()
