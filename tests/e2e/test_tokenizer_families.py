"""Each tokenizer family through the real ventilator and workers, read back
with TensorFlow: a RoBERTa-style byte-level BPE and an ALBERT-style Unigram
tokenizer.json (trained with tokenizers), and a SentencePiece .model
(trained with sentencepiece, converted by the ventilator), with whole-word
masking (tests/support/tokenizer_families.py builds them from ../shared's corpus)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.helpers import WIKI, check_shards, manifest, need_shared, run_ventilator
from tests.support.tf_reader import read_examples
from tests.support.tokenizer_families import ventilator_args, vocabulary_of

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("family", ["bpe", "unigram", "sentencepiece"])
def test_family_end_to_end(tmp_path, family):
    need_shared()
    vocabulary = vocabulary_of(family)
    output = tmp_path / "out"
    result = run_ventilator(WIKI / "AA", output, *ventilator_args(family), "--workers", "2", "--dupe-factor", "1",
                            "--task-size", "256K", "--do-whole-word-mask", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"tokenizer: {type(vocabulary.tokenizer.model).__name__}" in result.stderr
    special = vocabulary.special
    totals = check_shards(output, vocab_size=special.vocab_size, cls_id=special.cls, sep_id=special.sep,
                          pad_id=special.pad)
    assert totals["records"] > 500 and 0.1 < totals["masked"] / totals["tokens"] < 0.2

    # Whole words by ▁: a masked piece that continues a word follows a masked piece (or opens A or B), and a
    # masked word's next piece is masked too.  Byte-level BPE cannot be checked from the shards alone (a
    # segment's first word has no Ġ, so word starts need the segment boundaries):
    # tests/common/tokenization/test_tokenizer_families.py checks every family against the documents.
    marker = "\u2581"
    continues = np.array([not (vocabulary.tokenizer.id_to_token(i) or "").startswith(marker)
                          for i in range(special.vocab_size)])
    roles = {special.cls, special.sep, special.pad, special.mask}
    for entry in manifest(output).values():
        for shard in entry["shards"]:
            for ex in read_examples(str(Path(output) / shard["name"])):
                count = int(ex["masked_lm_weights"].sum())
                positions = ex["masked_lm_positions"][:count]
                labels = ex["masked_lm_ids"][:count]
                assert not roles & set(labels.tolist())  # special tokens are never masked, never come from text
                original = ex["input_ids"].copy()
                original[positions] = labels
                masked = set(positions.tolist())
                for p in positions.tolist() if family != "bpe" else ():
                    after = p + 1
                    if original[after] not in roles and continues[original[after]]:
                        assert after in masked, f"{family}: a word's next piece is left unmasked"
                    if continues[original[p]] and original[p - 1] not in roles:
                        assert p - 1 in masked, f"{family}: a word's first piece is left unmasked"


@pytest.mark.parametrize("flags,expected", [
    ([], "the bert objective needs the tokenizer's mask token(s); this tokenizer has none (name them with "
         "--mask-token)"),
    (["--mask-token", "<nope>"], "tokenizer: the mask token '<nope>' is not in the tokenizer's vocabulary"),
])
def test_a_tokenizer_without_a_mask_is_refused_in_one_line(tmp_path, flags, expected):
    import json

    need_shared()
    spec = json.loads(vocabulary_of("bpe").tokenizer.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] != "<mask>"]
    spec["model"]["vocab"]["<masque>"] = spec["model"]["vocab"].pop("<mask>")
    path = tmp_path / "no-mask.json"
    path.write_text(json.dumps(spec))
    result = run_ventilator(WIKI / "AA", tmp_path / "out", "--tokenizer", path, "--workers", "1", *flags, timeout=120)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ventilator: error:") and expected in last_line, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "out" / "manifest.jsonl").exists()
