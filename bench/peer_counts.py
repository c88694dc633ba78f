"""Pure parts of the peers bench (bench/peers.py): reading each tool's token count off its output's own index,
reconciling the counts (each tool adds its special tokens at its own places and cuts at its own lengths), and
the table's rows.  No I/O beyond the bytes handed in, so the unit tests run in milliseconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MegatronIndex:
    sequences: int
    documents: int  # the document index's entries (Megatron counts a leading 0)
    tokens: int


def megatron_index(data: bytes) -> MegatronIndex:
    """Sequences and tokens of a Megatron-LM ``.idx`` (indexed_dataset's MMIDIDX layout), parsed by the project's
    Megatron reader (common/writers/megatron.py), which refuses a file of any other layout or length."""
    from common.writers.megatron import IndexedDataset

    index = IndexedDataset.parse_index(data)
    return MegatronIndex(len(index.sequence_lengths), len(index.document_indices),
                         int(index.sequence_lengths.sum(dtype=np.int64)))


def mds_samples(index_json: str) -> int:
    """Samples of an MDS output, from its index.json (mosaicml-streaming's layout: ``shards[*].samples``)."""
    index = json.loads(index_json)
    return sum(int(shard["samples"]) for shard in index["shards"])


@dataclass(frozen=True)
class Count:
    """One tool's output, counted off its files, and what it adds or drops around the text's tokens.

    ``specials_per_document``: tokens the tool adds to each document (the tokenizer's ``[CLS] $A [SEP]``
    template, an end-of-document token); ``specials_per_record``: per record (ours, ``[CLS] ... [SEP]``
    around each chunk); ``tail_cut``: the tool keeps only whole records of ``tail_cut`` tokens and drops the
    rest of its buffer at the end (llm-foundry's and ModernBERT's concatenation): up to ``tail_cut - 1``
    tokens fewer."""
    tool: str
    tokens: int
    records: int
    specials_per_document: int = 0
    specials_per_record: int = 0
    tail_cut: int = 0

    def text_tokens(self, documents: int) -> int:
        """The text's tokens: the output's, less the specials the tool added."""
        return self.tokens - self.specials_per_document * documents - self.specials_per_record * self.records


@dataclass(frozen=True)
class Reconciled:
    tool: str
    tokens: int
    text_tokens: int
    difference: int  # text tokens minus the reference's (tail_cut tools: before the tail they dropped)
    agrees: bool
    why: str


def reconcile(counts: Sequence[Count], documents: int, reference: int) -> list[Reconciled]:
    """Each count against ``reference`` (the tokenizer's own encoding of every document, no special token):
    equal once the tool's specials are taken off, or, where the tool concatenates into records of ``tail_cut``
    tokens, exactly the whole records of its stream (the text's tokens and its specials, in order): every record
    that long and the last ``stream % tail_cut`` tokens dropped, not one more or fewer."""
    out = []
    for count in counts:
        text = count.text_tokens(documents)
        difference = text - reference
        parts = []
        if count.specials_per_document:
            parts.append(f"{count.specials_per_document} special(s) per document × {documents:,}")
        if count.specials_per_record:
            parts.append(f"{count.specials_per_record} special(s) per record × {count.records:,}")
        if count.tail_cut:
            stream = reference + count.specials_per_document * documents
            dropped = stream % count.tail_cut
            unexplained = count.tokens - (stream - dropped)
            agrees = unexplained == 0 and count.records * count.tail_cut == count.tokens
            parts.append(f"records of exactly {count.tail_cut:,} tokens: the last {dropped:,} of the stream's "
                         f"{stream:,} dropped")
            if count.records * count.tail_cut != count.tokens:
                parts.append(f"{count.records:,} records hold {count.tokens:,} tokens, not "
                             f"{count.records * count.tail_cut:,}")
        else:
            unexplained = difference
            agrees = difference == 0
        why = "; ".join(parts) or "the text's tokens only"
        if unexplained:
            why += f"; {unexplained:+,} tokens unexplained"
        out.append(Reconciled(count.tool, count.tokens, text, difference, agrees, why))
    return out


def concatenated(tool: str, record_bytes: Sequence[int], itemsize: int, specials_per_document: int,
                 tail_cut: int) -> Count:
    """The count of a concatenating tool's MDS output from each record's byte length as the reader returns it
    (ModernBERT's and llm-foundry's converters write ``np.asarray(ids).tobytes()``, int64 on Linux)."""
    odd = [size for size in record_bytes if size % itemsize]
    if odd:
        raise ValueError(f"{tool}: {len(odd)} record(s) not a whole number of {itemsize}-byte ids, e.g. {odd[0]}")
    return Count(tool, sum(record_bytes) // itemsize, len(record_bytes), specials_per_document=specials_per_document,
                 tail_cut=tail_cut)


@dataclass(frozen=True)
class Measured:
    """One tool's runs on one tokenizer: marginal CPU-s per input MB (the one-document run subtracted), or why
    it has none."""
    tool: str
    cpu_s_per_mb: float | None = None
    reason: str = ""


def concatenation_mismatch(records: dict[int, list[int]], documents: Sequence[Sequence[int]], copies: int,
                           tail_cut: int) -> str:
    """Where records of a concatenating tool (by their index) differ from the stream they must be cut from:
    ``documents`` (each document's ids, its specials included) ``copies`` times over, in order, cut every
    ``tail_cut`` tokens; "" where every record given is its slice."""
    one = np.fromiter((i for ids in documents for i in ids), dtype=np.int64)
    for index, ids in sorted(records.items()):
        start = index * tail_cut
        if index < 0 or start + tail_cut > one.size * copies:
            return f"record {index} lies past the stream's {one.size * copies:,} tokens"
        want = one[np.arange(start, start + tail_cut) % one.size]
        got = np.asarray(ids, dtype=np.int64)
        if got.shape != want.shape or not np.array_equal(got, want):
            at = next((i for i, (a, b) in enumerate(zip(got.tolist(), want.tolist())) if a != b),
                      min(got.size, want.size))
            return f"record {index} differs from the tokenizer's stream at its token {at:,} (of {got.size:,})"
    return ""


_RAISED = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")


def failure_reason(output: str, fallback: str, limit: int = 200) -> str:
    """The line of a failed run's output that says why: its last exception line (``OSError: We couldn't
    connect to ...`` where a tool wants a hub offline, not the advice printed after it), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    raised = [line for line in lines if _RAISED.match(line)]
    return (raised[-1] if raised else lines[-1] if lines else fallback)[:limit]


def marginal(tool: str, full_cpu: float, one_cpu: float, megabytes: float) -> Measured:
    """CPU-s per MB beyond the one-document run's; none where the full run cost no more than that run (the
    machine's noise is larger than the work: a larger ``--scale`` or a quieter machine)."""
    if full_cpu <= one_cpu or megabytes <= 0:
        return Measured(tool, reason=f"within noise: the full run's {full_cpu:.2f} CPU-s ≤ the one-document "
                                     f"run's {one_cpu:.2f}")
    return Measured(tool, (full_cpu - one_cpu) / megabytes)


#: Ours' outputs in the peers' shape: whole documents in chunks of --max-seq-length (the Megatron output keeps
#: sentences, as Megatron-LM's ``--split-sentences`` would).
CHUNKED = ("ours mds", "ours parquet")


def compared_ours(ours: Sequence[Measured]) -> Measured:
    """The figure of ours each peer is divided by: the slowest of ours' chunked outputs.  Each figure is the
    difference of two runs, and the one-document run swings by ±0.4 CPU-s; the least of several such differences
    is biased low (WordPiece's MDS once came out at 0.013 CPU-s/MB, below what its encoder alone costs on the
    text), while the most of them cannot flatter ours."""
    measured = [m for m in ours if m.tool in CHUNKED and m.cpu_s_per_mb is not None]
    if not measured:
        return Measured("ours", reason="no chunked output of ours measured")
    return max(measured, key=lambda m: m.cpu_s_per_mb or 0.0)


def table_rows(family: str, ours: Measured, peers: Sequence[Measured], target: float) -> list[str]:
    """Markdown rows for one tokenizer: ours, then each peer with its CPU-s/MB and ours' advantage over it (peer
    / ours), against ``target``."""
    rows = [f"| {family} | {ours.tool} | {_cpu(ours)} | – | |"]
    for peer in peers:
        if peer.cpu_s_per_mb is None or ours.cpu_s_per_mb is None:
            rows.append(f"| {family} | {peer.tool} | {_cpu(peer)} | n/a | |")
            continue
        ratio = peer.cpu_s_per_mb / ours.cpu_s_per_mb
        rows.append(f"| {family} | {peer.tool} | {peer.cpu_s_per_mb:.3f} | {ratio:.1f}× | "
                    f"{'yes' if ratio >= target else 'no'} (≥ {target:g}×) |")
    return rows


def _cpu(measured: Measured) -> str:
    if measured.cpu_s_per_mb is None:
        return f"not run: {measured.reason}"
    return f"{measured.cpu_s_per_mb:.3f}"
