"""The tokens objective against the tools its users run today (``python -m bench.run --only peers``).

Every tool gets the same text: the Wikipedia sample's documents as the project's reader parses them
(``Document.text``), written as JSON Lines (``{"text": ...}``, the input all three peers take), replicated as
bench/corpus.py does; the project reads the same file.  Three tokenizers, none from a hub: WordPiece
(bert-base-uncased's vocab.txt, as tokenizers' ``BertWordPieceTokenizer`` lays it out), a byte-level BPE of
ModernBERT's tokenizer.json's shape and a Unigram (tests/support/tokenizer_families.py trains both on the sample).
Each peer gets a Hugging Face tokenizer directory (tokenizer.json, and a tokenizer_config.json naming [CLS] and
[SEP] as bos/eos, which ModernBERT's converter asks for before it concatenates).

* the project: ``python -m ventilator --objective tokens --workers 1``, Megatron (whole documents), MDS and
  Parquet (``--max-seq-length 1024``);
* Megatron-LM's ``tools/preprocess_data.py`` (``--tokenizer-type HuggingFaceTokenizer --workers 1``), run from a
  snapshot of NVIDIA/Megatron-LM (megatron-core's wheel lacks ``tools/`` and ``megatron/training``) at its tag
  core_v0.17.1: later releases need Python 3.12, for which no CPU build of torch lies on this kind of machine;
* datatrove's ``JsonlReader`` + ``DocumentTokenizer`` in a ``LocalPipelineExecutor`` (1 task), from PyPI;
* ModernBERT's ``src/convert_dataset.py --concat_tokens 1024``, from a snapshot of AnswerDotAI/ModernBERT: it
  takes only ``--dataset c4`` or ``the_pile``, which ``datasets.load_dataset`` reads from a local directory of
  that name when there is one, so it runs in a directory holding ``c4/train.jsonl`` (offline); its MDS output is
  read back by streaming's own reader in its venv, counted and its first and last records checked id for id.

Snapshots: ``MLM_BENCH_MEGATRON_DIR`` and ``MLM_BENCH_MODERNBERT_DIR`` name a checkout or a bare git
directory (its files at ``Peer.ref``, or ``<variable>_REF``, are extracted into the cache).  Each peer gets a
venv of its own under ``MLM_BENCH_PEERS_CACHE`` (default ``~/.cache/mlm-bench/peers``), installed from the
package index on first use (``torch==2.13.0``, the CPU build, where a peer imports torch; torch 2.14.1 with
torchvision 0.29.1 for ModernBERT's, whose ``streaming`` imports torchvision).  A peer without its snapshot, or
whose install or run fails, is a row saying why.

CPU: every process of a run (``RUSAGE_CHILDREN``), marginal per input MB (a one-document run's CPU
subtracted), the tools' runs alternated within each round and the least of each over the rounds kept.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import peer_counts
from bench.peer_counts import Count, Measured
from bench.procs import REPO, free_ports
from bench.whole_job import children_cpu

MB = 1e6
TORCH = "torch==2.13.0"  # the CPU build on this kind of machine's disk; never a CUDA download
#: mosaicml-streaming imports torchvision, which PyPI's build cannot beside torch 2.13.0: the pair on this kind of
#: machine's disk instead (docs/benchmarks.md, "Peers").
TORCHVISION = ("torch==2.14.1", "torchvision==0.29.1")
#: Tokens per record where a tool cuts at a length (ours' MDS and Parquet, ModernBERT's concatenation).
SEQ = 1024
#: The advantage each peer should be behind, per tokenizer.
TARGETS = {"wordpiece": 8.0, "bpe": 5.0, "unigram": 5.0}
FAMILY_LABELS = {"wordpiece": "WordPiece (bert-base-uncased)", "bpe": "byte-level BPE (ModernBERT's shape)",
                 "unigram": "Unigram (Metaspace)"}
OURS = ("megatron", "mds", "parquet")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] peers: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Corpus:
    path: Path  # a directory holding corpus.jsonl
    bytes: int
    documents: int
    texts: tuple[str, ...]  # one copy's documents (the copies repeat them)
    copies: int


_WORD = re.compile(r"\b([A-Za-z]{3,})\b")


def write_corpus(sources: list[tuple[str, bytes]], directory: Path, copies: int, distinct: bool = False,
                 first_only: bool = False) -> Corpus:
    """``copies`` copies of the sample's documents as JSON Lines.  ``distinct``: every word of 3+ letters of copy
    c > 0 gets ``x<c>`` appended, so no copy repeats another's words (the word caches' cold figure)."""
    from bench.worker_bench import WIKIEXTRACTOR
    from common.readers.base import ParseReport

    texts = [d.text for _, data in sources for d in WIKIEXTRACTOR.parse(data, 0, ParseReport()) if d.text.strip()]
    if first_only:
        texts, copies = texts[:1], 1
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "corpus.jsonl"
    documents = 0
    with open(path, "w", encoding="utf-8") as out:
        for copy in range(copies):
            for text in texts:
                if distinct and copy:
                    text = _WORD.sub(rf"\g<1>x{copy}", text)
                out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                documents += 1
    return Corpus(directory, path.stat().st_size, documents, tuple(texts), copies)


@dataclass(frozen=True)
class Tokenizer:
    family: str
    json: Path  # tokenizer.json
    hf_dir: Path  # tokenizer.json + tokenizer_config.json
    our_args: tuple[str, ...]
    specials: int  # tokens the tokenizer's template adds to one text


def prepare_tokenizers(work: Path, vocab: Path) -> dict[str, Tokenizer]:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import implementations

    from tests.support import tokenizer_families

    out = {}
    for family in TARGETS:
        directory = work / family
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "tokenizer.json"
        if family == "wordpiece":
            implementations.BertWordPieceTokenizer(str(vocab), lowercase=True).save(str(path))
            our_args: tuple[str, ...] = ("--vocab-file", str(vocab))
        else:
            shutil.copyfile(tokenizer_families.tokenizer_path("modernbert" if family == "bpe" else family), path)
            our_args = ("--tokenizer", str(path))
        tokenizer = HFTokenizer.from_file(str(path))
        vocabulary = tokenizer.get_vocab()
        roles = {"bos_token": "[CLS]", "eos_token": "[SEP]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "mask_token": "[MASK]", "unk_token": "[UNK]" if "[UNK]" in vocabulary else "<unk>",
                 "pad_token": "[PAD]" if "[PAD]" in vocabulary else "<pad>"}
        missing = [token for token in roles.values() if token not in vocabulary]
        if missing:
            raise RuntimeError(f"{family}: the tokenizer has no {', '.join(missing)}")
        (directory / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 10**30, **roles}))
        specials = len(tokenizer.encode("a").ids) - len(tokenizer.encode("a", add_special_tokens=False).ids)
        out[family] = Tokenizer(family, path, directory, our_args, specials)
    return out


def reference_tokens(tokenizer: Tokenizer, corpus: Corpus) -> int:
    """The tokenizer's own encoding of every document, no special token (the copies repeat one copy's)."""
    from tokenizers import Tokenizer as HFTokenizer

    encoded = HFTokenizer.from_file(str(tokenizer.json)).encode_batch(list(corpus.texts), add_special_tokens=False)
    return sum(len(e.ids) for e in encoded) * corpus.copies


# --------------------------------------------------------------------------
# Peers: environments and snapshots
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    requirements: tuple[tuple[str, ...], ...]  # pip install steps, in order
    snapshot: str = ""  # env variable naming a checkout / git dir ("": none needed)
    paths: tuple[str, ...] = ()  # what the snapshot must hold
    ref: str = "HEAD"  # what a git directory's files are taken at (``<snapshot>_REF`` overrides)


PEERS = (
    Peer("megatron", "Megatron-LM tools/preprocess_data.py", ((TORCH,), (TORCH, "numpy", "transformers", "triton")),
         "MLM_BENCH_MEGATRON_DIR", ("tools", "megatron"), "core_v0.17.1"),
    Peer("datatrove", "datatrove DocumentTokenizer", (("datatrove", "tokenizers", "numpy", "orjson"),)),
    # streaming 0.13.0's own bounds (numpy < 2.2, transformers < 5, datasets < 4 for its dev extra), given up
    # front: left to pip's resolver, the install backtracked for over 40 minutes here.
    Peer("modernbert", "ModernBERT src/convert_dataset.py",
         (TORCHVISION, (*TORCHVISION, "mosaicml-streaming==0.13.0", "numpy<2.2", "transformers<5", "datasets<4",
                        "tqdm")),
         "MLM_BENCH_MODERNBERT_DIR", ("src",)),
)


def cache_root() -> Path:
    return Path(os.environ.get("MLM_BENCH_PEERS_CACHE") or Path.home() / ".cache" / "mlm-bench" / "peers")


class Unavailable(Exception):
    """A peer that cannot run here: the message is the table's reason."""


def environment(peer: Peer) -> Path:
    """The python of the peer's own venv, installed from the package index on first use."""
    key = hashlib.sha256(json.dumps(peer.requirements).encode()).hexdigest()[:10]
    venv = cache_root() / f"{peer.name}-{key}"
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:  # one install at a time, whichever run asks
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "installed").is_file():
            _install(peer, venv, python)
    return python


def _install(peer: Peer, venv: Path, python: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    log(f"installing {peer.name} into {venv} (once)")
    started = time.monotonic()
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode:
        raise Unavailable(f"python -m venv failed: {(made.stderr.strip().splitlines() or ['?'])[-1]}")
    for step in peer.requirements:
        result = subprocess.run([str(python), "-m", "pip", "install", "-q", *step], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL)
        if result.returncode:
            lines = [line for line in result.stderr.splitlines() if line.strip() and "ignored" not in line]
            raise Unavailable(f"pip install {' '.join(step)} failed: {lines[-1] if lines else result.returncode}")
    seconds = time.monotonic() - started
    log(f"installed {peer.name} in {seconds:.0f} s")
    (venv / "installed").write_text(" ".join(" ".join(step) for step in peer.requirements)
                                    + f"\ninstalled in {seconds:.0f} s\n")


def checkout(peer: Peer) -> Path | None:
    """The peer's repository files: its checkout, or its bare git directory's HEAD extracted into the cache."""
    if not peer.snapshot:
        return None
    given = os.environ.get(peer.snapshot, "")
    if not given:
        raise Unavailable(f"no snapshot of its repository: set {peer.snapshot} to a checkout or git directory")
    if not Path(given).is_dir():
        raise Unavailable(f"{peer.snapshot}={given} is no directory: set it to a checkout or git directory")
    root = Path(given)
    if all((root / part).exists() for part in peer.paths):
        return root
    ref = os.environ.get(f"{peer.snapshot}_REF") or peer.ref
    for candidate in (root, root / ".git", root / "repo"):  # a git directory, a checkout's, a mirror's
        git = ["git", "--git-dir", str(candidate)]
        head = subprocess.run([*git, "rev-parse", f"{ref}^{{commit}}"], capture_output=True, text=True)
        if head.returncode == 0:
            break
    else:
        raise Unavailable(f"{peer.snapshot}={given}: neither a checkout holding {', '.join(peer.paths)} nor a git "
                          f"directory holding {ref}")
    target = cache_root() / "src" / f"{peer.name}-{head.stdout.strip()[:12]}"
    if not (target / "extracted").is_file():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        archive = subprocess.run([*git, "archive", head.stdout.strip(), *peer.paths], capture_output=True)
        if archive.returncode:
            raise Unavailable(f"git archive of {given} failed: {archive.stderr.decode()[-200:]}")
        tar = target / "head.tar"
        tar.write_bytes(archive.stdout)
        with tarfile.open(tar) as handle:
            handle.extractall(target, filter="data")
        tar.unlink()
        (target / "extracted").write_text(head.stdout)
    return target


# --------------------------------------------------------------------------
# Runs: each returns its CPU seconds and its output's count
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    cpu: float
    count: Count


def _sum_megatron(paths: list[Path]) -> tuple[int, int]:
    indexes = [peer_counts.megatron_index(path.read_bytes()) for path in paths]
    if not indexes:
        raise RuntimeError("no Megatron .idx written")
    return sum(i.tokens for i in indexes), sum(i.sequences for i in indexes)


def run_ours(fmt: str, tokenizer: Tokenizer, corpus: Corpus, work: Path) -> Run:
    out = work / "ours"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    vport, sink_port = free_ports(2)
    command = [sys.executable, "-m", "ventilator", "--data", str(corpus.path), "--format", "jsonl",
               "--output", str(out), *tokenizer.our_args, "--objective", "tokens", "--output-format", fmt,
               "--max-seq-length", "0" if fmt == "megatron" else str(SEQ), "--workers", "1",
               "--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
               "--state-dir", str(work / "state"), "--no-progress"]
    cpu = children_cpu(command, REPO)
    specials = 0 if fmt == "megatron" else 2
    if fmt == "megatron":
        tokens, records = _sum_megatron(sorted((out / "megatron").glob("*.idx")))
    elif fmt == "parquet":
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        tokens = records = 0
        for path in sorted(out.rglob("*.parquet")):
            column = pq.read_table(path, columns=["input_ids"]).column("input_ids")
            tokens += int(pc.sum(pc.list_value_length(column)).as_py() or 0)
            records += len(column)
    else:  # MDS: the sink's count of what the writer wrote (the manifest)
        tokens = records = 0
        for line in (out / "manifest.jsonl").read_text().splitlines():
            entry = json.loads(line)
            tokens += int(entry.get("output_tokens", 0))
            records += int(entry.get("records", 0))
    return Run(cpu, Count(f"ours {fmt}", tokens, records, specials_per_record=specials))


_DATATROVE = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
source, output, tokenizer, logs = sys.argv[1:]
LocalPipelineExecutor(pipeline=[JsonlReader(source), DocumentTokenizer(output, tokenizer_name_or_path=tokenizer)],
                      tasks=1, workers=1, logging_dir=logs).run()
"""

#: Each record's byte length, and the first and last records' ids, read by mosaicml-streaming's own MDS reader
#: (as ModernBERT's trainer reads it), in the peer's venv.
_MDS_RECORDS = """
import json, os, sys
import numpy as np
from streaming.base.format import reader_from_json
root, split = sys.argv[1:]
with open(os.path.join(root, split, "index.json")) as handle:
    shards = json.load(handle)["shards"]
sizes, ends = [], {}
for shard in shards:
    reader = reader_from_json(root, split, shard)
    for i in range(reader.samples):
        tokens = reader.get_item(i)["tokens"]
        if not sizes or (shard is shards[-1] and i == reader.samples - 1):
            ends[len(sizes)] = np.frombuffer(tokens, np.int64).tolist()
        sizes.append(len(tokens))
print(json.dumps({"sizes": sizes, "ends": ends}))
"""


def run_peer(peer: Peer, python: Path, source: Path | None, tokenizer: Tokenizer, corpus: Corpus, work: Path
             ) -> Run:
    shutil.rmtree(work, ignore_errors=True)
    out = work / "out"
    out.mkdir(parents=True)  # Megatron's script writes beside its --output-prefix, into no new directory
    jsonl = corpus.path / "corpus.jsonl"
    env = dict(OFFLINE)
    if peer.name == "megatron":
        assert source is not None
        env["PYTHONPATH"] = str(source)
        cpu = children_cpu([python, source / "tools" / "preprocess_data.py", "--input", jsonl, "--output-prefix",
                            out / "wiki", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
                            tokenizer.hf_dir, "--workers", "1", "--json-keys", "text"], work, env)
        tokens, records = _sum_megatron(sorted(out.glob("*.idx")))
        return Run(cpu, Count(peer.label, tokens, records, specials_per_document=tokenizer.specials))
    if peer.name == "datatrove":
        cpu = children_cpu([python, "-c", _DATATROVE, corpus.path, out, tokenizer.json, work / "logs"], work, env)
        vocabulary = len(json.loads(tokenizer.json.read_text())["model"]["vocab"])
        size = 4 if vocabulary > 65536 else 2
        files = sorted(out.rglob("*.ds"))
        if not files:
            raise RuntimeError("datatrove wrote no .ds file")
        tokens = sum(path.stat().st_size for path in files) // size
        return Run(cpu, Count(peer.label, tokens, corpus.documents, specials_per_document=tokenizer.specials))
    assert source is not None and peer.name == "modernbert"
    shutil.rmtree(out)  # ModernBERT's script refuses an --out_root that holds its split already
    (work / "c4").mkdir()
    (work / "c4" / "train.jsonl").symlink_to(jsonl.resolve())
    cpu = children_cpu([python, source / "src" / "convert_dataset.py", "--dataset", "c4", "--splits", "train",
                        "--out_root", out, "--concat_tokens", SEQ, "--tokenizer", tokenizer.hf_dir], work, env)
    index = out / "train" / "index.json"
    if not index.is_file():
        raise RuntimeError(f"ModernBERT's converter wrote no {index.relative_to(work)}")
    read = subprocess.run([str(python), "-c", _MDS_RECORDS, str(out), "train"], capture_output=True, text=True,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL, cwd=work)
    if read.returncode:
        raise RuntimeError(f"streaming could not read ModernBERT's output: {read.stderr[-2000:]}")
    records = json.loads(read.stdout.splitlines()[-1])
    samples = peer_counts.mds_samples(index.read_text())
    if samples != len(records["sizes"]):
        raise RuntimeError(f"ModernBERT's index.json lists {samples} samples, streaming read {len(records['sizes'])}")
    from tokenizers import Tokenizer as HFTokenizer

    documents = [e.ids for e in HFTokenizer.from_file(str(tokenizer.json)).encode_batch(list(corpus.texts))]
    mismatch = peer_counts.concatenation_mismatch({int(k): v for k, v in records["ends"].items()}, documents,
                                                  corpus.copies, SEQ)
    if mismatch:
        raise RuntimeError(f"ModernBERT's output: {mismatch}")
    return Run(cpu, peer_counts.concatenated(peer.label, records["sizes"], 8, tokenizer.specials, SEQ))


# --------------------------------------------------------------------------
# Rounds
# --------------------------------------------------------------------------

@dataclass
class Outcome:
    """What the section reports: per (family, tool) the marginal CPU-s/MB or the reason it has none, the
    reconciled counts, and the tokenizers-alone figures."""
    measured: dict[tuple[str, str], Measured] = field(default_factory=dict)
    reconciled: dict[str, list[peer_counts.Reconciled]] = field(default_factory=dict)
    reference: dict[str, int] = field(default_factory=dict)
    alone: dict[tuple[str, str], float] = field(default_factory=dict)  # (family, "hf"/"ours") -> CPU-s/MB
    corpus_mb: float = 0.0
    documents: int = 0
    rounds: int = 0
    load: list[float] = field(default_factory=list)


def ready(peers: tuple[Peer, ...], families: tuple[str, ...]
          ) -> tuple[dict[str, tuple[Path, Path | None]], dict[tuple[str, str], Measured]]:
    """Each peer's python and snapshot, or, per family, its row saying why it cannot run: no snapshot, or an
    install that failed in any way (the rest go on)."""
    available: dict[str, tuple[Path, Path | None]] = {}
    unavailable: dict[tuple[str, str], Measured] = {}
    for peer in peers:
        try:
            source = checkout(peer)  # first: without its snapshot a peer installs nothing
            available[peer.name] = (environment(peer), source)
        except Exception as error:
            why = str(error) if isinstance(error, Unavailable) else f"{type(error).__name__}: {error}"
            log(f"{peer.name}: {why}")
            for family in families:
                unavailable[(family, peer.label)] = Measured(peer.label, reason=why[:300])
    return available, unavailable


def measure(sources: list[tuple[str, bytes]], work: Path, vocab: Path, copies: int, rounds: int,
            families: tuple[str, ...] = tuple(TARGETS)) -> Outcome:
    outcome = Outcome(rounds=rounds)
    full = write_corpus(sources, work / "full", copies)
    cold = write_corpus(sources, work / "cold", copies, distinct=True)
    one = write_corpus(sources, work / "one", 1, first_only=True)
    outcome.corpus_mb, outcome.documents = full.bytes / MB, full.documents
    tokenizers = prepare_tokenizers(work / "tokenizers", vocab)
    available, unavailable = ready(PEERS, families)
    outcome.measured.update(unavailable)
    least: dict[tuple[str, str, str], float] = {}
    counts: dict[tuple[str, str], Count] = {}
    failed: dict[tuple[str, str], str] = {}

    def keep(family: str, tool: str, which: str, job: Callable[[Corpus, Path], Run], corpus: Corpus) -> None:
        if (family, tool) in failed:
            return
        try:
            run = job(corpus, work / "run")
        except Exception as error:  # the peer's row says why; the others go on
            failed[(family, tool)] = peer_counts.failure_reason(str(error), type(error).__name__)
            log(f"{family} {tool}: failed:\n{str(error)[-2000:]}")
            return
        key = (family, tool, which)
        least[key] = min(least.get(key, float("inf")), run.cpu)
        if which == "full":
            counts[(family, tool)] = run.count
        log(f"{family} {tool} {which}: {run.cpu:.2f} CPU-s")

    for round_ in range(rounds):
        outcome.load.append(os.getloadavg()[0])
        for family in families:
            tokenizer = tokenizers[family]
            log(f"round {round_ + 1}/{rounds}, {family}, {full.bytes / MB:.1f} MB")
            jobs: list[tuple[str, Callable[[Corpus, Path], Run]]] = [
                (f"ours {fmt}", functools.partial(run_ours, fmt, tokenizer)) for fmt in OURS]
            for peer in PEERS:
                if peer.name in available:
                    python, source = available[peer.name]
                    jobs.append((peer.label, functools.partial(run_peer, peer, python, source, tokenizer)))
            for tool, job in jobs:  # alternated: each tool's full run, then its one-document run
                keep(family, tool, "full", job, full)
                keep(family, tool, "one", job, one)
            cold_job = jobs[0][1]
            keep(family, "ours megatron, cold cache", "full", cold_job, cold)
    shutil.rmtree(work / "run", ignore_errors=True)
    for family in families:
        tools = [f"ours {fmt}" for fmt in OURS] + [p.label for p in PEERS] + ["ours megatron, cold cache"]
        for tool in tools:
            if (family, tool) in outcome.measured:
                continue
            if (family, tool) in failed:
                outcome.measured[(family, tool)] = Measured(tool, reason=f"failed: {failed[(family, tool)]}")
                continue
            corpus = cold if "cold" in tool else full
            base = tool.replace(", cold cache", "")
            if (family, tool, "full") in least and (family, base, "one") in least:
                outcome.measured[(family, tool)] = peer_counts.marginal(
                    tool, least[(family, tool, "full")], least[(family, base, "one")], (corpus.bytes - one.bytes) / MB)
        reference = reference_tokens(tokenizers[family], full)
        outcome.reference[family] = reference
        family_counts = [count for (f, tool), count in counts.items() if f == family and "cold" not in tool]
        outcome.reconciled[family] = peer_counts.reconcile(family_counts, full.documents, reference)
        outcome.alone.update(tokenizers_alone(tokenizers[family], full.texts))
    return outcome


def tokenizers_alone(tokenizer: Tokenizer, texts: tuple[str, ...]) -> dict[tuple[str, str], float]:
    """The floor under each side: HF tokenizers' ``encode_batch`` (what every peer calls) and the project's
    ``Vocabulary.encode_many`` (cache cleared first) on one copy's documents, CPU-s per MB of text."""
    from tokenizers import Tokenizer as HFTokenizer

    from common.tokenization import load_vocabulary

    megabytes = sum(len(text.encode()) for text in texts) / MB
    hf = HFTokenizer.from_file(str(tokenizer.json))
    started = time.process_time()
    hf.encode_batch(list(texts), add_special_tokens=True)
    hf_cpu = time.process_time() - started
    if tokenizer.family == "wordpiece":
        vocabulary = load_vocabulary(vocab_file=tokenizer.our_args[1])
    else:
        vocabulary = load_vocabulary(tokenizer_file=str(tokenizer.json))
    vocabulary.encode_many(["warm up the encoder"])
    fast = vocabulary._fast_encoder()
    if fast is not None and hasattr(fast, "clear_cache"):
        fast.clear_cache()
    started = time.process_time()
    vocabulary.encode_many(list(texts))
    ours_cpu = time.process_time() - started
    return {(tokenizer.family, "hf"): hf_cpu / megabytes, (tokenizer.family, "ours"): ours_cpu / megabytes}


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

def markdown(outcome: Outcome, families: tuple[str, ...] = tuple(TARGETS)) -> str:
    loads = ", ".join(f"{load:.1f}" for load in outcome.load)
    lines = [f"Peers: the tokens objective against the tools its users run, {outcome.corpus_mb:.1f} MB of JSON Lines "
             f"({outcome.documents:,} documents), marginal CPU-s per input MB of every process, least of "
             f"{outcome.rounds} alternated round(s) (load average at each round's start: {loads}):", "",
             "| tokenizer | tool | CPU-s/MB | peer / ours (the slower of ours' MDS and Parquet) | target |",
             "| --- | --- | --- | --- | --- |"]
    for family in families:
        ours = [m for (f, _), m in outcome.measured.items() if f == family and m.tool.startswith("ours")
                and "cold" not in m.tool]
        compared = peer_counts.compared_ours(ours)
        for measured in ours:
            lines.append(f"| {family} | {measured.tool} | {peer_counts._cpu(measured)} | – | |")
        cold = outcome.measured.get((family, "ours megatron, cold cache"))
        if cold is not None:
            lines.append(f"| {family} | ours megatron, cold cache (no copy repeats another's words) | "
                         f"{peer_counts._cpu(cold)} | – | |")
        peers = [outcome.measured[(family, p.label)] for p in PEERS if (family, p.label) in outcome.measured]
        lines += peer_counts.table_rows(family, compared, peers, TARGETS[family])[1:]
    lines += ["", "Token counts, read off each output's own files, against the tokenizer's own encoding of every "
              "document with no special token:", "",
              "| tokenizer | tool | tokens written | text tokens | vs the tokenizer | why |",
              "| --- | --- | --- | --- | --- | --- |"]
    for family in families:
        lines.append(f"| {family} | the tokenizer alone (HF `encode`, no special token) | "
                     f"{outcome.reference.get(family, 0):,} | | | |")
        for item in outcome.reconciled.get(family, []):
            lines.append(f"| {family} | {item.tool} | {item.tokens:,} | {item.text_tokens:,} | "
                         f"{item.difference:+,}{'' if item.agrees else ' (unexplained)'} | {item.why} |")
    lines += ["", "The floor under each side, on one copy's documents (CPU-s per MB of text): HF tokenizers alone "
              "(every peer's tokenizer) and the project's encoder alone, cache cleared:", "",
              "| tokenizer | HF tokenizers alone | ours alone | bound on peer / ours if each peer cost only HF |",
              "| --- | --- | --- | --- |"]
    for family in families:
        hf, ours_alone = outcome.alone.get((family, "hf")), outcome.alone.get((family, "ours"))
        ours_cpu = peer_counts.compared_ours([m for (f, _), m in outcome.measured.items() if f == family]).cpu_s_per_mb
        bound = f"{hf / ours_cpu:.1f}×" if hf and ours_cpu else "n/a"
        lines.append(f"| {family} | {hf or 0:.3f} | {ours_alone or 0:.3f} | {bound} |")
    return "\n".join(lines) + "\n"
