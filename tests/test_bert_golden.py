"""BERT's TFRecord output stays byte-identical across releases.

The digests below are the shards google-research/bert-semantics output had
before the pipeline grew other objectives, tokenizers and formats (made
with the release before the axis refactor: ``python -m ventilator --data
../shared/corpus/wiki --vocab-file bert-base-uncased-vocab.txt --dupe-factor
2 --task-size 512K`` plus the flags of each case).  Any change to a random
stream, the masking, the layout or the encoding shows here, on the compiled
kernels and on the numpy code alike (common/kernels.py).
"""

from __future__ import annotations

import hashlib

import pytest

from common import kernels
from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import plan_tasks
from common.storage import LocalStorage
from common.tokenization import Vocabulary, load_tokenizer
from tests.support.helpers import VOCAB, WIKI, need_shared
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor

GOLDEN = {
    "plain": ({}, {}, {
        "part-0b2af01731aa2d2b04e0.tfrecord": "3174d1bfbda5d805b5722e78c6eb4fc7075663ca16fbe5fd503183e45c3fef3b",
        "part-19c7040b4319f4dc8af0.tfrecord": "ea3815edf50910633ef4b9a859689b9fec1096435b5726a64e6719c75cdbda24",
        "part-3fc108ed1a472022882f.tfrecord": "09f06c705f34f482d007b2e22d52c7aafd0b225f10bfeba516a492c97a969413",
        "part-89ae440e8b21a4e4d361.tfrecord": "5ce09da4fae3d2e057a2ef8bd998ce415db5c935878462fa6b29f4f94b24ee44",
    }),
    "whole-word": ({"do_whole_word_mask": True}, {}, {
        "part-0b2af01731aa2d2b04e0.tfrecord": "80ab17c124e58bc38b23815c9f77dafe436e645709ef96cc24fc2311d7943737",
        "part-19c7040b4319f4dc8af0.tfrecord": "1d9194321d75df351bb160d5cfc28700cb2715aa02ddd91f706021b3b35168e8",
        "part-3fc108ed1a472022882f.tfrecord": "b1fe25fea0d483c80a35ccfe74c410f030c640f891cbff9cc0d1932497d36644",
        "part-89ae440e8b21a4e4d361.tfrecord": "ccd8a536924d2661bea70c00d78afe82ee7de06f8a29380ff7c4c902cead841d",
    }),
    "gzip-64": ({"max_seq_length": 64, "max_predictions_per_seq": 10}, {"gzip": True}, {
        "part-0b2af01731aa2d2b04e0.tfrecord.gz": "77cefe6052a892064731d082c9bb27a8bf143aae7f64a506c0eab639aa8a8f9b",
        "part-19c7040b4319f4dc8af0.tfrecord.gz": "1d9b911a89756b202e6a3ed2cef6f6d760874abc84582244845bf5c701c50938",
        "part-3fc108ed1a472022882f.tfrecord.gz": "3ffb3dfd86afab55f99deac7ba9a859e9a6fd6e71b1fe695838c3ef2236d3a81",
        "part-89ae440e8b21a4e4d361.tfrecord.gz": "dc34e99d9eecdbeba4489f7a51af2e3ab3573321647d12823caadacc15923c0b",
    }),
}


@pytest.fixture(scope="module")
def vocabulary():
    need_shared()
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))


@pytest.mark.parametrize("path", ["compiled", "numpy"])
@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_bert_shards_keep_their_bytes(case, path, vocabulary, tmp_path, monkeypatch):
    if path == "numpy":
        monkeypatch.setattr(kernels, "compiled", None)
    else:
        assert kernels.compiled is not None, "the compiled kernels are not built (tests/common/test_kernels.py)"
    objective_params, writer_params, expected = GOLDEN[case]
    config = JobConfig(data_uri=str(WIKI), output_uri=str(tmp_path), reader=Component("wikiextractor"),
                       steps=steps_of("blingfire"), tokenizer_json="",
                       objective=Component("bert", {"dupe_factor": 2, **objective_params}),
                       writer=Component("tfrecord", writer_params))
    processor = TaskProcessor(config, vocabulary, LocalStorage(str(tmp_path)))
    corpus = LocalStorage(str(WIKI))
    digests = {}
    for task in plan_tasks(corpus.list_inputs(), 512 * 1024):
        result = processor.process(task, processor.reader.read(corpus, task))
        for shard in result.files:
            data = (tmp_path / shard.name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == shard.sha256 and len(data) == shard.bytes
            digests[shard.name] = shard.sha256
    assert digests == expected
