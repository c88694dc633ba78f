from common.wire.protocol import AckStats
from sink.progress import Throughput


def test_rates_over_the_window_overall_and_per_worker():
    throughput = Throughput(window_seconds=10)
    throughput.started = 0.0
    throughput.add("worker-host-a-1-abc123", AckStats(documents=10, tokens=1000, instances=50, bytes_in=2_000_000,
                                                              seconds={"tokenize": 0.5}), now=1)
    throughput.add("worker-host-a-2-def456", AckStats(documents=30, tokens=3000, instances=150, bytes_in=6_000_000,
                                                              seconds={"tokenize": 1.5}), now=9)
    overall, per_worker = throughput.rates(now=10)
    assert overall["documents"] == 4.0 and overall["bytes_in"] == 800_000
    assert per_worker["worker-host-a-2-def456"]["documents"] == 3.0
    assert "host-a-1 1 doc/s 0.20 MB/s" in throughput.line(now=10)
    # Past the window, old acknowledgements no longer count.
    overall, _ = throughput.rates(now=15)
    assert overall["documents"] == 3.0
    assert throughput.totals["documents"] == 40 and throughput.tasks == 2
    assert throughput.snapshot()[2] == {"tokenize": 2.0}
