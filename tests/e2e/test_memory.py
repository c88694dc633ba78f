"""The ventilator streams: its memory does not grow with the corpus.

A corpus several times larger than the ventilator's whole resident set is
handed out (content shipping, the mode where the ventilator reads every
byte) to workers that acknowledge at once; the ventilator's peak RSS stays
the same as on a corpus ten times smaller.
"""

import re
import shutil
import sys
import time

import pytest

from bench.procs import vm_hwm
from tests.support.helpers import VOCAB, WIKI, free_ports, need_shared, python_module

pytestmark = pytest.mark.e2e


def replicate(target, copies):
    sources = [(p.relative_to(WIKI), p.read_bytes()) for p in sorted(WIKI.rglob("wiki_*"))]
    total = 0
    for copy in range(copies):
        for relative, data in sources:
            path = target / f"{copy:04d}" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            data = re.sub(rb'<doc id="(\d+)"', lambda m, copy=copy: b'<doc id="%d%s"' % (copy, m.group(1)), data)
            path.write_bytes(data)
            total += len(data)
    return total


def ventilator_peak_rss(tmp_path, copies):
    corpus = tmp_path / f"corpus-{copies}"
    size = replicate(corpus, copies)
    vport, sink_port = free_ports(2)
    sink = python_module("sink", "--ventilator", f"127.0.0.1:{vport}", "--port", sink_port, "--bind-host", "127.0.0.1")
    ventilator = python_module("ventilator", "--data", corpus, "--output", tmp_path / f"out-{copies}", "--vport", vport,
                               "--bind-host", "127.0.0.1", "--sink", f"127.0.0.1:{sink_port}", "--vocab-file", VOCAB,
                               "--task-size", "8M", "--format", "wikiextractor")
    workers = [python_module("bench.null_worker", "--ventilator", f"127.0.0.1:{vport}", "--credit", "2")
               for _ in range(2)]
    peak = 0
    try:
        while ventilator.poll() is None:
            peak = max(peak, vm_hwm(ventilator.pid))
            time.sleep(0.05)
        assert ventilator.returncode == 0, ventilator.stdout.read()[-3000:]
        for process in [sink, *workers]:
            process.wait(timeout=60)
    finally:
        for process in [ventilator, sink, *workers]:
            if process.poll() is None:
                process.kill()
        shutil.rmtree(corpus, ignore_errors=True)
    return size, peak


def test_ventilator_memory_is_flat_as_the_corpus_grows(tmp_path):
    need_shared()
    small_size, small_peak = ventilator_peak_rss(tmp_path, 20)
    large_size, large_peak = ventilator_peak_rss(tmp_path, 250)
    print(f"ventilator peak RSS: {small_peak / 2**20:.0f} MiB for {small_size / 2**20:.0f} MiB of corpus, "
          f"{large_peak / 2**20:.0f} MiB for {large_size / 2**20:.0f} MiB", file=sys.stderr)
    assert large_size > 4 * large_peak, "the corpus must dwarf the ventilator's memory"
    assert large_peak < 200 * 2**20
    assert large_peak < small_peak + 40 * 2**20, "memory grew with the corpus"
