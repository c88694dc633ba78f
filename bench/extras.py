"""Side measurements: imports, sentence splitters, tokenizer candidates."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

from bench.procs import REPO

# VmHWM, not getrusage's ru_maxrss: on Linux the latter carries the
# parent's peak across fork and exec, so it would count the benchmark's own memory.
_IMPORT_PROBE = """
import json, time
started = time.perf_counter()
{statement}
seconds = time.perf_counter() - started
with open("/proc/self/status") as status:
    hwm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
print(json.dumps({{"seconds": seconds, "max_rss": hwm}}))
"""


def import_cost(statement: str) -> dict:
    """Seconds the import takes in a fresh interpreter, and the process's peak RSS after it."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE.format(statement=statement)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{statement!r} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def paragraphs_of(documents) -> list[list[str]]:
    return [[line.strip() for line in document.lines if line.strip()] for document in documents]


def blingfire_cpu(paragraphs: list[list[str]]) -> float:
    """Bling Fire as common/segmenters/sentences.py runs it: one call per document."""
    import blingfire

    cpu = time.process_time()
    for lines in paragraphs:
        text = "\n".join(lines)
        if text:
            blingfire.text_to_sentences(text)
    return time.process_time() - cpu


def pysbd_cpu(paragraphs: list[list[str]]) -> float:
    """pysbd, English rules, one call per paragraph (it does not take several)."""
    import pysbd

    segmenter = pysbd.Segmenter(language="en", clean=False)
    cpu = time.process_time()
    for lines in paragraphs:
        for line in lines:
            segmenter.segment(line)
    return time.process_time() - cpu


def take_bytes(paragraphs: list[list[str]], limit: int) -> list[list[str]]:
    """The first documents' paragraphs, about ``limit`` bytes of them."""
    out, total = [], 0
    for lines in paragraphs:
        if total >= limit:
            break
        kept = []
        for line in lines:
            if total >= limit:
                break
            kept.append(line)
            total += len(line.encode()) + 1
        out.append(kept)
    return out


def text_bytes(paragraphs: list[list[str]]) -> int:
    return sum(len(line.encode()) + 1 for lines in paragraphs for line in lines)


def kitoken_encoder(tokenizer_json: str):
    """kitoken on the same tokenizer.json ([UNK] declared as a special token, which it requires)."""
    import kitoken

    spec = json.loads(tokenizer_json)
    vocab = spec["model"]["vocab"]
    spec["added_tokens"] = [{"id": vocab["[UNK]"], "content": "[UNK]", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}]
    model = kitoken.Kitoken.from_tokenizers(json.dumps(spec).encode())
    return model.encode_all
