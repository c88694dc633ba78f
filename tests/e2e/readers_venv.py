"""The readers' install, checked in a venv of its own with no stub (scripts/readers-venv.sh, a step of .ci/run).

MosaicML's ``mosaicml-streaming`` pins ``transformers<5`` and ``numpy<2.2`` and imports torchvision when
imported, so it cannot share the suite's environment (transformers 5, the CPU torch): there the suite reads MDS
with an empty ``streaming.vision`` (tests/e2e/streaming_readers.py).  Here nothing is stood in: the README's
``pip install '.[readers]'`` line, run in a fresh venv (pip resolves streaming's own pins), must give an
environment where this project writes an output and the readers read it whole:

- ``python -m tests.e2e.readers_venv install-line`` prints that line (the README's Install block, the one with
  ``[readers]``), for the script to run;
- ``python -m tests.e2e.readers_venv check`` (the venv's python, cwd the checkout) checks the venv is one of its
  own, that ``streaming.vision`` is streaming's own module over a torchvision that loads, then runs the README's
  ModernBERT commands (tokenizer, ``--objective tokens --output-format mds``; and ``--output-format litdata``)
  and reads the outputs with ``streaming.StreamingDataset``, ModernBERT's ``StreamingTextDataset`` and
  ``NoStreamingDataset`` contracts (tests/e2e/streaming_readers.py) and ``litdata.StreamingDataset``: every
  document, put back together from its chunks, equals the tokenizer's ``encode`` of its text.

Only the standard library is imported at the top (here and in tests/e2e/readme_commands.py): ``install-line`` runs
before the venv has anything.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.e2e.readme_commands import REPO, bash_blocks, free_ports, modernbert_section_commands, readme_section

MAX = 8192


def install_line() -> str:
    """The README Install block's line for the readers."""
    block = bash_blocks(readme_section("Install"))[0]
    (line,) = [line for line in block.splitlines() if "[readers]" in line]
    return line.split("#", 1)[0].strip()


def modernbert_commands() -> list[list[str]]:
    """The ModernBERT section's tokenizer and ventilator commands, as argv."""
    commands = [shlex.split(line) for line in modernbert_section_commands()]
    assert [c[:3] for c in commands[:2]] == [["python", "-m", "common.tokenization.training"],
                                             ["python", "-m", "ventilator"]], commands
    return commands[:2]


def run(argv: list[str], timeout: float = 600) -> str:
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, (argv, result.stderr[-3000:])
    return result.stdout


def document_texts(root: Path) -> list[str]:
    """Each WikiExtractor document's text (docs/objectives.md, "A document's text"): the lines after the title
    line up to ``</doc>``, without the blank lines at its two ends."""
    texts = []
    for path in sorted(p for p in root.rglob("wiki_*") if p.is_file()):
        for body in re.findall(r'<doc [^\n]*>\n[^\n]*\n(.*?)\n</doc>', path.read_text(encoding="utf-8"), re.S):
            lines = body.split("\n")
            while lines and not lines[0].strip():
                lines.pop(0)
            while lines and not lines[-1].strip():
                lines.pop()
            if "\n".join(lines).strip():
                texts.append("\n".join(lines))
    return texts


def check_environment() -> dict[str, str]:
    """A venv of its own, streaming's own image datasets over a torchvision that loads, the pins resolved."""
    import numpy
    import streaming
    import torch
    import torchvision
    import transformers

    assert sys.prefix != sys.base_prefix, "not in a venv"
    assert not [p for p in sys.path if p.startswith(sys.base_prefix) and "site-packages" in p], \
        "the venv sees the machine's site-packages"
    assert "streaming.vision" in sys.modules and hasattr(streaming.vision, "StreamingImageNet"), \
        "streaming.vision is not streaming's own module"
    import litdata

    return {"python": sys.prefix, "torch": torch.__version__, "torchvision": torchvision.__version__,
            "numpy": numpy.__version__, "transformers": transformers.__version__,
            "streaming": streaming.__version__, "litdata": litdata.__version__}


def write_outputs(work: Path) -> tuple[Path, dict[str, Path]]:
    """The README's tokenizer and MDS commands (their own directory, free ports); the same job as LitData."""
    tokenizer_command, ventilator_command = modernbert_commands()
    litdata_command = list(ventilator_command)
    litdata_command[litdata_command.index("--output-format") + 1] = "litdata"
    outputs = {}
    for command in (tokenizer_command, ventilator_command, litdata_command):
        argv = [sys.executable, *[arg.replace("/tmp/mb/", f"{work}/") for arg in command[1:]]]
        if argv[2] == "ventilator":
            fmt = argv[argv.index("--output-format") + 1]
            argv[argv.index("--output") + 1] = str(work / fmt)
            vport, sink_port = free_ports(2)
            argv += ["--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
                     "--state-dir", str(work / f"state-{fmt}")]
            outputs[fmt] = work / fmt
        run(argv)
    assert ventilator_command[ventilator_command.index("--max-seq-length") + 1] == str(MAX)
    return work / "tokenizer.json", outputs


def read(how: str, *args: str) -> list[dict]:
    """One reader of tests/e2e/streaming_readers.py, in a process of its own (streaming's shared memory)."""
    (line,) = [json.loads(line) for line in run([sys.executable, "-m", "tests.e2e.streaming_readers", how,
                                                 *args]).splitlines()]
    if how != "litdata":
        assert line["vision"] == "streaming", f"{how}: read with {line['vision']} for streaming.vision"
    return line["samples"]


def check() -> None:
    versions = check_environment()
    print(json.dumps(versions), flush=True)
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        tokenizer_file, outputs = write_outputs(work)
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        roles = json.loads(tokenizer_file.read_text())["post_processor"]
        cls, sep, pad = roles["cls"][1], roles["sep"][1], tokenizer.token_to_id("<pad>")
        texts = document_texts(REPO / "examples" / "corpus")
        oracle = Counter(tuple(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
        assert len(oracle) == len(texts) > 10

        mds = read("mds", f"{outputs['mds']}:train")
        litdata = read("litdata", str(outputs["litdata"]))
        for name, samples in (("streaming.StreamingDataset", mds), ("litdata.StreamingDataset", litdata)):
            assert rebuilt(samples, cls, sep) == oracle, f"{name}: documents differ from the tokenizer's encoding"
        chunks = Counter(tuple(s["input_ids"]) for s in mds)
        assert chunks == Counter(tuple(s["input_ids"]) for s in litdata)

        where = f"{outputs['mds']}:train"
        streamed = read("modernbert-streaming", str(MAX), str(pad), where)
        assert not [s for s in streamed if "error" in s], "StreamingTextDataset failed on a sample"
        assert Counter(tuple(s["input_ids"][:s["len"]]) for s in streamed) == chunks, "StreamingTextDataset"
        for s in streamed:
            n = s["len"]
            assert s["input_ids"][n:] == [pad] * (MAX - n) and s["attention_mask"] == [1] * n + [0] * (MAX - n)
        packed = read("modernbert-packed", str(MAX), str(pad), where)
        assert Counter(tuple(p["row"][a:b]) for p in packed for a, b in zip(p["cu_seq_lens"], p["cu_seq_lens"][1:])) \
            == chunks, "NoStreamingDataset with the sequence packer"
    print(f"readers venv: {len(texts)} documents, {sum(chunks.values())} samples, each read equal to the "
          f"tokenizer's encoding by streaming.StreamingDataset, ModernBERT's StreamingTextDataset and "
          f"NoStreamingDataset contracts, and litdata.StreamingDataset", flush=True)


def rebuilt(samples: list[dict], cls: int, sep: int) -> Counter:
    """Documents put back together from their chunks (document_id, chunk_index), each chunk ``cls ... sep``."""
    documents: dict[int, list[tuple[int, list[int]]]] = {}
    for s in samples:
        ids = s["input_ids"]
        assert len(ids) <= MAX and ids[0] == cls and ids[-1] == sep, ids[:3]
        documents.setdefault(s["document_id"], []).append((s["chunk_index"], ids[1:-1]))
    out: Counter = Counter()
    for chunks in documents.values():
        assert sorted(index for index, _ in chunks) == list(range(len(chunks)))
        out[tuple(token for _, ids in sorted(chunks) for token in ids)] += 1
    return out


def main(argv: list[str]) -> None:
    if argv == ["install-line"]:
        print(install_line())
    elif argv == ["check"]:
        check()
    else:
        raise SystemExit("usage: python -m tests.e2e.readers_venv install-line|check")


if __name__ == "__main__":
    main(sys.argv[1:])
