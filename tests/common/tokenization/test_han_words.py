"""Chinese and Japanese text: sentence ends, words inside Han runs, whole-word masking by those words.

Real text only (tests/data/cjk, sources and licenses in its README): Lu Xun's
"Kong Yiji", Akutagawa's "Rashomon", and Universal Dependencies' GSDSimp test
sentences with their gold words.
"""

from __future__ import annotations

from pathlib import Path

import blingfire
import numpy as np
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import plan_tasks
from common.objectives import TokenizedDocuments
from common.segmenters.cjk_sentences import CLOSERS, adjust_starts
from common.segmenters.sentences import Segmenter, split_segments
from common.storage import LocalStorage
from common.tokenization import Vocabulary, load_tokenizer
from common.tokenization.han_words import check_tokenizer, encode_with_words, find_words
from common.word_segmenters import make_word_segmenter
from common.word_segmenters.base import han_runs
from tests.support.helpers import VOCAB, WIKI, need_shared
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor, TaskStats

DATA = Path(__file__).resolve().parents[2] / "data" / "cjk"


def lines_of(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


def gold_sentences() -> list[list[str]]:
    return [line.split(" ") for line in lines_of("gsdsimp_test_segmented.txt")]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory) -> Path:
    """bert-base-uncased's vocab.txt plus the Han characters of the test texts it lacks (63% of Kong Yiji's
    characters would otherwise be [UNK]), as a Chinese BERT's vocabulary has them."""
    need_shared()
    pieces = VOCAB.read_text(encoding="utf-8").splitlines()
    known = set(pieces)
    text = "".join((DATA / name).read_text(encoding="utf-8") for name in
                   ("kong_yiji.txt", "rashomon.txt", "gsdsimp_test_segmented.txt"))
    han = sorted({ch for start, end in han_runs(text) for ch in text[start:end]} - known)
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(pieces + han) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def vocabulary(vocab_file):
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(vocab_file)))


@pytest.fixture(scope="module")
def jieba():
    return make_word_segmenter(Component("jieba"))


# ---------------------------------------------------------------- sentences

def test_bling_fire_alone_puts_closing_quotes_in_the_next_sentence():
    """What the CJK rules fix, measured: Bling Fire's own cuts of the two texts."""
    wrong = 0
    for name in ("kong_yiji.txt", "rashomon.txt"):
        for line in lines_of(name):
            sentences, _ = blingfire.text_to_sentences_and_offsets(line)
            wrong += sum(1 for sentence in sentences.split("\n") if sentence and sentence[0] in "”」")
    assert wrong >= 30


def test_chinese_sentences_keep_their_closing_quotes():
    segments = split_segments(lines_of("kong_yiji.txt"), Segmenter.BLINGFIRE)
    assert not [s for s in segments if s[0] in CLOSERS]
    assert "孔乙己一到店，所有喝酒的人便都看着他笑，有的叫道，“孔乙己，你脸上又添上新伤疤了！”" in segments
    assert "他不回答，对柜里说，“温两碗酒，要一碟茴香豆。”" in segments
    # ；ends a sentence; "……" after a comma is a pause; "……" on its own joins the sentence before
    assert "掌柜是一副凶脸孔，主顾也没有好声气，教人活泼不得；" in segments
    assert "他说，“读过书，……我便考你一考。" in segments
    assert "窃书！……" in segments
    assert all(any(ch.isalnum() for ch in s) for s in segments)
    # every segment ends at a sentence end or at the end of its paragraph
    ends = set("。！？；…”’」』）")
    assert all(s[-1] in ends for s in segments), [s for s in segments if s[-1] not in ends]


def test_japanese_sentences_keep_their_closing_brackets():
    segments = split_segments(lines_of("rashomon.txt"), Segmenter.BLINGFIRE)
    assert "「おのれ、どこへ行く。」" in segments
    assert "「この髪を抜いてな、この髪を抜いてな、鬘にしようと思うたのじゃ。」" in segments
    assert ["「何をしていた。", "云え。", "云わぬと、これだぞよ。」"] == segments[segments.index("「何をしていた。"):][:3]
    assert "作者はさっき、「下人が雨やみを待っていた」と書いた。" in segments  # 」 inside a sentence: no cut
    assert not [s for s in segments if s[0] in CLOSERS]


def test_english_gets_bling_fires_cuts_unchanged():
    need_shared()
    text = (WIKI / "AB" / "wiki_00").read_text(encoding="utf-8")  # the file with "challenging… the concept"
    _, offsets = blingfire.text_to_sentences_and_offsets(text)
    starts = sorted(start for start, _ in offsets)
    assert adjust_starts(text, starts) == starts
    assert "…" in text  # the English ellipsis is there, and no cut was added after it


# ---------------------------------------------------------------- words

def test_every_han_character_maps_to_its_token(vocabulary, jieba):
    """Texts are encoded whole (the ids without a segmenter); each Han character is one token, so every text
    with Han characters, mixed scripts included, gets the segmenter's words."""
    pieces = [p for name in ("kong_yiji.txt", "rashomon.txt") for p in lines_of(name)]
    pieces += ["".join(words) for words in gold_sentences()]
    pieces += ["iPhone手机很好用。A股大涨", "ｶﾀｶﾅ漢字ひらがな", "中\u0301文", "", "English only, no Han.", "𠀀𠀁丈\uf900豈",
               "混合mixed文字 text 中文。", "한국어 漢字"]
    ids, lengths = vocabulary.encode_many(pieces)
    words = find_words(pieces, jieba)
    same_ids, same_lengths, starts, unmapped = encode_with_words(vocabulary, words)
    assert np.array_equal(ids, same_ids) and np.array_equal(lengths, same_lengths)
    assert unmapped == 0 and words.bad_runs == 0 and len(starts) == len(ids)
    assert words.han_chars.sum() > 10_000
    # a text whose unknown token is not a Han character cannot be mapped: counted, the tokenizer's words kept
    odd = ["中文\u2fffx中文"]
    odd_ids, _, odd_starts, odd_unmapped = encode_with_words(vocabulary, find_words(odd, jieba))
    if vocabulary.unk_id in odd_ids.tolist() and odd_unmapped:
        assert np.array_equal(odd_starts, vocabulary.starts_word[odd_ids])


def test_word_starts_inside_han_runs_are_the_segmenters(vocabulary, jieba):
    import rjieba

    pieces = lines_of("kong_yiji.txt")
    ids, lengths, starts, _ = encode_with_words(vocabulary, find_words(pieces, jieba))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    multi_char_words = 0
    for index, piece in enumerate(pieces):
        encoding = vocabulary.text_tokenizer.encode(piece, add_special_tokens=False)
        token_starts = starts[offsets[index]:offsets[index + 1]]
        expected_starts = {}
        for start, end in han_runs(piece):
            position = start
            for word in rjieba.cut(piece[start:end]):
                for k in range(len(word)):
                    expected_starts[position + k] = k == 0
                position += len(word)
                multi_char_words += len(word) > 1
        for token, (char_start, _) in enumerate(encoding.offsets):
            if char_start in expected_starts:
                assert token_starts[token] == expected_starts[char_start]
            else:  # punctuation and other text: the tokenizer's own word starts
                assert token_starts[token] == vocabulary.starts_word[encoding.ids[token]]
    assert multi_char_words > 500


def test_agreement_with_gold_words():
    """Boundaries inside Han runs against UD GSDSimp's gold words (the figures docs/tokenizers.md states)."""
    figures = {}
    for hmm in (True, False):
        segmenter = make_word_segmenter(Component("jieba", {"jieba_hmm": hmm}))
        found = missed = wrong = 0
        for words in gold_sentences():
            text = "".join(words)
            cuts = set(np.cumsum([len(w) for w in words]).tolist())
            runs = han_runs(text)
            gold, predicted = set(), set()
            for (start, end), lengths in zip(runs, segmenter.word_lengths([text[a:b] for a, b in runs])):
                gold |= {c for c in cuts if start < c < end}
                predicted |= {start + c for c in np.cumsum(lengths)[:-1].tolist()}
            found += len(gold & predicted)
            wrong += len(predicted - gold)
            missed += len(gold - predicted)
        figures[hmm] = (found / (found + wrong), found / (found + missed))
    precision, recall = figures[True]
    assert round(precision, 3) == 0.966 and round(recall, 3) == 0.826
    assert figures[False][0] < precision and figures[False][1] > recall  # the HMM trades recall for precision


def test_a_tokenizer_that_does_not_isolate_han_is_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE({"a": 0, "<unk>": 1}, [], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    with pytest.raises(ValueError, match="Han character a token of its own"):
        check_tokenizer(Vocabulary.from_tokenizer(tokenizer, {"unk": "<unk>"}))


# ---------------------------------------------------------------- masking by words

def chinese_corpus(tmp_path: Path) -> Path:
    """Kong Yiji and the GSDSimp sentences as WikiExtractor documents."""
    docs = [("1", "孔乙己", lines_of("kong_yiji.txt"))]
    sentences = ["".join(words) for words in gold_sentences()]
    docs += [(str(i + 2), f"GSD {i}", sentences[i:i + 10]) for i in range(0, len(sentences), 10)]
    path = tmp_path / "corpus" / "AA"
    path.mkdir(parents=True)
    (path / "wiki_00").write_text("".join(f'<doc id="{d}" url="" title="{t}">\n{t}\n\n' + "\n".join(lines) +
                                          "\n</doc>\n" for d, t, lines in docs), encoding="utf-8")
    return tmp_path / "corpus"


def tokenized_chinese(tmp_path, vocabulary, objective: str, params: dict) -> tuple[TaskProcessor, TokenizedDocuments]:
    corpus = chinese_corpus(tmp_path)
    config = JobConfig(data_uri=str(corpus), output_uri=str(tmp_path / "out"), reader=Component("wikiextractor"),
                       tokenizer_json="", objective=Component(objective, params),
                       steps=steps_of("blingfire", word_segmenter=Component("jieba")))
    processor = TaskProcessor(config, vocabulary, LocalStorage(str(tmp_path / "out")))
    storage = LocalStorage(str(corpus))
    (task,) = plan_tasks(storage.list_inputs(), 1 << 30)
    return processor, processor.tokenize(task, processor.reader.read(storage, task), TaskStats())


CASES = {"bert": {"do_whole_word_mask": True, "dupe_factor": 5},
         "albert": {"dupe_factor": 5, "max_seq_length": 128},  # 20 predictions: 15% of 128
         "roberta": {"masking": "static", "dupe_factor": 5, "do_whole_word_mask": True, "max_seq_length": 128}}


@pytest.mark.parametrize("objective", sorted(CASES))
def test_masked_sets_are_unions_of_words(objective, tmp_path, vocabulary):
    """Every token is given a unique id (its index), so each record's original
    ids say which token, and so which word, every position holds."""
    processor, documents = tokenized_chinese(tmp_path, vocabulary, objective, CASES[objective])
    assert documents.word_starts is not None
    n = len(documents.tokens)
    base = 1000
    assert base + n < vocabulary.size
    unique = TokenizedDocuments(np.arange(base, base + n, dtype=np.int32), documents.segment_offsets,
                                documents.document_offsets, documents.word_starts)
    word_of = np.cumsum(documents.word_starts) - 1
    word_size = np.bincount(word_of)
    obj = processor.objective
    masked = total = replaced = kept = randomised = multi_masked = 0
    for pass_index in range(obj.passes):
        for batch in obj.batches(unique, "task", pass_index):
            ids = np.asarray(batch.columns["input_ids"])
            positions = np.asarray(batch.columns["masked_lm_positions"])
            labels = np.asarray(batch.columns["masked_lm_ids"])
            weights = np.asarray(batch.columns["masked_lm_weights"])
            for row in range(len(ids)):
                chosen = positions[row][weights[row] > 0]
                original = ids[row].copy()
                original[chosen] = labels[row][weights[row] > 0]
                text = (original >= base) & (original < base + n)
                source = original[text] - base
                in_row = np.nonzero(text)[0]
                masked_set = set(chosen.tolist())
                words_here = word_of[source]
                for word in np.unique(words_here[np.isin(in_row, chosen)]):
                    members = set(in_row[words_here == word].tolist())
                    assert members <= masked_set, (objective, word)  # a word is masked whole, or not at all
                    multi_masked += word_size[word] > 1 and len(members) == word_size[word]
                assert masked_set <= set(in_row.tolist())
                total += int(text.sum())
                masked += len(chosen)
                current = ids[row][chosen]
                replaced += int((current == vocabulary.mask_id).sum())
                kept += int((current == original[chosen]).sum())
                randomised += int(((current != vocabulary.mask_id) & (current != original[chosen])).sum())
    assert multi_masked > 200  # words of two or more characters, masked whole
    assert 0.13 <= masked / total <= 0.155, masked / total  # masked_lm_prob 0.15, whole words may fall short
    assert (documents.tokens == vocabulary.unk_id).mean() < 0.01
    assert abs(replaced / masked - 0.8) < 0.03 and abs(kept / masked - 0.1) < 0.03 and \
        abs(randomised / masked - 0.1) < 0.03


def test_bad_input_is_counted_never_fatal(tmp_path, vocabulary):
    """Mixed scripts, a lone surrogate escape, and a 1 MB run of Han characters without punctuation."""
    run = ("的一是不了人我在有他这为之大来以个中上们" * 26_000)[:500_000]  # 1.5 MB of UTF-8
    path = tmp_path / "corpus"
    path.mkdir()
    (path / "wiki.jsonl").write_text(
        '{"id": "1", "text": "混合mixed文字 text ｶﾀｶﾅ 한국어 中文。Ελληνικά 漢字"}\n'
        '{"id": "2", "text": "bad \\ud800 surrogate 中文"}\n'
        f'{{"id": "3", "text": "{run}"}}\n', encoding="utf-8")
    config = JobConfig(data_uri=str(path), output_uri=str(tmp_path / "out"), reader=Component("jsonl"),
                       tokenizer_json="", objective=Component("bert", {"dupe_factor": 1}),
                       steps=steps_of("blingfire", word_segmenter=Component("jieba")))
    processor = TaskProcessor(config, vocabulary, LocalStorage(str(tmp_path / "out")))
    storage = LocalStorage(str(path))
    (task,) = plan_tasks(storage.list_inputs(), 1 << 30)
    result = processor.process(task, processor.reader.read(storage, task))
    assert result.records > 0 and result.stats.documents == 2
    assert sum(result.stats.skipped.values()) == 1, result.stats.skipped  # the surrogate document, counted
    assert result.stats.seconds["words"] > 0


# ---------------------------------------------------------------- chinese_ref for Hugging Face

#: transformers 4.x (DataCollatorForWholeWordMask reads chinese_ref; 5.x dropped both) with the tokenizers and
#: huggingface_hub it pins, installed apart by .ci/run (they conflict with this project's newer tokenizers).
TRANSFORMERS4 = Path(__file__).resolve().parents[3] / ".ci" / "transformers4"

COLLATE = r'''
import json, sys
import numpy as np, pyarrow.parquet as pq, torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast, DataCollatorForWholeWordMask
import transformers
assert transformers.__version__.startswith("4."), transformers.__version__
shard, vocab = sys.argv[1], sys.argv[2]
rows = pq.read_table(shard).to_pylist()
tokenizer = BertTokenizerFast(vocab_file=vocab, do_lower_case=True)
collator = DataCollatorForWholeWordMask(tokenizer=tokenizer, mlm_probability=0.15, return_tensors="pt")
torch.manual_seed(0)
examples = [{"input_ids": r["input_ids"][:sum(r["input_mask"])], "chinese_ref": r["chinese_ref"]} for r in rows]
masked = []
model = BertForMaskedLM(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=64, max_position_embeddings=128))
losses = []
for start in range(0, len(examples), 16):
    batch = collator(examples[start:start + 16])
    masked += [np.nonzero(row.numpy() != -100)[0].tolist() for row in batch["labels"]]
    losses.append(float(model(input_ids=batch["input_ids"], labels=batch["labels"]).loss))
print(json.dumps({"masked": masked, "losses": losses}))
'''


def test_chinese_ref_masks_whole_words_in_huggingfaces_collator(tmp_path, vocabulary, vocab_file):
    import json
    import os
    import subprocess
    import sys

    import pyarrow.parquet as pq

    if not (TRANSFORMERS4 / "transformers").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{TRANSFORMERS4} is missing: .ci/run installs transformers 4 there")
        pytest.skip(f"transformers 4 is not installed in {TRANSFORMERS4} (see .ci/run)")
    corpus = chinese_corpus(tmp_path)
    config = JobConfig(data_uri=str(corpus), output_uri=str(tmp_path / "out"), reader=Component("wikiextractor"),
                       tokenizer_json="",
                       objective=Component("roberta", {"masking": "none", "max_seq_length": 128}),
                       writer=Component("parquet", {"chinese_ref": True}), steps=steps_of("blingfire", word_segmenter=Component("jieba")))
    processor = TaskProcessor(config, vocabulary, LocalStorage(str(tmp_path / "out")))
    storage = LocalStorage(str(corpus))
    (task,) = plan_tasks(storage.list_inputs(), 1 << 30)
    (shard,) = processor.process(task, processor.reader.read(storage, task)).files
    rows = pq.read_table(tmp_path / "out" / shard.name).to_pylist()
    words_of_two_or_more = 0
    for row in rows:  # chinese_ref: exactly the text tokens that do not begin a word
        text = [i for i, (s, m) in enumerate(zip(row["special_tokens_mask"], row["input_mask"])) if m and not s]
        assert row["chinese_ref"] == [i for i in text if not row["word_starts"][i]]
        words_of_two_or_more += sum(1 for i in text if not row["word_starts"][i] and row["word_starts"][i - 1])
    assert words_of_two_or_more > 1000

    env = {**os.environ, "PYTHONPATH": str(TRANSFORMERS4), "USE_TF": "0", "USE_TORCH": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", COLLATE, str(tmp_path / "out" / shard.name), str(vocab_file)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(np.isfinite(result["losses"]))
    masked_total = tokens_total = multi = 0
    for row, masked in zip(rows, result["masked"]):
        starts = row["word_starts"]
        length = sum(row["input_mask"])
        word_of, word = [], -1
        for i in range(length):
            word += bool(starts[i]) or bool(row["special_tokens_mask"][i])
            word_of.append(word if not row["special_tokens_mask"][i] else None)
        masked_words = {word_of[i] for i in masked}
        assert None not in masked_words  # never a special token
        # whole words only; the collator never labels the unknown token (a special token to it), even inside a word
        members = {w: [i for i in range(length) if word_of[i] == w and row["input_ids"][i] != vocabulary.unk_id]
                   for w in masked_words}
        assert sorted(masked) == sorted(i for w in masked_words for i in members[w])
        multi += sum(1 for w in masked_words if len(members[w]) > 1)
        masked_total += len(masked)
        tokens_total += sum(1 for w in word_of if w is not None)
    assert multi > 100
    assert 0.13 <= masked_total / tokens_total <= 0.155, masked_total / tokens_total


def test_train_vocab_on_chinese_splits_characters_as_bert(tmp_path):
    """mlm-train-vocab's WordPiece on Chinese text: every Han character is its own piece (BERT's
    tokenize_chinese_chars), none is a ## continuation or part of a longer piece, and the text has no [UNK]."""
    import subprocess
    import sys

    corpus = tmp_path / "zh"
    corpus.mkdir()
    (corpus / "a.txt").write_text((DATA / "kong_yiji.txt").read_text(encoding="utf-8"), encoding="utf-8")
    (corpus / "b.txt").write_text("\n".join("".join(words) for words in gold_sentences()) + "\n", encoding="utf-8")
    output = tmp_path / "vocab.txt"
    done = subprocess.run([sys.executable, "-m", "common.tokenization.training", "--data", str(corpus), "--output",
                           str(output), "--vocab-size", "3000", "--format", "text"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pieces = output.read_text(encoding="utf-8").splitlines()
    with_han = [p for p in pieces if han_runs(p)]
    assert len(with_han) > 1500
    assert all(len(p) == 1 for p in with_han), [p for p in with_han if len(p) != 1][:5]
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(output)))
    text = (DATA / "kong_yiji.txt").read_text(encoding="utf-8")
    ids, _ = vocabulary.encode_many([text])
    assert vocabulary.unk_id not in ids.tolist()
    assert len(ids) == sum(end - start for start, end in han_runs(text)) + sum(
        1 for ch in text if not ch.isspace() and not han_runs(ch))  # one token per character


def test_segmenter_output_that_does_not_cover_its_run_is_counted():
    class Broken:  # too long a word for run 1, no word for run 2: those runs stay one-character words
        def word_lengths(self, runs):
            return [[len(r) + 1] if i == 1 else [] if i == 2 else [2] * (len(r) // 2) for i, r in enumerate(runs)]

    words = find_words(["中文，你好。中国", "人们"], Broken())
    assert words.bad_runs == 2
    assert words.starts_word.tolist() == [True, False, True, True, True, True, True, False]
