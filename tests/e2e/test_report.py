"""mlm-report on real outputs: its numbers against the shards read with TensorFlow and the manifest, its page
rendered by headless Chromium, bad outputs reported as such, and OUT left alone outside OUT/report/."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from common.steps import split_of
from tests.support.factories import finished_job, wiki_prefix
from tests.support.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator

pytestmark = pytest.mark.e2e

#: Text that bert-base-uncased's vocabulary cannot spell: each emoji and runic letter becomes [UNK].
UNKNOWN_DOCUMENT = ('<doc id="990001" url="x" title="Unknown">\nUnknown\n\n'
                    + " ".join(["The parrot 🦜 said ᚠᚢᚦ to the owl 🦉 twice."] * 40) + "\n"
                    + " ".join(["Runes ᚠᚢᚦ and more 🦜 parrots are rare in this corpus."] * 40) + "\n</doc>\n")


def report_command(output, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "report", str(output), *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=180)


def tree(output: Path) -> dict[str, str]:
    return {str(p.relative_to(output)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(output.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A BERT TFRecord job with a held-out side over ~250 KB of Wikipedia and a document full of [UNK]s."""
    root = tmp_path_factory.mktemp("report")
    output = finished_job(root, "--vocab-file", VOCAB, "--task-size", "64K", "--workers", "2", "--dupe-factor", "2",
                          "--holdout-fraction", "0.2", timeout=180,
                          data=wiki_prefix(root / "corpus", 250_000, extra=UNKNOWN_DOCUMENT))
    before = tree(output)
    made = report_command(output)
    assert made.returncode == 0, made.stderr
    return output, before, made


def independent_counts(output: Path) -> dict:
    """Per side, from TensorFlow's reader and the vocabulary file alone: records, [UNK] in the text (masked
    positions restored to what they hid), NSP labels."""
    from tests.support.tf_reader import read_examples

    vocab = {line.rstrip("\n"): i for i, line in enumerate(VOCAB.read_text(encoding="utf-8").splitlines(True))}
    unk, specials = vocab["[UNK]"], [vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")]
    counts = {side: {"records": 0, "unk": 0, "labels": {"0": 0, "1": 0}, "tokens": 0} for side in ("train", "holdout")}
    for entry in manifest(output).values():
        for shard in entry["shards"]:
            side = counts["holdout" if split_of(shard) == "holdout" else "train"]
            for example in read_examples(str(output / shard["name"])):
                ids = example["input_ids"].copy()
                used = example["masked_lm_weights"] > 0
                ids[example["masked_lm_positions"][used]] = example["masked_lm_ids"][used]
                text = ids[(example["input_mask"] == 1) & ~np.isin(ids, specials)]
                side["records"] += 1
                side["tokens"] += int(example["input_mask"].sum())
                side["unk"] += int((text == unk).sum())
                side["labels"][str(int(example["next_sentence_labels"][0]))] += 1
    return counts


def test_the_cost_counts_tokens_without_padding_and_each_host_from_hello_to_exit(finished):
    """The summary's output tokens without padding are the training records' input_mask ones as TensorFlow reads
    them; the host's hours run from its workers' Hello to their last word, so they cover what the
    acknowledgements alone show (first task's start to last ack) and no more than the sink's run."""
    output, _before, _made = finished
    summary = json.loads((output / "summary.json").read_text())
    cost = summary["cost"]
    counts = independent_counts(output)
    assert cost["output_tokens_without_padding"] == counts["train"]["tokens"] > 0
    assert cost["output_tokens"] == counts["train"]["records"] * 128 > cost["output_tokens_without_padding"]
    entries = list(manifest(output).values())
    acked = max(e["at"] for e in entries) - min(e["at"] - e["seconds"] for e in entries)
    assert cost["worker_hosts"] == 1
    assert acked - 0.01 <= cost["instance_hours"] * 3600 <= summary["this_run"]["seconds"] + 1


def test_the_numbers_match_the_shards_and_the_manifest(finished):
    output, _before, made = finished
    report = json.loads((output / "report" / "report.json").read_text())
    assert report["ok"], report["problems"]
    expected = independent_counts(output)
    entries = manifest(output).values()
    assert report["sides"]["train"]["sequences"] == sum(e["records"] for e in entries) == expected["train"]["records"]
    assert report["sides"]["holdout"]["sequences"] == sum(e["holdout"]["records"] for e in entries
                                                          if "holdout" in e) == expected["holdout"]["records"]
    assert report["sample"]["files_read"] == report["sample"]["files_total"]  # the default budget covers it
    for side in ("train", "holdout"):
        numbers = report["records"][side]
        assert numbers["records_read"] == expected[side]["records"]
        assert numbers["unk"]["count"] == expected[side]["unk"]
        assert numbers["labels"] == expected[side]["labels"]
    assert expected["train"]["unk"] + expected["holdout"]["unk"] > 50, "the [UNK] document was tokenized"
    masking = report["records"]["train"]["masking"]
    assert abs(masking["as_mask"] - 0.8) < 0.03 and abs(masking["as_random"] - 0.1) < 0.03
    scripts = {s["script"]: s for s in report["unknown_text"]["by_script"]}
    assert scripts["Runic"]["rate"] == 1.0 and scripts["Latin"]["rate"] < 0.001
    assert {(t["text"], t["code_points"]) for t in report["unknown_text"]["top_unk_texts"][:3]} >= {
        ("🦜", "U+1F99C"), ("ᚠᚢᚦ", "U+16A0 U+16A2 U+16A6")}
    throughput = report["throughput"]
    assert sum(w["tasks"] for w in throughput["workers"].values()) == len(entries)
    page = (output / "report" / "index.html").read_text()
    assert f"<span id=sequences-train>{expected['train']['records']:,}</span>" in page
    assert f"<span id=unk-count-train>{expected['train']['unk']:,}</span>" in page
    assert f"<span id=label-holdout-1>{expected['holdout']['labels']['1']:,}</span>" in page
    assert "no problem found" in made.stdout


def screenshot(page: Path, tmp_path: Path) -> np.ndarray:
    """The page as Debian's headless Chromium draws it (1200x2400 pixels, RGB)."""
    from PIL import Image

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed (.ci/run installs it)")
    shot = tmp_path / "page.png"
    rendered = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400",
                               f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file(), rendered.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[:2] == (2400, 1200)
    ink = (pixels < 200).any(axis=2).mean()
    colours = len(np.unique(pixels.reshape(-1, 3) // 16, axis=0))
    assert ink > 0.02, f"the screenshot is nearly blank ({ink:.3%} ink)"
    assert colours > 8, "only a few colours: text without the plots"
    blue = ((pixels[..., 2] > 150) & (pixels[..., 0] < 80)).mean()  # the plots' #1f77b4
    assert blue > 0.002, "no plot was drawn"
    return pixels


def test_the_page_is_self_contained_and_chromium_renders_it(finished, tmp_path):
    output, _before, _made = finished
    page = (output / "report" / "index.html").read_text()
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page), "nothing is fetched"
    assert page.count("<svg") >= 5
    screenshot(output / "report" / "index.html", tmp_path)


#: Han characters the Chinese vocabulary lacks (one beyond the BMP) and an emoji: each becomes [UNK].
RARE_DOCUMENT = '<doc id="990002" url="x" title="rare">\nrare\n\n' + "生僻字：𠮷野家、龘，鹦鹉🦜说你好。" * 30 + "\n</doc>\n"


def test_a_chinese_and_english_output_is_drawn_with_cjk_glyphs(tmp_path):
    """Chinese and English documents under a Chinese BERT vocabulary: the top tokens' Han labels are drawn from a
    CJK font (matplotlib names each glyph path after its font; its last-resort font draws empty boxes), the text
    that became [UNK] is given by code points."""
    from bench.chinese_bench import chinese_vocabulary, make_corpus

    need_shared()
    make_corpus(tmp_path / "in" / "AA", 0.06)
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    (tmp_path / "in" / "AA" / "wiki_01").write_text(text[:text.index("</doc>\n", 60_000) + 7] + RARE_DOCUMENT,
                                                   encoding="utf-8")
    chinese_vocabulary(str(VOCAB), tmp_path)
    output = tmp_path / "out"
    result = run_ventilator(tmp_path / "in", output, "--vocab-file", tmp_path / "zh-vocab.txt", "--task-size", "64K",
                            "--workers", "1", "--dupe-factor", "1", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    made = report_command(output)
    assert made.returncode == 0, made.stderr
    report = json.loads((output / "report" / "report.json").read_text())
    top = [t["token"] for t in report["records"]["train"]["top_tokens"][:25]]
    assert "的" in top and "the" in top, top
    unknown = {t["text"]: t["code_points"] for t in report["unknown_text"]["top_unk_texts"]}
    assert unknown["𠮷"] == "U+20BB7" and unknown["🦜"] == "U+1F99C"
    page = (output / "report" / "index.html").read_text()
    assert "<code>U+20BB7</code>" in page
    fonts = {m.rsplit("-", 1)[0] for m in re.findall(r'<path id="([A-Za-z][\w-]*-[0-9a-f]+)"', page)}
    assert not any("LastResort" in f for f in fonts), fonts
    assert any("CJK" in f or "WenQuanYi" in f for f in fonts), fonts


def test_the_report_changes_nothing_outside_its_directory(finished):
    output, before, _made = finished
    after = tree(output)
    assert {n for n in after if not n.startswith("report/")} == set(before)
    assert {n: d for n, d in after.items() if not n.startswith("report/")} == before
    assert {n for n in after if n.startswith("report/")} == {"report/index.html", "report/report.json"}


def test_a_bad_output_still_gets_a_report_marked_as_such(finished, tmp_path):
    output, _before, _made = finished
    copy = tmp_path / "out"
    shutil.copytree(output, copy)
    shutil.rmtree(copy / "report")
    shards = sorted(f["name"] for e in manifest(copy).values() for f in e["shards"] if not split_of(f))
    (copy / shards[0]).unlink()
    with open(copy / "manifest.jsonl", "ab") as handle:
        handle.write(b'{"task": "torn')
    (copy / "notes.txt").write_text("not the pipeline's")
    (copy / "summary.json").unlink()
    before = tree(copy)
    made = report_command(copy)
    assert made.returncode == 0, made.stderr
    report = json.loads((copy / "report" / "report.json").read_text())
    problems = "\n".join(report["problems"])
    assert not report["ok"]
    assert "incomplete manifest" in problems and f"missing shard: {shards[0]}" in problems
    assert "foreign file: notes.txt (a file no job writes)" in problems and "no summary.json" in problems
    assert report["sample"]["files_read"] == report["sample"]["files_total"] - 1
    assert report["records"]["train"]["records_read"] > 0
    page = (copy / "report" / "index.html").read_text()
    assert "This output has problems" in page and "notes.txt" in page
    assert "mlm-report: foreign file: notes.txt" in made.stderr
    after = tree(copy)
    assert {n: d for n, d in after.items() if not n.startswith("report/")} == before


def test_sampling_reads_what_it_is_allowed_and_says_so(finished, tmp_path):
    output, _before, _made = finished
    copy = tmp_path / "out"
    shutil.copytree(output, copy)
    made = report_command(copy, "--sample", "1", "--input-sample", "0")
    assert made.returncode == 0, made.stderr
    report = json.loads((copy / "report" / "report.json").read_text())
    sample = report["sample"]
    assert sample["files_read"] == 2 < sample["files_total"]  # one file a side
    assert sample["bytes_read"] < sample["bytes_total"]
    assert f"read 2 of {sample['files_total']} files" in made.stdout
    assert report["sides"]["train"]["sequences"] == sum(e["records"] for e in manifest(copy).values())
    assert "not asked for" in report["unknown_text"]["skipped"]


def test_megatron_documents_are_read_from_the_index(tmp_path):
    """Tokens per document come from the .idx/.bin pairs: their sum is the manifest's token count."""
    need_shared()
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "wiki_00").write_text(text[:text.index("</doc>\n", 150_000) + 7], encoding="utf-8")
    output = tmp_path / "out"
    result = run_ventilator(tmp_path / "corpus", output, "--vocab-file", VOCAB, "--task-size", "64K", "--workers",
                            "1", "--objective", "tokens", "--output-format", "megatron", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    made = report_command(output, "--input-sample", "0")
    assert made.returncode == 0, made.stderr
    report = json.loads((output / "report" / "report.json").read_text())
    assert report["ok"], report["problems"]
    documents = report["records"]["train"]["tokens_per_document"]
    entries = manifest(output).values()
    assert documents["count"] == sum(e["documents"] for e in entries) > 0
    assert round(documents["mean"] * documents["count"]) == sum(e["tokens"] for e in entries)
    # The workers' counts of documents by tokens (every document, for every format) agree with the documents'
    # lengths read back from the files through the format.
    from common.steps.tokenize import document_token_bins
    from common.writers import writer_for_file

    def companion(name):
        return (output / name).read_bytes() if (output / name).exists() else None

    lengths = []
    for entry in entries:
        for f in entry["shards"]:
            columns = writer_for_file(f["name"]).read_columns(f["name"], (output / f["name"]).read_bytes(), companion)
            if columns is not None:
                lengths.append(np.asarray(columns["input_ids"].lengths))
    expected = document_token_bins(np.concatenate(lengths))
    counted = Counter()
    for entry in entries:
        if not entry.get("stage"):  # the merge stage's lines count no document
            counted.update(entry.get("tokens_per_document", {}))
    assert dict(counted) == expected
    exact = report["tokens_per_document"]["train"]
    assert exact["count"] == documents["count"]
    assert [c for c in exact["histogram"]["counts"] if c] == [expected[k] for k in sorted(expected, key=lambda k:
                                                                                          int(k[6:]))]
    assert report["records"]["train"]["masking"] is None and report["records"]["train"]["labels"] is None


@pytest.mark.s3
def test_a_report_of_an_s3_output_is_written_beside_it(s3, finished):
    """The same job to S3 (radosgw): the report reads the manifest and shards there and writes only report/."""
    output, _before, _made = finished
    client = s3.client()
    bucket = s3.new_bucket("report")
    result = run_ventilator(output.parent / "corpus", f"s3://{bucket}/run", "--vocab-file", VOCAB, "--task-size",
                            "64K", "--workers", "2", "--dupe-factor", "2", "--holdout-fraction", "0.2",
                            "--s3-endpoint-url", s3.endpoint_url, env=s3.env(), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]

    def listing() -> dict[str, str]:
        return {o["Key"]: o["ETag"] for o in client.list_objects_v2(Bucket=bucket, Prefix="run/")["Contents"]}

    before = listing()
    made = subprocess.run([sys.executable, "-m", "report", f"s3://{bucket}/run", "--s3-endpoint-url",
                           s3.endpoint_url], cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, **s3.env()})
    assert made.returncode == 0, made.stderr
    after = listing()
    assert {k: v for k, v in after.items() if not k.startswith("run/report/")} == before
    assert {k for k in after if k.startswith("run/report/")} == {"run/report/index.html", "run/report/report.json"}
    report = json.loads(client.get_object(Bucket=bucket, Key="run/report/report.json")["Body"].read())
    local = json.loads((output / "report" / "report.json").read_text())
    assert report["ok"], report["problems"]
    assert report["sides"] == local["sides"]  # the same job, stored elsewhere
    for side in ("train", "holdout"):
        assert report["records"][side]["unk"] == local["records"][side]["unk"]
        assert report["records"][side]["labels"] == local["records"][side]["labels"]
