"""What the objectives' end-to-end tests share: a small corpus, a job run
with 1 and with 2 workers (identical shards, mlm-verify passing), and its
records read back with TensorFlow."""

import subprocess
import sys

import pytest

from tests.support.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator, shard_digests

CLS, SEP, MASK = 101, 102, 103


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """The first ~150 KB of wiki_00, whole documents: several 32 KB tasks."""
    need_shared()
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    cut = text.index("</doc>\n", 150_000) + len("</doc>\n")
    root = tmp_path_factory.mktemp("small") / "corpus"
    root.mkdir()
    (root / "wiki_00").write_text(text[:cut], encoding="utf-8")
    return root


def run_twice(corpus, tmp_path, *args):
    """The job with 1 worker and with 2; both must succeed and pass mlm-verify."""
    outputs = []
    for workers in (1, 2):
        output = tmp_path / f"out{workers}"
        result = run_ventilator(corpus, output, "--vocab-file", VOCAB, "--task-size", "32K", "--workers", workers,
                                *args, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        verified = subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                                  text=True, timeout=120)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        outputs.append(output)
    one, two = (shard_digests(o) for o in outputs)
    assert len(one) >= 3 and one == two
    return outputs[0]


def read(output, spec):
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tests.support.tf_reader import read_with_spec

    records = {}
    for entry in manifest(output).values():
        for shard in entry["shards"]:
            examples = read_with_spec(str(output / shard["name"]), spec)
            assert len(examples) == shard["records"] > 0
            records[shard["name"]] = examples
    return [example for name in sorted(records) for example in records[name]]
