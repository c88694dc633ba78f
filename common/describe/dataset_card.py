"""``OUT/README.md``: a Hugging Face dataset card, for every format.

Its YAML front matter names each side's files as a split (``configs``/``data_files``:
``train``, ``validation`` for the held-out side of --holdout-fraction, and a
step's own side by its name; exactly the sides the manifest lists, at the
directories their files are in; with --bin-size one config per length bin
besides the default one of every bin), so ``datasets.load_dataset(OUT)``
gives the right splits of a Parquet output without being told where the
files are, and the held-out files never land in ``train``.  For a format
🤗 datasets cannot read (TFRecord, Megatron), the same metadata names the
format's own files, so ``load_dataset(OUT)`` stops with "No (supported) data
files found" instead of reading manifest.jsonl and summary.json as JSON
data, and the card's text says how to read the output.
It also states the features, a size category, a license placeholder (the
corpus's license is the user's to state), and the command, version and
tokenizer (identity and sha256) that made the output.

The YAML is written by hand: strings as JSON strings (valid YAML double-quoted
scalars), so the sink needs no YAML library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.output.files import TRAIN
from common.output.manifest import read_entries, shard_files
from common.steps import described_steps, split_of
from common.writers import writer_named
from common.writers.base import hf_split

CARD_NAME = "README.md"
#: Hugging Face's size_categories tags, by upper bound of the number of records.
SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
                   (10_000_000_000, "1B<n<10B"), (100_000_000_000, "10B<n<100B"),
                   (1_000_000_000_000, "100B<n<1T")]
_BIN = re.compile(r"(?:^|/)(bin-\d+)/")


def size_category(records: int) -> str:
    for bound, name in SIZE_CATEGORIES:
        if records < bound:
            return name
    return "n>1T"


def _q(text) -> str:
    return json.dumps(str(text))


@dataclass
class SplitFiles:
    """Per config (``default``, and ``bin-K`` for binned output), per split: its records and where its files are
    (glob patterns relative to the output, one per directory its files are in)."""

    records: dict[str, dict[str, int]] = field(default_factory=dict)
    patterns: dict[str, dict[str, set[str]]] = field(default_factory=dict)

    def add(self, entry: dict, suffixes: tuple[str, ...]) -> None:
        """One manifest line's files of the format's ``suffixes`` (the normal pass's) counted."""
        if entry.get("stage"):
            return
        for f in shard_files(entry):
            name = str(f["name"])
            suffix = next((s for s in suffixes if name.endswith(s)), None)
            if suffix is None:
                continue
            split = hf_split(split_of(f))
            directory = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
            match = _BIN.search(name)
            for config in ["default"] + ([match.group(1)] if match else []):
                per_split = self.records.setdefault(config, {})
                per_split[split] = per_split.get(split, 0) + int(f.get("records", 0))
                where = _BIN.sub(lambda m: m.group(0).replace(m.group(1), "bin-*"), directory) \
                    if config == "default" else directory
                self.patterns.setdefault(config, {}).setdefault(split, set()).add(f"{where}part-*{suffix}")


def split_files(entries: Iterable[dict], suffixes: tuple[str, ...] = (".parquet",)) -> SplitFiles:
    """The sides the manifest lists (the normal pass's files of the format's ``suffixes``), as card splits."""
    found = SplitFiles()
    for entry in entries:
        found.add(entry, suffixes)
    return found


def card_suffixes(file_suffixes) -> tuple[str, ...]:
    """The endings of the files the card names: the format's (dataset_info.json's ``file_suffixes``)."""
    return tuple(file_suffixes or (".parquet",))


@dataclass
class CountedSplits:
    """The card's splits counted line by line as the journal is read and appended to (the sink), so the card
    reads no line again at the end of the job; for the files ending in ``suffixes``."""

    suffixes: tuple[str, ...]
    files: SplitFiles = field(default_factory=SplitFiles)

    def add(self, entry: dict) -> None:
        self.files.add(entry, self.suffixes)


def _split_order(splits) -> list[str]:
    return sorted(splits, key=lambda s: ({"train": 0, "validation": 1}.get(s, 2), s))


def _feature_yaml(name: str, spec: dict) -> list[str]:
    if spec["shape"] == []:
        return [f"  - name: {_q(name)}", f"    dtype: {spec['dtype']}"]
    return [f"  - name: {_q(name)}", f"    sequence: {spec['dtype']}"]


def file_columns(info: dict) -> list[tuple[str, dict]]:
    """The files' columns in order, each with its spec: the features under the files' names (Hugging Face's with
    --column-names hf, format_details' ``columns``), then the columns the format adds (``added_columns``)."""
    details = info.get("format_details") or {}
    renamed = details.get("columns") or {}
    names = info.get("feature_names") or list(info["features"])  # the files' column order
    return ([(renamed.get(name, name), info["features"][name]) for name in names]
            + list((details.get("added_columns") or {}).items()))


def render(info: dict, counts: SplitFiles, reading: str = "") -> str:
    """The card's text from the output's dataset_info (common/describe/dataset_info.py) and its files' sides;
    ``reading``: how to read a format 🤗 datasets cannot (its writer's ``reading``), "" for Parquet."""
    binned = bool(info.get("format_params", {}).get("bin_size"))
    objective = info["objective"]
    tokenizer = info["tokenizer"]
    made_by = info.get("made_by") or {}
    records = sum(counts.records.get("default", {}).values())
    columns = file_columns(info)
    hf_names = (info.get("format_details") or {}).get("column_names") == "hf"
    title = f"mlm-pipeline {objective['name']} pretraining data"
    lines = ["---", f"pretty_name: {_q(title)}",
             "license: unknown  # placeholder: state the corpus's license (e.g. cc-by-sa-3.0 for Wikipedia)",
             "task_categories:", "- fill-mask", "tags:", "- mlm-pipeline", f"- {_q(objective['name'])}",
             "size_categories:", f"- {size_category(records)}", "configs:"]
    configs = ["default"] + sorted(c for c in counts.records if c != "default")
    for config in configs:
        splits = counts.records.get(config, {})
        if config != "default" and not splits:
            continue
        lines.append(f"- config_name: {config}")
        if config == "default":
            lines.append("  default: true")
        lines.append("  data_files:")
        for split in _split_order(splits):
            patterns = sorted(counts.patterns[config][split])
            lines += [f"  - split: {split}", f"    path: {_q(patterns[0])}" if len(patterns) == 1 else
                      "    path: [" + ", ".join(map(_q, patterns)) + "]"]
        if not splits:  # an output without a record: the default config still names where they would be
            suffix = (info.get("file_suffixes") or [".parquet"])[0]
            where = _train_directory(info.get("format"))
            lines += ["  - split: train", f"    path: {_q(where + ('bin-*/' if binned else '') + 'part-*' + suffix)}"]
    lines.append("dataset_info:")
    for config in configs:
        splits = counts.records.get(config, {})
        if config != "default" and not splits:
            continue
        # No ``splits`` here: datasets wants their in-memory bytes, which only it can count.
        lines += [f"- config_name: {config}", "  features:"]
        for name, spec in columns:
            lines += _feature_yaml(name, spec)
    lines.append("---")
    params = ", ".join(f"{k}={v}" for k, v in sorted(objective.items()) if k != "name")
    specials = ", ".join(f"{role} {s['token']!s} ({s['id']})" for role, s in tokenizer["special_tokens"].items() if s)
    body = [
        "",
        f"# mlm-pipeline: {objective['name']} pretraining data",
        "",
        f"Made by mlm-pipeline {made_by.get('version') or '(version unknown)'} (job `{info['job']}`) with:",
        "",
        "```bash",
        made_by.get("command") or "(command not recorded)",
        "```",
        "",
        "## Loading",
        "",
    ]
    if reading:
        body += [f"This is a {info.get('format')} output: 🤗 `datasets` has no reader for its files, so "
                 "`datasets.load_dataset(\"path/to/this/directory\")` stops with \"No (supported) data files "
                 "found\" (the metadata above names the format's files, so manifest.jsonl and summary.json are "
                 "not taken for data). Read it so:", "", reading]
    else:
        body += ["```python", "import datasets",
                 "ds = datasets.load_dataset(\"path/to/this/directory\")   # splits: "
                 + ", ".join(_split_order(counts.records.get("default", {})))]
        if hf_names:
            body.append("# Hugging Face's column names (--column-names hf): BertForPreTraining / Trainer take the "
                        "rows as they are")
        if binned:
            bin_config = next((c for c in configs if c != "default"), "bin-001")
            body.append(f"bin = datasets.load_dataset(\"path/to/this/directory\", \"{bin_config}\")"
                        "   # one sequence-length bin")
        body.append("```")
    body += [
        "",
        "## Records",
        "",
        f"- objective: {objective['name']} ({params or 'no parameters'})",
        f"- sequence length: {info.get('sequence_length')}; masked positions per sequence at most: "
        f"{info.get('max_predictions_per_seq')}",
        f"- records: {records:,} ("
        + ", ".join(f"{split} {n:,}" for split, n in sorted(counts.records.get("default", {}).items())) + ")",
        "- columns: " + ", ".join(f"`{name}` {spec['dtype']}{spec['shape']}" for name, spec in columns)
        + (" (Hugging Face's names; `labels`: -100 but at the masked positions, which hold the original ids)"
           if hf_names else ""),
        *_step_lines(info),
        f"- length bins of {info['format_params']['bin_size']} tokens: `bin-K/` holds lengths in ((K-1)·N, K·N]"
        if binned else "- length bins: none (no --bin-size)",
        "",
        "## Tokenizer",
        "",
        f"- {tokenizer['model']}, {tokenizer['vocab_size']:,} ids, "
        f"{'lower-cases its input' if tokenizer['lower_case'] else 'keeps case'}",
        f"- special tokens: {specials}",
        f"- sha256 of its tokenizers JSON: `{tokenizer['sha256']}`",
        "",
        "## License",
        "",
        "The records are derived from the input corpus: state its license in the `license` field above.",
        "",
        "`dataset_info.json` beside this card describes the output for other readers; `manifest.jsonl` lists every "
        "file with its sha256 (check them with `mlm-verify`).",
        "",
    ]
    return "\n".join(lines + body)


def _train_directory(format_name) -> str:
    """Where the format puts the training side's files ("train/" for Parquet and MDS; "" at the root)."""
    try:
        directory = writer_named(str(format_name)).side_directory(TRAIN) if format_name else None
    except ValueError:  # a plugin's format not installed here: its files' names say where they are
        directory = None
    return f"{directory}/" if directory else ""


def _step_lines(info: dict) -> list[str]:
    """The described steps' lines of the Records list (``Step.card_lines``), from their dataset_info sections."""
    return [line for step in described_steps() for line in step.card_lines(info.get(step.name))]


def write_card(output, config, reading: str = "", entries: Iterable[dict] | None = None,
               counted: CountedSplits | None = None) -> None:
    """The card of ``output``.  Its splits: ``counted`` as the lines went by, when counted for the format's
    suffixes; else from ``entries``, its manifest's lines as a stream (the sink's journal); else the published
    manifest is read whole."""
    from common.describe import dataset_info

    info = dataset_info.read(output) or dataset_info.describe(config, {}, complete=False)
    suffixes = card_suffixes(info.get("file_suffixes"))
    if counted is not None and counted.suffixes == suffixes:
        found = counted.files
    else:
        found = split_files(read_entries(output) if entries is None else entries, suffixes)
    output.put_bytes(CARD_NAME, render(info, found, reading).encode())
