"""The loader as trainers use it: real server processes, real clients, loopback TCP."""

import msgpack
import numpy as np
import pytest
import zmq

from common.wire.security import generate
from loader import messages
from loader.client import LoaderClient, LoaderError, server_status
from loader.shards import open_dataset
from tests.support.loader_helpers import LoaderProcess, vocab_args, wait_for


def take(client: LoaderClient, count: int):
    return [client.next_batch() for _ in range(count)]


def epoch_of(address: str, rank: int, world: int, **kwargs):
    with LoaderClient(address, rank=rank, world_size=world, **kwargs) as client:
        batches = []
        while True:
            batch = client.next_batch()
            batches.append(batch)
            if batch.last_in_epoch:
                return batches


def test_ranks_cover_each_epoch_once_in_a_new_order(loader_dataset):
    _, shards = open_dataset(str(loader_dataset))
    with LoaderProcess(loader_dataset, "--batch-size", 64, "--shuffle-window", 1000) as server:
        clients = [LoaderClient(server.address, rank=r, world_size=3) for r in range(3)]
        orders = []
        for epoch in range(2):
            seen = []
            for client in clients:
                sizes = []
                while True:
                    batch = client.next_batch()
                    assert batch.epoch == epoch
                    assert len(batch.record_ids) == len(batch.features["input_ids"])
                    sizes.append(len(batch.record_ids))
                    seen.append(batch.record_ids.copy())
                    if batch.last_in_epoch:
                        break
                assert set(sizes[:-1]) == {64}
            flat = np.concatenate(seen)
            assert sorted(flat.tolist()) == list(range(shards.records))
            orders.append(flat)
        assert (orders[0] != orders[1]).mean() > 0.9
        for client in clients:
            client.close()


def test_same_batches_whatever_the_number_of_servers(loader_dataset):
    args = ("--batch-size", 128, "--dynamic-masking", *vocab_args())
    with LoaderProcess(loader_dataset, *args) as one:
        single = [epoch_of(one.address, rank, 4) for rank in range(4)]
    with LoaderProcess(loader_dataset, *args) as first, LoaderProcess(loader_dataset, *args) as second:
        split = [epoch_of((first if rank < 2 else second).address, rank, 4) for rank in range(4)]
    for ours, theirs in zip(single, split):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert (a.record_ids == b.record_ids).all()
            for key in ("input_ids", "masked_lm_positions", "labels"):
                assert (a.features[key] == b.features[key]).all()


def test_a_resumed_client_continues_with_the_next_batch(loader_dataset):
    with LoaderProcess(loader_dataset, "--batch-size", 32, "--dynamic-masking", *vocab_args()) as server:
        with LoaderClient(server.address, rank=1, world_size=2, prefetch=5) as client:
            whole = take(client, 80)  # across the end of epoch 0
        with LoaderClient(server.address, rank=1, world_size=2, prefetch=5) as client:
            first = take(client, 30)
            state = client.state()
        assert state["epoch"] == 0 and state["batch"] == 30
        with LoaderClient(server.address, rank=1, world_size=2, state=state, prefetch=2) as client:
            rest = take(client, 50)
        with pytest.raises(LoaderError, match="rank 1 of 2"):
            LoaderClient(server.address, rank=0, world_size=2, state=state)
        with LoaderProcess(loader_dataset, "--batch-size", 32) as other:  # no dynamic masking there
            with LoaderClient(other.address, rank=1, world_size=2, state=state, timeout_seconds=20) as client:
                with pytest.raises(LoaderError, match="dynamic masking"):
                    client.next_batch()
    assert [b.epoch for b in whole][-1] == 1
    for a, b in zip(whole, first + rest):
        assert (a.epoch, a.index) == (b.epoch, b.index)
        assert (a.record_ids == b.record_ids).all()
        assert (a.features["input_ids"] == b.features["input_ids"]).all()


@pytest.mark.faults
def test_a_killed_and_restarted_server_resumes_every_rank(loader_dataset):
    args = ("--batch-size", 64)
    with LoaderProcess(loader_dataset, *args) as server:
        reference = []
        for rank in range(2):
            with LoaderClient(server.address, rank=rank, world_size=2) as client:
                reference.append([b.record_ids.copy() for b in take(client, 40)])
        clients = [LoaderClient(server.address, rank=r, world_size=2, patience_seconds=0.3) for r in range(2)]
        got = [[b.record_ids.copy() for b in take(client, 15)] for client in clients]
        server.kill()
        server.start()  # same port, no state: the clients attach again from theirs
        for rank, client in enumerate(clients):
            got[rank] += [b.record_ids.copy() for b in take(client, 25)]
            assert client.reattaches >= 1
            client.close()
    for ours, theirs in zip(reference, got):
        assert len(ours) == len(theirs)
        assert all((a == b).all() for a, b in zip(ours, theirs))


def test_a_rank_that_stops_pulling_gets_no_more_than_its_window(loader_dataset):
    with LoaderProcess(loader_dataset, "--batch-size", 16, "--max-prefetch", 6) as server:
        slow = LoaderClient(server.address, rank=0, world_size=2, prefetch=3)
        greedy = LoaderClient(server.address, rank=1, world_size=2, prefetch=1000)  # capped by --max-prefetch
        take(slow, 2)
        take(greedy, 1)
        fast = LoaderClient(server.address, rank=0, world_size=1)
        take(fast, 100)  # the server keeps serving others meanwhile

        def ranks():
            status = server_status(server.address)
            return {r.client_id: r for r in status.ranks}

        for _ in range(5):  # whenever we look, nothing beyond the window was built
            state = ranks()
            assert state[slow.client_id].allowed == 2 + 3
            assert state[slow.client_id].sent <= 5
            assert state[greedy.client_id].allowed == 1 + 6
            assert state[greedy.client_id].sent <= 7
        wait_for(lambda: ranks()[slow.client_id].sent == 5)
        assert ranks()[slow.client_id].sent == 5  # and it stays there
        take(slow, 1)
        wait_for(lambda: ranks()[slow.client_id].sent == 6)
        for client in (slow, greedy, fast):
            client.close()


def test_malformed_requests_are_counted_and_dropped(loader_dataset):
    with LoaderProcess(loader_dataset, "--batch-size", 16) as server:
        context = zmq.Context()
        raw = context.socket(zmq.DEALER)
        raw.connect(f"tcp://{server.address}")
        bad = [b"\x00garbage", msgpack.packb({"v": 1, "t": "Credit", "session": "x", "consumed": 1}),
               msgpack.packb({"v": 1, "t": "Attached"}), msgpack.packb([1, 2, 3])]
        for frame in bad:
            raw.send(frame)
        raw.send_multipart([b"two", b"frames"])
        raw.send(messages.encode(messages.Attach("bad", 1, 5, 4, 0, 0, 2)))  # rank 5 of 4
        assert raw.poll(10000)
        assert isinstance(messages.decode(raw.recv()), messages.Refused)
        raw.send(b"x" * (messages.MAX_INBOUND_BYTES + 1))  # over the size limit: the connection is cut
        with LoaderClient(server.address) as client:
            batch = client.next_batch()
            assert batch.features["input_ids"].shape == (16, 128)
        status = wait_for(lambda: (s := server_status(server.address)).dropped >= 6 and s)
        assert status.dropped == 6
        raw.close(linger=0)
        context.term()
        assert server.process.poll() is None


def test_curve_admits_authorized_ranks_only(loader_dataset, tmp_path):
    keys, strangers = tmp_path / "keys", tmp_path / "strangers"
    generate(str(keys))
    generate(str(strangers))
    (strangers / "server.key").write_bytes((keys / "server.key").read_bytes())  # knows the server, not authorized
    with LoaderProcess(loader_dataset, "--batch-size", 8, "--curve-dir", keys) as server:
        with LoaderClient(server.address, curve_dir=str(keys)) as client:
            assert client.next_batch().features["input_ids"].shape == (8, 128)
        for curve_dir in (str(strangers), None):
            with LoaderClient(server.address, curve_dir=curve_dir, patience_seconds=0.5,
                              timeout_seconds=2) as client:
                with pytest.raises(LoaderError, match="no answer"):
                    client.next_batch()


def test_bad_data_is_a_one_line_error(tmp_path):
    server = LoaderProcess(tmp_path)
    output = server.wait()
    assert server.process.returncode != 0
    assert "no manifest" in output and "Traceback" not in output
    server = LoaderProcess(tmp_path, "--dynamic-masking")
    output = server.wait()
    assert server.process.returncode == 2 and "needs --vocab-file" in output and "Traceback" not in output


def test_dynamic_masking_draws_new_masks_each_epoch_over_the_originals(loader_dataset):
    from loader.masking import restore
    from loader.shards import ShardCache

    storage, shards = open_dataset(str(loader_dataset))
    cache = ShardCache(storage, shards, 1 << 30)
    stored = {name: np.concatenate([cache.columns(i)[name] for i in range(len(shards.names))])
              for name in ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")}
    originals = restore(stored)
    with LoaderProcess(loader_dataset, "--batch-size", 512, "--dynamic-masking", *vocab_args()) as server:
        with LoaderClient(server.address) as client:
            positions = []
            for _ in range(2):
                by_record = np.zeros_like(stored["masked_lm_positions"])
                for features, batch in ((b.features, b) for b in iter(lambda: client.next_batch(), None)):
                    np.testing.assert_array_equal(restore(features), originals[batch.record_ids])
                    by_record[batch.record_ids] = features["masked_lm_positions"]
                    if batch.last_in_epoch:
                        break
                positions.append(by_record)
    assert ((positions[0] != positions[1]).any(axis=1)).mean() > 0.9
    assert ((positions[0] != stored["masked_lm_positions"]).any(axis=1)).mean() > 0.9


def test_a_corrupt_shard_stops_the_server_with_one_line(loader_dataset, tmp_path):
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(loader_dataset, copy)
    _, shards = open_dataset(str(copy))
    first = copy / shards.names[0]  # read at start
    first.write_bytes(first.read_bytes()[:-10])
    server = LoaderProcess(copy)
    output = server.wait()
    assert server.process.returncode == 1
    assert shards.names[0] in output and "mlm-verify" in output and "Traceback" not in output


def test_a_server_restarted_with_other_settings_is_refused_not_mixed_in(loader_dataset):
    with LoaderProcess(loader_dataset, "--batch-size", 64, "--seed", 1) as server:
        with LoaderClient(server.address, patience_seconds=0.3, timeout_seconds=30) as client:
            take(client, 3)
            server.kill()
            other = LoaderProcess(loader_dataset, "--batch-size", 64, "--seed", 2, port=server.port)
            try:
                with pytest.raises(LoaderError, match="seed"):
                    take(client, 10)  # the prefetched batches of seed 1, then the refusal
            finally:
                other.stop()


def test_a_rank_cut_off_the_network_resumes_where_it_was(loader_dataset):
    from tests.support.loader_helpers import CuttableProxy

    with LoaderProcess(loader_dataset, "--batch-size", 64) as server:
        with LoaderClient(server.address) as client:
            reference = [b.record_ids.copy() for b in take(client, 40)]
        proxy = CuttableProxy(server.port)
        try:
            with LoaderClient(f"127.0.0.1:{proxy.port}", patience_seconds=0.3, timeout_seconds=30) as client:
                got = [b.record_ids.copy() for b in take(client, 10)]
                proxy.cut()
                got += [b.record_ids.copy() for b in take(client, 30)]
                assert client.reattaches >= 1
        finally:
            proxy.close()
    assert all((a == b).all() for a, b in zip(reference, got)) and len(got) == 40


def test_metrics_agree_with_the_servers_status(loader_dataset):
    from tests.support.helpers import free_ports, scrape

    metrics_port = free_ports(1)[0]
    with LoaderProcess(loader_dataset, "--batch-size", 16, "--metrics-port", metrics_port) as server:
        with LoaderClient(server.address, prefetch=3) as client:
            take(client, 5)
            wait_for(lambda: server_status(server.address).batches_sent == 8)
            values = wait_for(lambda: scrape(metrics_port))
    assert values[("mlm_loader_ranks", ())] == 1
    assert values[("mlm_loader_batches_sent_total", ())] == 8
    assert values[("mlm_loader_bytes_sent_total", ())] == 8 * 16 * 1780
    assert values[("mlm_loader_batches_in_flight", (("rank", "0"),))] == 3


def test_credit_beyond_what_was_sent_gets_no_more_than_the_window(loader_dataset):
    with LoaderProcess(loader_dataset, "--batch-size", 16, "--max-prefetch", 4) as server:
        context = zmq.Context()
        raw = context.socket(zmq.DEALER)
        raw.connect(f"tcp://{server.address}")
        raw.send(messages.encode(messages.Attach("greedy", 1, 0, 1, 0, 0, 4)))
        raw.send(messages.encode(messages.Credit(1, 10**9)))  # "consumed" a billion batches: it has none

        def greedy():
            return next((r for r in server_status(server.address).ranks if r.client_id == "greedy"), None)

        rank = wait_for(lambda: (r := greedy()) is not None and r.sent == 4 and r)
        assert rank.allowed == 4 and greedy().sent == 4
        raw.close(linger=0)
        context.term()
