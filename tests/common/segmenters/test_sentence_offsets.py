"""Bling Fire's sentence offsets without the wrapper's per-byte loop (issue #33) are the wrapper's.

common/segmenters/sentence_offsets.py calls Bling Fire's C entry point and maps byte offsets to string offsets in
bulk; common/segmenters/sentences.py cuts a document in one pass over the starts; common/segmenters/cjk_sentences.py
finds terminators by C searches.  Each is held here equal to what it replaced: the wrapper's
``text_to_sentences_and_offsets``, the per-paragraph cut, the character-class scans.
"""

import concurrent.futures
import functools
import random
import re
import sys

import blingfire
import pytest

from common.readers import ParseReport, reader_named
from common.segmenters import cjk_sentences, sentence_offsets
from common.segmenters.cjk_sentences import TERMINATORS, adjust_starts, has_cjk_terminator
from common.segmenters.sentence_offsets import sentence_offsets as offsets_of
from common.segmenters.sentence_offsets import sentence_starts
from common.segmenters.sentences import MAX_SEGMENT_CHARS, Segmenter, _bounded, segment_pieces
from tests.support.helpers import REPO, WIKI, need_shared

CJK = REPO / "tests" / "data" / "cjk"

#: Text the byte -> character mapping could get wrong: astral characters, combining marks, CRLF, NBSP,
#: Bling Fire's own whitespace (zero-width space, BOM, NUL) that Python does not strip, a text with no
#: sentence at all for Bling Fire, and long lines, ASCII and not, past the reused buffers' size.
TRICKY = [
    "a", ".", "😀", "\u200b", "\u200b\u200b x", "x\u200b", "\ufeffHi. There.", "\x00. a. \x00", "\x85Next. Line.",
    "😀 Hi there. 😀 Then 𝔘𝔫𝔦𝔠𝔬𝔡𝔢! ok. 𠀀𠀁。下一句。",
    "Cafe\u0301 au lait. Nai\u0308ve re\u0301sume\u0301s? Yes. Z\u0351\u0361a\u0489lgo.",
    "One line.\r\nTwo lines.\r\n\r\nThree. \r\n",
    "Mr.\u00a0Smith went.\u00a0Then\u00a0he left. Dr.\u202fWho? Yes\u3000no. A\u2028B. C\u2029D.",
    "日本語の文です。次の文！「引用です。」と言った。",
    "한국어 문장입니다. 두 번째 문장! 세 번째?",
    "他说：“好！”，然后走了。……我便考你一考；你会吗？",
    "word " * 60_000 + "end. Next sentence.",
    ("Émile Zola écrit. " * 3_000 + "Ωμέγα. ") * 8,
    "x" * 300_000 + ". Y.",
]


@functools.cache
def wiki_documents() -> list[list[str]]:
    need_shared()
    reader = reader_named("wikiextractor")()
    documents = []
    for path in sorted(p for p in WIKI.rglob("*") if p.is_file()):
        documents += [document.lines for document in reader.parse(path.read_bytes(), 0, ParseReport())]
    return documents


def cjk_documents() -> list[list[str]]:
    return [(CJK / name).read_text(encoding="utf-8").splitlines()
            for name in ("kong_yiji.txt", "rashomon.txt", "gsdsimp_test_segmented.txt")]


def joined(lines: list[str]) -> str:
    """The text segment_pieces hands Bling Fire: the stripped, non-empty paragraphs joined by newlines."""
    return "\n".join(line.strip() for line in lines if line.strip())


def random_texts(count: int, seed: int = 33) -> list[str]:
    rng = random.Random(seed)
    atoms = ["Hello", "world", "Dr.", "U.S.", ".", "!", "?", ":", ",", " ", "  ", "\t", "\n", "\r\n", "\u00a0",
             "\u200b", "\u3000", "\x85", "\x1c", "。", "！", "？", "；", "…", "⋯", "．", "”", "」", "』", "）",
             "，", "、", "他说", "好", "私は", "e\u0301", "😀", "𝔘", "x" * 40]
    return ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 80))) for _ in range(count)]


def wrapper_offsets(text: str) -> list[tuple[int, int]]:
    return blingfire.text_to_sentences_and_offsets(text)[1]


@pytest.fixture(scope="module")
def corpus_texts() -> list[str]:
    texts = [joined(lines) for lines in wiki_documents() + cjk_documents()]
    texts += [line for lines in cjk_documents() for line in lines if line.strip()]  # each paragraph alone too
    return [text for text in texts if text]


def test_offsets_are_the_wrappers_on_every_corpus(corpus_texts):
    assert any(not text.isascii() for text in corpus_texts) and any("。" in text for text in corpus_texts)
    for text in corpus_texts:
        expected = wrapper_offsets(text)
        assert offsets_of(text) == expected, text[:80]
        assert sentence_starts(text) == [start for start, _ in expected], text[:80]


@pytest.mark.parametrize("text", TRICKY, ids=range(len(TRICKY)))
def test_offsets_are_the_wrappers_on_tricky_text(text):
    expected = wrapper_offsets(text)
    assert offsets_of(text) == expected
    assert sentence_starts(text) == [start for start, _ in expected]
    assert sentence_starts(text, text.encode("utf-8")) == [start for start, _ in expected]


def test_offsets_are_the_wrappers_on_random_text():
    for text in random_texts(400):
        expected = wrapper_offsets(text)
        assert offsets_of(text) == expected, repr(text)
        assert sentence_starts(text) == [start for start, _ in expected], repr(text)


def test_without_the_entry_point_the_wrapper_answers(monkeypatch):
    monkeypatch.setattr(sentence_offsets, "_entry", False)
    text = TRICKY[9]
    assert sentence_starts(text) == [start for start, _ in wrapper_offsets(text)]
    assert offsets_of(text) == wrapper_offsets(text)


def test_a_text_past_the_reused_buffers_gets_its_own(monkeypatch):
    text = "Ünïcödé. Ωμέγα! " * 400
    expected = [start for start, _ in wrapper_offsets(text)]
    monkeypatch.setattr(sentence_offsets, "REUSE_BYTES", 1000)
    assert sentence_starts(text) == expected and offsets_of(text) == wrapper_offsets(text)
    assert sentence_starts(text[:300]) == [start for start, _ in wrapper_offsets(text[:300])]


def test_threads_get_their_own_buffers(corpus_texts):
    texts = corpus_texts[:40] * 3
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(sentence_starts, texts)) == [sentence_starts(text) for text in texts]


def reference_segment_pieces(lines: list[str]) -> list[list[str]]:
    """segment_pieces as it was before issue #33: the wrapper's starts, and each paragraph cut on its own."""
    paragraphs = [line.strip() for line in lines]
    paragraphs = [paragraph for paragraph in paragraphs if paragraph]
    if not paragraphs:
        return []
    text = "\n".join(paragraphs)
    starts = adjust_starts(text, sorted(start for start, _ in wrapper_offsets(text)))
    segments: list[list[str]] = []
    begin, next_start = 0, 0
    for paragraph in paragraphs:
        end = begin + len(paragraph)
        cuts, opens = [], begin == 0
        while next_start < len(starts) and starts[next_start] < end:
            if starts[next_start] > begin:
                cuts.append(starts[next_start] - begin)
            else:
                opens = True
            next_start += 1
        bounds = [0]
        for cut in cuts:
            while cut > bounds[-1] and paragraph[cut - 1].isspace():
                cut -= 1
            if cut > bounds[-1]:
                bounds.append(cut)
        bounds.append(len(paragraph))
        for index, (a, b) in enumerate(zip(bounds, bounds[1:])):
            if index == 0 and not opens and segments:
                segments[-1].append(paragraph[a:b])
            else:
                segments.append([paragraph[a:b]])
        begin = end + 1
    bounded = []
    for pieces in segments:
        if sum(map(len, pieces)) <= MAX_SEGMENT_CHARS:
            bounded.append(pieces)
        else:
            bounded.extend([chunk] for piece in pieces for chunk in _bounded(piece))
    return bounded


def test_segments_are_the_per_paragraph_cuts_of_the_wrappers_starts():
    documents = wiki_documents() + cjk_documents()
    documents += [text.split("\n") for text in random_texts(800, seed=7) + TRICKY[:-3]]
    documents += [["A sentence that goes on", "into the next paragraph. And ends.", "", "following:", "During it."]]
    documents += [["word " * 30_000 + "end.", "Next one. Two."], ["a" * 150_000, "b. c."]]  # the >100k cut
    for lines in documents:
        assert segment_pieces(lines, Segmenter.BLINGFIRE) == reference_segment_pieces(lines), repr(lines)[:200]


def test_terminator_searches_are_the_character_class_scans(corpus_texts):
    any_terminator = re.compile(f"[{re.escape(TERMINATORS)}]")
    for text in corpus_texts + random_texts(600) + TRICKY[:-3]:
        expected = any_terminator.search(text) is not None
        assert has_cjk_terminator(text) is expected
        assert has_cjk_terminator(text, text.encode("utf-8")) is expected
        assert [m.span() for m in cjk_sentences._ends(text)] == [m.span() for m in cjk_sentences._END.finditer(text)]


def test_content_is_exactly_isalnum():
    everything = "".join(chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF)
    assert [m.start() for m in cjk_sentences._CONTENT.finditer(everything)] == \
        [index for index, ch in enumerate(everything) if ch.isalnum()]
