"""``python -m bench.run [--quick] [--repeats N] [--scale N] [--markdown FILE]``

Measures every role of the pipeline on ../shared's Wikipedia sample
replicated to a larger input (document ids made unique), with the real
BERT vocabulary and sequence length 128, and prints one markdown table:
metric, median value over the repeats, target, and whether the median meets
the target.  Meeting a target is information only: the exit status says
whether every measurement ran, never whether it was fast enough.

Ratios (worker vs tokenizer, 2 workers vs 1) are taken within each repeat,
then their median reported; the worker's stage ratios (bench/ratios.py, the
regression guard: ``--ratios FILE`` writes them, ``--record-ratios`` records
a quick run's as the guard's figures) are each stage's least CPU over rounds
divided by its reference's least.  Throughput per CPU-second uses CPU time
(time.process_time, or psutil for other processes), so other work on the
machine affects it less than wall time.  ``--quick`` runs everything on
tiny inputs (for CI, so the benchmark cannot rot); its numbers mean little.

Sections (``--only`` to run some): worker, objectives, ventilator, sink, pipeline, rss, readers, dedup, extras,
loader, batches (token-budget batches: padding waste, serving speed), report (mlm-report on a ~1 GB output),
scale (bench/scale.py: one ventilator and sink, thousands of simulated workers, a million tasks; its curves are
printed after the table), job (the whole job of BERT, ALBERT and ELECTRA against their own reference scripts:
bench/whole_job.py).  Not run unless named: peers (the tokens objective against Megatron-LM's, datatrove's and
ModernBERT's converters, three tokenizers: bench/peers.py; installs each into a venv of its own on first use).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from bench import corpus as corpora
from bench import encoder_ratios
from bench.procs import REPO, compile_project
from bench.ratios import REFERENCES
from bench.ratios import key as ratio_key
from common.job.tasks import parse_size
from ventilator.run_config import DEFAULT_TASK_SIZE

SHARED = REPO.parent / "shared"
WIKI = SHARED / "corpus" / "wiki"
VOCAB = SHARED / "vocab" / "bert-base-uncased-vocab.txt"

#: google-research/bert's create_pretraining_data.py on this kind of machine (the issue's figures).
BERT_SCRIPT_CPU_S_PER_MB = {1: 3.0, 10: 16.0}
STAGE_NAMES = {"read": "read task", "parse": "parse documents", "split": "sentence split", "tokenize": "tokenize",
               "build": "build records (objective)", "write": "encode and write (writer)"}


# --------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    key: str
    metric: str
    fmt: str = "{:.2f}"
    target: str = ""
    meets: Callable[[float], bool] | None = None
    needs: tuple[str, ...] = ()  # optional packages this row needs


#: Worker variants: the tokenizer behind encode_many.  "hf" is HF
#: tokenizers (the worker's tokenizer when this was written); "fast" is
#: common/fast_wordpiece.make_fast_encoder (nanotoken), exactly the same ids.
TOKENIZERS = {"hf": "HF tokenizers", "fast": "nanotoken"}


#: Parquet, then the formats measured against it (docs/formats.md: mds, litdata).
SAMPLE_FORMATS = ("parquet", "mds", "litdata")


def _rows() -> list[Row]:
    rows = [
        Row("w_input_mb", "Worker input: one task of the replicated corpus (MB)", "{:.1f}"),
    ]
    for tok, label in TOKENIZERS.items():
        needs = ("nanotoken",) if tok == "fast" else ()
        rows.append(Row(f"tok_{tok}_mb_cpu", f"Tokenizer alone ({label}{', cold cache' if tok == 'fast' else ''}): "
                        "input MB per CPU-s", needs=needs))
        for dupe in (1, 10):
            bert = BERT_SCRIPT_CPU_S_PER_MB[dupe]
            rows += [
                Row(f"w{dupe}_{tok}_mb_cpu", f"Worker d={dupe} ({label}), end to end: input MB per CPU-s",
                    needs=needs),
                Row(f"w{dupe}_{tok}_inst_cpu", f"Worker d={dupe} ({label}), end to end: instances per CPU-s",
                    "{:,.0f}", needs=needs),
                Row(f"w{dupe}_{tok}_cpu_mb", f"Worker d={dupe} ({label}), end to end: CPU-s per input MB", "{:.3f}",
                    "≤ 0.5" if dupe == 10 else "", (lambda v: v <= 0.5) if dupe == 10 else None, needs=needs),
                Row(f"w{dupe}_{tok}_vs_bert",
                    f"Worker d={dupe} ({label}): speed-up vs google-research/bert's script (~{bert:g} CPU-s/MB)",
                    "{:.1f}×", "≥ 30×" if dupe == 10 else "", (lambda v: v >= 30) if dupe == 10 else None,
                    needs=needs),
            ]
        rows.append(Row(f"w1_{tok}_vs_tok", f"Worker d=1 ({label}) end to end / its tokenizer alone (same run)",
                        "{:.1%}", "≥ 70%", lambda v: v >= 0.7, needs=needs))
    rows += [
        Row("w1_fast_vs_tok_hf", "Worker d=1 (nanotoken) end to end / HF tokenizer alone (same run)", "{:.0%}",
            "≥ 70%", lambda v: v >= 0.7, needs=("nanotoken",)),
        Row("w1_fast_bound", "Highest d=1 ratio any worker splitting sentences could reach: nanotoken alone / "
            "(Bling Fire alone + nanotoken alone), same task", "{:.1%}", "≥ 70%", lambda v: v >= 0.7,
            needs=("nanotoken",)),
        Row("w1_fastline_vs_tok", "Worker d=1 (nanotoken, --segmenter line: no sentence split) / its tokenizer alone",
            "{:.1%}", "≥ 70%", lambda v: v >= 0.7, needs=("nanotoken",)),
        *[Row(f"w_tokens8192_{fmt}_vs_tok", f"Worker --objective tokens --max-seq-length 8192 --segmenter line, "
              f"{fmt} (nanotoken) / its tokenizer alone (issue #31)", "{:.1%}", "≥ 50%", lambda v: v >= 0.5,
              needs=("nanotoken",)) for fmt in ("mds", "parquet")],
        *[Row(f"ratio_fast{dupe}_split", f"Sentence split stage, worker d={dupe} (nanotoken) / Bling Fire's "
              "text_to_sentences alone on the same text (same run, least of rounds)", "{:.2f}×", "≤ 1.2×",
              lambda v: v <= 1.2, needs=("nanotoken",)) for dupe in (1, 10)],
        *[Row(encoder_ratios.key(family, cache), f"Guard: {label}, the worker's encoder, {cache} cache / HF "
              "tokenizers' encode_batch on the task's segments (same run, least of rounds)", "{:.3f}")
          for family, label in encoder_ratios.FAMILIES.items() for cache in encoder_ratios.CACHES],
        Row("fast_identical", "Shards written with nanotoken byte-identical to HF's (d=1, d=10)", "{:.0f}/2",
            "2/2", lambda v: v == 2, needs=("nanotoken",)),
        Row("out_bytes_inst", "Output bytes per instance (TFRecord)", "{:,.0f}"),
        Row("out_gzip_bytes_inst", "Output bytes per instance (--gzip)", "{:,.0f}"),
        Row("w1_gzip_mb_cpu", "Worker d=1 (HF tokenizers) with --gzip, end to end: input MB per CPU-s"),
        # Ventilator
        Row("v_input_mb", "Ventilator input: replicated corpus (MB)", "{:,.1f}"),
        Row("v_ship_mb_s", "Ventilator alone, content shipped (default): MB/s handed out", "{:,.0f}", "≥ 500",
            lambda v: v >= 500),
        Row("v_ship_mb_cpu", "Ventilator alone, content shipped: MB per ventilator CPU-s", "{:,.0f}", "≥ 500",
            lambda v: v >= 500),
        Row("v_ship_tasks_s", "Ventilator alone, content shipped, ~1 MB tasks: tasks/s", "{:,.0f}"),
        Row("v_range_mb_s", "Ventilator alone, --shared-fs (ranges only): MB/s handed out", "{:,.0f}", "≥ 500",
            lambda v: v >= 500),
        Row("v_range_mb_cpu", "Ventilator alone, --shared-fs: MB per ventilator CPU-s", "{:,.0f}", "≥ 500",
            lambda v: v >= 500),
        Row("v_range_tasks_s", "Ventilator alone, --shared-fs, ~1 MB tasks: tasks/s", "{:,.0f}"),
        Row("v_small_tasks_s", "Ventilator alone, content shipped, small tasks: tasks/s", "{:,.0f}"),
        Row("v_small_cpu_ms", "Ventilator alone, content shipped, small tasks: CPU ms per task", "{:.2f}"),
        *[Row(f"v_cpu_per_worker_{tok}{dupe}", f"Ventilator CPU per worker ({label}) at d={dupe}, shipped: "
              "% of a core", "{:.2f}%", needs=("nanotoken",) if tok == "fast" else ())
          for tok, label in TOKENIZERS.items() for dupe in (10, 1)],
        # Sink
        Row("s_acks_s", "Sink alone under a flood of acks (a batch of acks, one fsync): acks/s", "{:,.0f}",
            "≥ 20,000", lambda v: v >= 20000),
        Row("s_cpu_ms_ack", "Sink alone: CPU ms per ack", "{:.3f}"),
        # Scale (bench/scale.py): one ventilator and sink, simulated workers, ranges tasks of 8 MiB
        Row("sc_plan_s", "Scale: tasks planned, command to a listening ventilator: seconds", "{:.1f}", "< 60 at 1M",
            lambda v: v < 60),
        Row("sc_plan_rss_mb", "Scale: ventilator peak RSS after planning: MB", "{:,.0f}", "≤ 1,500 at 1M",
            lambda v: v <= 1500),
        Row("sc_grants_s", "Scale: grants/s sustained, workers acknowledging at once", "{:,.0f}", "≥ 2,000 at 5,000",
            lambda v: v >= 2000),
        Row("sc_vent_cpu_ms", "Scale: ventilator CPU ms per task (same run)", "{:.3f}"),
        Row("sc_sink_cpu_ms", "Scale: sink CPU ms per task (same run)", "{:.3f}"),
        Row("sc_heartbeat_core", "Scale: ventilator share of a core, workers heartbeating while they hold tasks",
            "{:.2f}", "< 1 at 5,000", lambda v: v < 1),
        Row("sc_resume_s", "Scale: resume over a manifest listing every task, command to exit: seconds", "{:.1f}",
            "< 15 at 1M", lambda v: v < 15),
        Row("sc_loss_late_s", "Scale: workers vanished at once, holding tasks: all back in the queue "
            "(mlm_ventilator_requeued_total), seconds past one lease period (negative: sooner)", "{:.2f}",
            "≤ 0.5 (expiry runs every 0.5 s)", lambda v: v <= 0.5),
        Row("sc_loss_handed_out_s", "Scale: ... and all handed out again to live workers, seconds after the "
            "vanish", "{:.2f}"),
        # Pipeline
        Row("p_input_mb", "Pipeline input (MB)", "{:.1f}"),
        Row("p1_mb_s", "Pipeline, 1 worker (d=10): steady-state input MB/s", "{:.2f}"),
        Row("p2_mb_s", "Pipeline, 2 workers (d=10): steady-state input MB/s", "{:.2f}"),
        Row("p_scaling", "Pipeline scaling, 2 workers / 1 worker (steady state, same run)", "{:.2f}×", "≥ 1.8×",
            lambda v: v >= 1.8),
        Row("p_scaling_wall", "Pipeline scaling, 2 workers / 1 worker (whole command's wall time)", "{:.2f}×"),
        # Memory
        Row("rss_small_mb", "Ventilator and sink RSS runs: smaller input (MB)", "{:,.1f}"),
        Row("rss_big_mb", "Ventilator and sink RSS runs: larger input (MB)", "{:,.1f}"),
        Row("rss_big_over_vent", "Larger input / ventilator peak RSS", "{:.1f}×", "≥ 10×", lambda v: v >= 10),
        Row("rss_vent_small", "Peak RSS ventilator, smaller input (MB)", "{:.0f}", "≤ 200", lambda v: v <= 200),
        Row("rss_vent_big", "Peak RSS ventilator, larger input (MB)", "{:.0f}", "≤ 200", lambda v: v <= 200),
        Row("rss_vent_growth", "Peak RSS ventilator growth, smaller → larger input", "{:+.0%}", "flat (≤ +10%)",
            lambda v: v <= 0.10),
        Row("rss_sink_small", "Peak RSS sink, smaller input (MB)", "{:.0f}", "≤ 200", lambda v: v <= 200),
        Row("rss_sink_big", "Peak RSS sink, larger input (MB)", "{:.0f}", "≤ 200", lambda v: v <= 200),
        Row("rss_sink_growth", "Peak RSS sink growth, smaller → larger input", "{:+.0%}", "flat (≤ +10%)",
            lambda v: v <= 0.10),
        Row("rss_worker_small_mb", "Worker RSS runs (8 MiB tasks, d=1): smaller input (MB)", "{:,.1f}"),
        Row("rss_worker_big_mb", "Worker RSS runs (8 MiB tasks, d=1): larger input (MB)", "{:,.1f}"),
        Row("rss_worker_small", "Peak RSS per worker process, smaller input (MB)", "{:.0f}", "≤ 300",
            lambda v: v <= 300),
        Row("rss_worker_big", "Peak RSS per worker process, larger input (MB)", "{:.0f}", "≤ 300", lambda v: v <= 300),
        Row("rss_worker_growth", "Peak RSS worker growth, smaller → larger input (2 processes; noisy)", "{:+.0%}"),
        Row("rss_series_tasks", "One worker process, tasks in a row (8 MiB, d=1)", "{:.0f}"),
        Row("rss_series_first", "One worker process: peak RSS after its first task (MB)", "{:.0f}"),
        Row("rss_series_warm", "One worker process: peak RSS after its first tasks (MB)", "{:.0f}"),
        Row("rss_series_last", "One worker process: peak RSS after its last task (MB)", "{:.0f}", "≤ 300",
            lambda v: v <= 300),
        Row("rss_series_growth", "One worker process: peak RSS growth from there to the last task", "{:+.0%}",
            "flat (≤ +10%)", lambda v: v <= 0.10),
        # Dedup (docs/dedup.md)
        Row("dd_sig_input_mb", "Dedup signature stage: one task of the replicated corpus (MB)", "{:.1f}"),
        Row("dd_sig_minhash", "Dedup signature stage, minhash (parse, keys, write): input MB per CPU-s", "{:.1f}",
            "≥ 20", lambda v: v >= 20),
        Row("dd_sig_exact", "Dedup signature stage, exact (parse, keys, write): input MB per CPU-s", "{:.1f}",
            "≥ 20", lambda v: v >= 20),
        Row("dd_job_input_mb", "Dedup job runs: input, copies made distinct (MB)", "{:.1f}"),
        Row("dd_job_cpu_plain", "Plain job d=1, 2 workers: CPU-s of every process", "{:.1f}"),
        Row("dd_job_cpu_minhash_ratio", "Dedup job (minhash) / plain job d=1: CPU of every process", "{:.2f}×",
            "≤ 1.5×", lambda v: v <= 1.5),
        Row("dd_job_cpu_exact_ratio", "Dedup job (exact) / plain job d=1: CPU of every process", "{:.2f}×",
            "≤ 1.5×", lambda v: v <= 1.5),
        Row("dd_rss_small_mb", "Dedup (minhash) RSS runs: smaller input (MB)", "{:.1f}"),
        Row("dd_rss_big_mb", "Dedup (minhash) RSS runs: larger input (MB)", "{:.1f}"),
        *[Row(f"dd_rss_{role}_{size}", f"Dedup job peak RSS {role}, {label} input (MB)", "{:.0f}")
          for role in ("ventilator", "sink", "worker") for size, label in (("small", "smaller"), ("big", "larger"))],
        *[Row(f"dd_rss_{role}_growth", f"Dedup job peak RSS {role} growth, smaller → larger input", "{:+.0%}",
              "flat (≤ +10%)", lambda v: v <= 0.10) for role in ("ventilator", "sink")],
        Row("dd_rss_worker_growth", "Dedup job peak RSS worker growth, smaller → larger input (2 processes; noisy)",
            "{:+.0%}", "flat (≤ +10%)", lambda v: v <= 0.10),
        Row("dd_rss_plain_worker_growth", "Plain job d=1 peak RSS worker growth, same inputs (for comparison)",
            "{:+.0%}"),
        # Objectives (bench/objectives_bench.py): each at its defaults, nanotoken, one task of the corpus.
        Row("obj_electra_cpu_mb", "Worker --objective electra --segmenter blingfire (seq 128, sentences): "
            "CPU-s per input MB", "{:.3f}"),
        Row("obj_electra_line_cpu_mb", "Worker --objective electra at its defaults (seq 128, lines: the "
            "reference's unit): CPU-s per input MB", "{:.3f}"),
        Row("obj_electra_ref_cpu_mb", "google-research/electra build_pretraining_dataset.py on the same documents: "
            "CPU-s per input MB (start-up subtracted)", "{:.2f}"),
        Row("obj_electra_vs_ref", "Worker electra at its defaults: speed-up vs the reference script", "{:.1f}×",
            "≥ 30×", lambda v: v >= 30),
        Row("obj_electra_vs_ref_sentences", "Worker electra --segmenter blingfire (sentences split): speed-up vs "
            "the reference (which splits nothing)", "{:.1f}×"),
        Row("obj_roberta_none_cpu_mb", "Worker --objective roberta (seq 512, full sentences, --masking none): "
            "CPU-s per input MB", "{:.3f}"),
        Row("obj_roberta_static_cpu_mb", "Worker --objective roberta --masking static (d=1): CPU-s per input MB",
            "{:.3f}"),
        Row("obj_roberta_static10_cpu_mb", "Worker --objective roberta --masking static --dupe-factor 10: "
            "CPU-s per input MB", "{:.3f}"),
        Row("obj_roberta_none_vs_bert", "Worker roberta (--masking none): speed-up vs google-research/bert's script "
            "d=1 (~3 CPU-s/MB; no RoBERTa reference runs here)", "{:.1f}×", "≥ 30×", lambda v: v >= 30),
        Row("obj_roberta_static10_vs_bert", "Worker roberta --masking static d=10: speed-up vs google-research/bert's "
            "script d=10 (~16 CPU-s/MB)", "{:.1f}×", "≥ 30×", lambda v: v >= 30),
        Row("obj_albert10_cpu_mb", "Worker --objective albert (seq 128, d=10, whole-word 3-grams): CPU-s per input MB",
            "{:.3f}"),
        Row("obj_albert_vs_bert_worker", "Worker albert / worker bert, both seq 128 d=10 (same run): CPU ratio",
            "{:.2f}×"),
        Row("obj_albert_subset_mb", "ALBERT against its reference: the first documents of the task (MB)", "{:.2f}"),
        Row("obj_albert_ref128_cpu_mb", "google-research/albert create_pretraining_data.py, seq 128 d=10, on those "
            "documents: CPU-s per input MB (start-up subtracted)", "{:.2f}"),
        Row("obj_albert128_vs_ref", "Worker albert seq 128 d=10 on the same documents: speed-up vs the reference",
            "{:.1f}×", "≥ 30×", lambda v: v >= 30),
        Row("obj_albert_ref_default_cpu_mb", "google-research/albert create_pretraining_data.py at its defaults "
            "(seq 512, d=40), same documents: CPU-s per input MB", "{:.2f}"),
        Row("obj_albert_default_cpu_mb", "Worker --objective albert at its defaults (seq 512, d=40), same documents: "
            "CPU-s per input MB", "{:.3f}"),
        Row("obj_albert_default_vs_ref", "Worker albert at the defaults: speed-up vs the reference at its defaults",
            "{:.1f}×", "≥ 30×", lambda v: v >= 30),
        # The whole job against google-research/bert's script (bench/whole_job.py), issue #33's measure.
        *[Row(f"job{d}_input_mb", f"Whole job d={d} and its reference: corpus (MB; the one-document run's "
              "subtracted from both sides)", "{:.2f}") for d in (10, 1)],
        *[Row(f"job{d}_cpu_mb", f"Whole job d={d} (python -m ventilator --workers 1, every process): marginal CPU-s "
              "per input MB", "{:.3f}") for d in (10, 1)],
        *[Row(f"job{d}_ref_cpu_mb", f"google-research/bert create_pretraining_data.py d={d} (compat.v1), same "
              "documents as sentences: marginal CPU-s per input MB", "{:.2f}") for d in (10, 1)],
        Row("job10_vs_ref", "Whole job d=10: speed-up vs google-research/bert's script, both marginal", "{:.1f}×",
            "≥ 60×", lambda v: v >= 60),
        Row("job1_vs_ref", "Whole job d=1: speed-up vs google-research/bert's script, both marginal", "{:.1f}×",
            "≥ 30×", lambda v: v >= 30),
        *[Row(f"job1_task_cpu_{which}", f"Whole job d=1: one task's CPU-s per MB as its worker measured it, the "
              f"{which} over every run's tasks past the first copy (the same bytes, the same work)", "{:.3f}")
          for which in ("least", "median", "most")],
        *[row for d in (10, 1) for row in (
            Row(f"job_text{d}_cpu_mb", f"Whole job d={d} on the script's own input (one sentence a line: --format "
                "text, no sentence split), every process: marginal CPU-s per input MB", "{:.3f}"),
            Row(f"job_text{d}_vs_ref", f"Whole job d={d} on the script's own input: speed-up vs google-research/bert's "
                "script on that same file, both marginal", "{:.1f}×"))],
        *[row for d in (10, 1) for row in (
            Row(f"job_albert{d}_cpu_mb", f"Whole job --objective albert d={d} (seq 128, whole-word 3-grams, every "
                "process): marginal CPU-s per input MB", "{:.3f}"),
            Row(f"job_albert{d}_ref_cpu_mb", f"google-research/albert create_pretraining_data.py d={d} (seq 128), same "
                "documents as sentences: marginal CPU-s per input MB", "{:.2f}"),
            Row(f"job_albert{d}_vs_ref", f"Whole job albert d={d}: speed-up vs google-research/albert's script, both "
                "marginal", "{:.1f}×", "≥ 30×", lambda v: v >= 30))],
        Row("job_electra_cpu_mb", "Whole job --objective electra (seq 128, lines: its defaults, every process; 10 "
            "copies of the sample, 20.7 MB): marginal CPU-s per input MB", "{:.3f}"),
        Row("job_electra_ref_cpu_mb", "google-research/electra build_pretraining_dataset.py (seq 128), same documents' "
            "lines: marginal CPU-s per input MB", "{:.2f}"),
        Row("job_electra_vs_ref", "Whole job electra: speed-up vs google-research/electra's script, both marginal",
            "{:.1f}×", "≥ 30×", lambda v: v >= 30),
        *[Row(f"job{d}_{role}_cpu_mb", f"Whole job d={d}: marginal CPU-s per input MB of the {role} process"
              f"{'es' if role == 'worker' else ''} (psutil, 20 ms samples)", "{:.3f}")
          for d in (10, 1) for role in ("ventilator", "sink", "worker")],
        *[Row(f"job_fixed_{role}",
              f"One-document job d=1: CPU-s of the {role} process{'es' if role == 'worker' else ''}",
              "{:.2f}") for role in ("ventilator", "sink", "worker")],
        Row("job_fixed_all", "One-document job d=1: CPU-s of every process (exact, children's rusage)", "{:.2f}"),
        # Output formats (docs/formats.md): the same worker task, bert seq 128, per format.
        *[Row(f"fmt_{fmt}{d}_vs_tfrecord", f"Worker d={d}, --output-format {fmt}: CPU / the same with tfrecord",
              "{:.2f}×", "≤ 1.2×", lambda v: v <= 1.2) for d in (1, 10) for fmt in ("parquet",)],
        *[Row(f"fmt_{fmt}_tokens_vs_parquet", f"Worker --objective tokens --max-seq-length 1024 --segmenter line, "
              f"--output-format {fmt}: CPU / the same with parquet", "{:.2f}×", "≤ 1.1×", lambda v: v <= 1.1)
          for fmt in SAMPLE_FORMATS[1:]],
        *[Row(f"fmt_{fmt}10_vs_parquet", f"Worker bert seq 128 d=10, --output-format {fmt}: CPU / the same with "
              "parquet", "{:.2f}×", "≤ 1.1×", lambda v: v <= 1.1) for fmt in SAMPLE_FORMATS[1:]],
        Row("fmt_megatron_vs_tokenize", "Worker --objective tokens --output-format megatron: CPU / parse, split and "
            "tokenize alone (the same worker's stages)", "{:.2f}×", "≤ 1.5×", lambda v: v <= 1.5),
        # Input formats (bench/readers_bench.py)
        Row("rd_input_mb", "Input formats: the worker's task, WikiExtractor bytes of the same text (MB)", "{:.1f}"),
        Row("rd_wiki_mb_cpu", "Worker d=1 on WikiExtractor input: input MB per CPU-s"),
        Row("rd_parquet_mb_cpu", "Worker d=1 on the same text as Parquet (footer + columns read from disk): "
            "input MB per CPU-s"),
        Row("rd_parquet_overhead", "Parquet path's CPU per input MB over the WikiExtractor path's (same run)",
            "{:+.1%}", "≤ +10%", lambda v: v <= 0.10),
        Row("rd_read_wiki_mb_cpu", "Read and parse alone, WikiExtractor: input MB per CPU-s", "{:.0f}"),
        Row("rd_read_parquet_mb_cpu", "Read and parse alone, Parquet (decode to Arrow IPC, documents): input MB "
            "per CPU-s", "{:.0f}"),
        Row("rd_plan_files", "Ventilator planning: Parquet files (4 row groups each)", "{:,.0f}"),
        Row("rd_plan_s", "Ventilator planning those files, footers only (check + plan): wall seconds", "{:.2f}"),
        Row("rd_plan_ms_file", "Ventilator planning: CPU ms per Parquet file", "{:.2f}"),
        # Chinese
        Row("zh_input_mb", "Chinese input: one task of Kong Yiji + GSDSimp text (MB)", "{:.1f}"),
        Row("zh_words_cpu_mb", "Word segmentation alone (jieba-rs on the Han runs): CPU-s per MB of Chinese text",
            "{:.3f}"),
        Row("zh_worker_cpu_mb", "Worker d=1, BERT whole words, Chinese, no --word-segmenter: CPU-s per input MB",
            "{:.3f}"),
        Row("zh_worker_words_cpu_mb", "The same with --word-segmenter jieba: CPU-s per input MB", "{:.3f}"),
        Row("zh_words_ratio", "Whole task CPU with --word-segmenter jieba / without it (same run)", "{:.2f}×",
            "≤ 2×", lambda v: v <= 2),
        # Extras
        Row("tf_import_s", "python -c 'import tensorflow': seconds", "{:.2f}", needs=("tensorflow",)),
        Row("tf_import_rss", "python -c 'import tensorflow': peak RSS (MB)", "{:.0f}", needs=("tensorflow",)),
        Row("worker_import_s", "python -c 'import worker.cli' (no TensorFlow): seconds", "{:.2f}"),
        Row("worker_import_rss", "python -c 'import worker.cli': peak RSS (MB)", "{:.0f}"),
        Row("split_blingfire", "Sentence split, Bling Fire: MB per CPU-s", "{:.1f}"),
        Row("split_pysbd", "Sentence split, pysbd: MB per CPU-s", "{:.3f}", needs=("pysbd",)),
        Row("split_ratio", "Sentence split, Bling Fire / pysbd", "{:,.0f}×", needs=("pysbd",)),
        Row("cand_hf", "Tokenizer candidate HF tokenizers (encode_batch): MB per CPU-s", "{:.1f}"),
        Row("cand_nanotoken_cold", "Tokenizer candidate nanotoken, cold cache: MB per CPU-s", "{:.1f}",
            needs=("nanotoken",)),
        Row("cand_nanotoken_warm", "Tokenizer candidate nanotoken, warm cache: MB per CPU-s", "{:.1f}",
            needs=("nanotoken",)),
        Row("cand_kitoken", "Tokenizer candidate kitoken on WordPiece (not exact): MB per CPU-s", "{:.1f}",
            needs=("kitoken",)),
        # Tokenizer families (docs/tokenizers.md): Vocabulary.encode_many alone, the worker's tokenize step.
        Row("fam_wordpiece", "Tokenizer family WordPiece (bert-base-uncased, nanotoken): MB per CPU-s", "{:.1f}"),
        Row("fam_bpe_hf", "Tokenizer family byte-level BPE (RoBERTa-style, trained here), HF tokenizers: MB per CPU-s",
            "{:.1f}"),
        Row("fam_bpe", "Tokenizer family byte-level BPE, as the worker runs it (the word cache where exact): MB per "
            "CPU-s", "{:.1f}"),
        Row("fam_bpe_ratio", "Tokenizer family byte-level BPE: worker's encoder / HF tokenizers (same run)",
            "{:.1f}×"),
        Row("fam_modernbert_hf", "Tokenizer family byte-level BPE of ModernBERT's shape (runs of spaces as added "
            "tokens, trained here), HF tokenizers: MB per CPU-s", "{:.1f}"),
        Row("fam_modernbert", "Tokenizer family byte-level BPE of ModernBERT's shape, as the worker runs it: MB per "
            "CPU-s", "{:.1f}"),
        Row("fam_modernbert_ratio", "Tokenizer family byte-level BPE of ModernBERT's shape: worker's encoder / HF "
            "tokenizers (same run)", "{:.1f}×"),
        Row("fam_unigram_hf", "Tokenizer family Unigram (ALBERT-style tokenizer.json, trained here), HF tokenizers: "
            "MB per CPU-s", "{:.1f}"),
        Row("fam_unigram", "Tokenizer family Unigram, as the worker runs it (fast_unigram where exact): MB per CPU-s",
            "{:.1f}"),
        Row("fam_unigram_ratio", "Tokenizer family Unigram: worker's encoder / HF tokenizers (same run)", "{:.1f}×"),
        Row("fam_spm_hf", "Tokenizer family SentencePiece .model (converted, trained here), HF tokenizers: MB per "
            "CPU-s", "{:.1f}", needs=("sentencepiece",)),
        Row("fam_spm", "Tokenizer family SentencePiece .model, as the worker runs it (fast_unigram where exact): MB "
            "per CPU-s", "{:.1f}", needs=("sentencepiece",)),
        Row("fam_spm_native", "Candidate: the sentencepiece package itself on that .model (exact on the corpus; not "
            "used, workers get JSON): MB per CPU-s", "{:.1f}", needs=("sentencepiece",)),
        # Loader service
        Row("l_records", "Loader input: records of a pipeline output (the wiki sample, d=2)", "{:,.0f}"),
    ]
    for ranks in (1, 8):
        for masked, label in ((False, "stored masks"), (True, "dynamic masking")):
            key = f"l{ranks}{'m' if masked else ''}"
            what = f"Loader, {ranks} rank{'s' if ranks > 1 else ''}, batch 256 × seq 128, {label}"
            rows += [
                Row(f"{key}_mb_s", f"{what}: MB/s of batches (loopback)", "{:,.0f}",
                    "" if masked else "≥ 1,000", None if masked else (lambda v: v >= 1000)),
                Row(f"{key}_batches_s", f"{what}: batches/s", "{:,.0f}"),
                Row(f"{key}_seq_cpu", f"{what}: sequences per server CPU-s", "{:,.0f}",
                    "≥ 5,000" if masked else "", (lambda v: v >= 5000) if masked else None),
                Row(f"{key}_client_ms", f"{what}: client CPU ms per batch (labels included)", "{:.2f}"),
            ]
    rows += [
        Row("l_mb_cpu", "Loader, 8 ranks, stored masks: MB of batches per server CPU-s", "{:,.0f}", "≥ 1,000",
            lambda v: v >= 1000),
        Row("l_one_tok_cpu", "Loader, 8 ranks, stored masks, one source: tokens per server CPU-s", "{:,.0f}"),
        Row("l_mix_tok_cpu", "Loader, 8 ranks, stored masks, the same records as 3 sources (1/6, 2/6, 3/6 of the "
            "tasks, --temperature 0.3): tokens per server CPU-s", "{:,.0f}"),
        Row("l_mix_ratio", "Loader mixture of 3 sources / one source: tokens per server CPU-s", "{:.0%}", "≥ 90%",
            lambda v: v >= 0.9),
        Row("l_rss_small_records", "Loader RSS runs (--cache-mb 16, one epoch served): smaller output (records)",
            "{:,.0f}"),
        Row("l_rss_big_records", "Loader RSS runs: larger output (records)", "{:,.0f}"),
        Row("l_rss_small", "Peak RSS loader server, smaller output (MB)", "{:.0f}"),
        Row("l_rss_big", "Peak RSS loader server, larger output (MB)", "{:.0f}"),
        Row("l_rss_growth", "Peak RSS loader server growth, smaller → larger output", "{:+.0%}", "flat (≤ +10%)",
            lambda v: v <= 0.10),
        # Token-budget batches (bench/token_batches_bench.py): waste on log-normal lengths, serving speed
        *[Row(f"tb_waste_{layout}_{context}", f"Token batches, --batch-tokens {context:,} {layout}: padding waste "
              f"(log-normal lengths, median ~400, documents cut at {context:,})", "{:.2%}",
              "≤ 2%" if layout == "flat" else "", (lambda v: v <= 0.02) if layout == "flat" else None)
          for context in (1024, 8192) for layout in ("flat", "padded")],
        *[Row(f"tb_waste_fixed_{context}", f"Token batches: padding waste of fixed {context:,}-token rows (same "
              f"lengths)", "{:.1%}") for context in (1024, 8192)],
        # the same on real documents: the wiki sample (WikiExtractor articles) through --objective tokens
        *[Row(f"tb_wiki_waste_{layout}_{context}", f"Token batches, --batch-tokens {context:,} {layout}: padding "
              f"waste on the wiki sample's articles (--objective tokens --max-seq-length {context:,})", "{:.2%}",
              "≤ 2%" if layout == "flat" else "", (lambda v: v <= 0.02) if layout == "flat" else None)
          for context in (4096, 8192) for layout in ("flat", "padded")],
        *[Row(f"tb_wiki_fixed_{context}", f"Token batches: padding waste of fixed {context:,}-token rows (the wiki "
              "sample's samples)", "{:.1%}") for context in (4096, 8192)],
        *[Row(f"tb_wiki_samples_{context}", f"Token batches: the wiki sample's samples at --max-seq-length "
              f"{context:,} (tokens objective)", "{:,.0f}") for context in (4096, 8192)],
        Row("tb_pack_s", "Token batches: packing an epoch (best fit decreasing, windows of 4,096): CPU-s per million "
            "samples", "{:.2f}"),
        Row("tb_samples", "Token batches serving input: samples of an --objective tokens output (web-like lengths)",
            "{:,.0f}"),
        Row("tb8_tok_s", "Token batches, 8 ranks, flat 8,192, masked 30%: tokens/s per rank (loopback)",
            "{:,.0f}", "≥ 1,000,000", lambda v: v >= 1_000_000),
        Row("tb8_tok_cpu", "Token batches, 8 ranks, flat 8,192, masked 30%: tokens per server CPU-s", "{:,.0f}"),
        Row("tb8_client_ms", "Token batches, 8 ranks, flat 8,192, masked 30%: client CPU ms per batch", "{:.2f}"),
        Row("tb8u_tok_cpu", "Token batches, 8 ranks, flat 8,192, no masking: tokens per server CPU-s", "{:,.0f}"),
        # mlm-report (bench/report_bench.py): a real run's shards hard-linked to the target size
        Row("rep_gb", "mlm-report input: output size (GB of TFRecord shards)", "{:.2f}"),
        Row("rep_s", "mlm-report on that output (default --sample 64M, --input-sample 1M): wall seconds", "{:.1f}",
            "< 60", lambda v: v < 60),
        Row("rep_read", "mlm-report: share of the output's shard bytes read", "{:.1%}"),
        Row("rep_small_s", "mlm-report on the run itself (every file read): wall seconds", "{:.1f}"),
        Row("rep_ratio", "mlm-report: large output / the run itself, wall seconds (same run)", "{:.1f}×"),
    ]
    return rows


ROWS = _rows()
#: The stage table: one row per (tokenizer, dupe factor), CPU-s per input MB per stage.
STAGE_ROWS = [(tok, dupe, f"Worker d={dupe} ({label})") for tok, label in TOKENIZERS.items() for dupe in (1, 10)]
STAGE_ROWS.append(("fastline", 1, "Worker d=1 (nanotoken, --segmenter line)"))
STAGE_ROWS.append(("fastalbert", 10, "Worker albert d=10 (nanotoken, seq 128, least of the guard's rounds)"))
STAGE_ROWS += [("electra", 1, "Worker electra (nanotoken)"), ("electraline", 1, "Worker electra (--segmenter line)"),
               ("robertanone", 1, "Worker roberta --masking none"),
               ("robertastatic", 10, "Worker roberta --masking static d=10")]
SECTIONS = ("worker", "objectives", "job", "ventilator", "sink", "pipeline", "rss", "readers", "chinese", "dedup",
            "extras", "loader", "batches", "report", "scale")
#: Sections run only when --only names them: peers installs other tools into venvs of their own (bench/peers.py).
OPTIONAL_SECTIONS = ("peers",)


# --------------------------------------------------------------------------
# Settings and results
# --------------------------------------------------------------------------

@dataclass
class Settings:
    quick: bool
    repeats: int
    worker_copies: int  # --scale: copies of the corpus in the worker's one task and the pipeline input
    limit_per_file: int | None = None  # quick: source files cut to their first documents
    vent_small: int = 20
    vent_big: int = 200  # at least; raised until the input is 10× the ventilator's RSS
    small_task: str = "64K"
    flood_acks: int = 8000
    pipe_task: str = "256K"
    pipe_dupe: int = 10
    rss_worker_copies: tuple[int, int] = (16, 48)
    rss_worker_per_file: int = 8
    rss_series_copies: int = 96  # 12 groups of 8 copies: 24 tasks of ~8 MiB
    pysbd_bytes: int = 200_000
    loader_batches: int = 2000  # batches received per measurement, over all ranks
    ratio_rounds: int = 5  # worker stage ratios (bench/ratios.py): rounds, the least cost of each kept

    @classmethod
    def make(cls, quick: bool, repeats: int | None, scale: int | None) -> Settings:
        if quick:
            return cls(quick=True, repeats=repeats or 1, worker_copies=scale or 1, limit_per_file=96_000,
                       vent_small=2, vent_big=6, small_task="16K", flood_acks=600, pipe_task="48K", pipe_dupe=2,
                       rss_worker_copies=(1, 2), rss_worker_per_file=1, rss_series_copies=2,
                       pysbd_bytes=10_000, loader_batches=40)
        return cls(quick=False, repeats=repeats or 3, worker_copies=scale or 4)


@dataclass
class Results:
    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # section -> error
    tables: list[str] = field(default_factory=list)  # markdown printed after the main table (scale curves)
    scaling: list[ScalingPoint] = field(default_factory=list)  # the pipeline section's runs, one per worker count
    scaling_task_bytes: int = 0

    def add(self, key: str, value: float) -> None:
        self.samples.setdefault(key, []).append(float(value))

    def value(self, key: str) -> float | None:
        values = self.samples.get(key)
        return statistics.median(values) if values else None


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


MB = 1e6


# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------

def worker_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench.worker_bench import (
        STAGES,
        cpu_of,
        documents_of,
        hf_encoder,
        load_vocabulary,
        processor,
        run_task,
        split_all,
        task_of,
        with_encoder,
    )
    from common.segmenters.sentences import Segmenter
    from common.tokenization.fast_wordpiece import make_fast_encoder

    vocabulary = load_vocabulary(str(VOCAB))
    encoders = {"hf": hf_encoder(vocabulary.tokenizer)}
    fast = make_fast_encoder(vocabulary.to_json())
    if fast is not None:
        encoders["fast"] = fast
    content = corpora.replicated_bytes(sources, s.worker_copies)
    path = tmp / "worker-input" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    storage, task = task_of(path)
    documents = documents_of(content)
    segments = split_all(documents)
    line_segments = split_all(documents, Segmenter.LINE)
    megabytes = len(content) / MB
    res.add("w_input_mb", megabytes)
    out = tmp / "worker-out"

    def cold():
        if fast is not None and hasattr(fast, "clear_cache"):  # the fast encoder's own cache
            fast.clear_cache()  # each task as if in a fresh process (the replicated input repeats its words)

    def one(encoder, dupe, name, compression="", segmenter=Segmenter.BLINGFIRE, objective="bert"):
        cold()
        params = {"max_seq_length": 128, "dupe_factor": dupe}  # ALBERT's too: seq 128, its whole-word 3-grams
        result = run_task(processor(with_encoder(vocabulary, encoder), out / name, dupe, compression, segmenter,
                                    objective, params), storage, task)
        shutil.rmtree(out / name, ignore_errors=True)
        return result

    for repeat in range(s.repeats):
        log(f"worker: repeat {repeat + 1}/{s.repeats} ({megabytes:.1f} MB task)")
        alone, digests = {}, {}
        for tok, encoder in encoders.items():
            alone[tok] = megabytes / cpu_of(encoder, segments, before=cold)
            res.add(f"tok_{tok}_mb_cpu", alone[tok])
            for dupe in (1, 10):
                run = one(encoder, dupe, f"{tok}{dupe}")
                digests[tok, dupe] = run.sha256
                res.add(f"w{dupe}_{tok}_mb_cpu", megabytes / run.cpu_seconds)
                res.add(f"w{dupe}_{tok}_inst_cpu", run.instances / run.cpu_seconds)
                res.add(f"w{dupe}_{tok}_cpu_mb", run.cpu_seconds / megabytes)
                res.add(f"w{dupe}_{tok}_vs_bert", BERT_SCRIPT_CPU_S_PER_MB[dupe] / (run.cpu_seconds / megabytes))
                for stage in STAGES:
                    res.add(f"stage_{tok}{dupe}_{stage}", run.stage_cpu.get(stage, 0.0) / megabytes)
                if dupe == 1:
                    res.add(f"w1_{tok}_vs_tok", (megabytes / run.cpu_seconds) / alone[tok])
                    if tok == "fast":
                        res.add("w1_fast_vs_tok_hf", (megabytes / run.cpu_seconds) / alone["hf"])
                if tok == "hf" and dupe == 10:
                    res.add("out_bytes_inst", run.bytes_out / run.instances)
        if "fast" in encoders:
            res.add("fast_identical", sum(digests["fast", d] == digests["hf", d] for d in (1, 10)))
            # Where the d=1 target's ceiling stands once the tokenizer is this fast: the worker must
            # also split sentences, so it can reach at most tokenize / (split + tokenize).
            split_cpu = cpu_of(split_all, documents)
            tokenize_cpu = megabytes / alone["fast"]
            res.add("w1_fast_bound", tokenize_cpu / (split_cpu + tokenize_cpu))
            line_alone = megabytes / cpu_of(fast, line_segments, before=cold)
            run = one(fast, 1, "fastline1", segmenter=Segmenter.LINE)
            res.add("w1_fastline_vs_tok", (megabytes / run.cpu_seconds) / line_alone)
            for stage in STAGES:
                res.add(f"stage_fastline1_{stage}", run.stage_cpu.get(stage, 0.0) / megabytes)
            for fmt in ("mds", "parquet"):  # the long-context token stream: cutting chunks and writing, no more
                cold()
                tokens_run = run_task(processor(with_encoder(vocabulary, fast), out / f"tokens8192{fmt}", 1,
                                                segmenter=Segmenter.LINE, objective="tokens",
                                                objective_params={"max_seq_length": 8192}, output_format=fmt),
                                      storage, task)
                shutil.rmtree(out / f"tokens8192{fmt}", ignore_errors=True)
                res.add(f"w_tokens8192_{fmt}_vs_tok", (megabytes / tokens_run.cpu_seconds) / line_alone)
        gz = one(encoders["hf"], 1, "gzip1", "gzip")
        res.add("out_gzip_bytes_inst", gz.bytes_out / gz.instances)
        res.add("w1_gzip_mb_cpu", megabytes / gz.cpu_seconds)
    tok = "fast" if fast is not None else "hf"
    stage_ratios(s, res, documents, segments, tok, encoders[tok], cold, one, megabytes)
    for measured in encoder_ratios.measure_all(segments, s.ratio_rounds, log):
        for cache, ratio in measured.ratios.items():
            name = encoder_ratios.key(measured.family, cache)
            res.add(name, ratio)
            res.notes[name] = f" ({measured.encoder})"


#: The worker runs the guard measures: (variant suffix, objective, dupe factor); ALBERT's build stage holds its
#: n-gram kernel, which BERT's runs do not take.
RATIO_RUNS = (("", "bert", 1), ("", "bert", 10), ("albert", "albert", 10))


def stage_ratios(s: Settings, res: Results, documents, segments, tok: str, encoder, cold, one,
                 megabytes: float) -> None:
    """The regression guard's figures (bench/ratios.py): each stage of the worker's own tokenizer's runs
    (BERT d=1, d=10, ALBERT d=10) over its reference, Bling Fire alone on the same texts for the split and
    the tokenizer alone on the same segments for the rest.  Rounds of (references, run) alternate; each cost
    is its least over the rounds, the estimate least moved by other work on the machine (which only adds)."""
    from bench import ratios
    from bench.worker_bench import STAGES, blingfire_alone, cpu_of, joined_paragraphs

    texts = [joined_paragraphs(lines) for lines in documents]  # what the segmenter hands Bling Fire
    for suffix, objective, dupe in RATIO_RUNS:
        variant = f"{tok}{suffix}{dupe}"
        reference = {"blingfire": math.inf, "tokenizer": math.inf}
        stage = dict.fromkeys(STAGES, math.inf)
        for round_ in range(s.ratio_rounds):
            log(f"worker: stage ratios {objective} d={dupe}, round {round_ + 1}/{s.ratio_rounds}")
            reference["blingfire"] = min(reference["blingfire"], cpu_of(blingfire_alone, texts))
            reference["tokenizer"] = min(reference["tokenizer"], cpu_of(encoder, segments, before=cold))
            run = one(encoder, dupe, f"ratio{variant}", objective=objective)
            stage = {name: min(cost, run.stage_cpu.get(name, 0.0)) for name, cost in stage.items()}
        for name, against in ratios.REFERENCES.items():
            res.add(ratios.key(variant, name), stage[name] / reference[against])
        if suffix:  # BERT's stage rows come from the worker's repeats; this run's from its rounds
            for name in STAGES:
                res.add(f"stage_{variant}_{name}", stage[name] / megabytes)



def objectives_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    """Each objective at its defaults on the worker's task, and ELECTRA's reference script on the same documents."""
    from bench.objectives_bench import ELECTRA_SCRIPT_CPU_S_PER_MB, electra_checkout, electra_reference_cpu
    from bench.worker_bench import documents_of, load_vocabulary, processor, run_task, task_of, with_encoder
    from common.segmenters.sentences import Segmenter
    from common.tokenization.fast_wordpiece import make_fast_encoder

    vocabulary = load_vocabulary(str(VOCAB))
    fast = make_fast_encoder(vocabulary.to_json())
    if fast is not None:
        vocabulary = with_encoder(vocabulary, fast)
    content = corpora.replicated_bytes(sources, s.worker_copies)
    path = tmp / "objectives-input" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    storage, task = task_of(path)
    megabytes = len(content) / MB
    # stage-table name: (objective, its parameters (defaults unless given), segmenter[, output format])
    runs: dict[str, tuple[Any, ...]] = {
        "electra1": ("electra", {}, Segmenter.BLINGFIRE),
        "electraline1": ("electra", {}, Segmenter.LINE),
        "robertanone1": ("roberta", {"masking": "none"}, Segmenter.BLINGFIRE),  # explicit: defaults may differ
        "robertastatic1": ("roberta", {"masking": "static"}, Segmenter.BLINGFIRE),
        "robertastatic10": ("roberta", {"masking": "static", "dupe_factor": 10}, Segmenter.BLINGFIRE),
        "albert10": ("albert", {"max_seq_length": 128, "dupe_factor": 10}, Segmenter.BLINGFIRE),
        "bert10": ("bert", {"max_seq_length": 128, "dupe_factor": 10}, Segmenter.BLINGFIRE),
        "bert1": ("bert", {"max_seq_length": 128, "dupe_factor": 1}, Segmenter.BLINGFIRE),
        "parquet10": ("bert", {"max_seq_length": 128, "dupe_factor": 10}, Segmenter.BLINGFIRE, "parquet"),
        "parquet1": ("bert", {"max_seq_length": 128, "dupe_factor": 1}, Segmenter.BLINGFIRE, "parquet"),
        "megatron1": ("tokens", {}, Segmenter.BLINGFIRE, "megatron"),
        # MDS and LitData against Parquet: ModernBERT-style samples (1,024-token chunks), and BERT's records at d=10
        **{f"tok{fmt}1": ("tokens", {"max_seq_length": 1024}, Segmenter.LINE, fmt) for fmt in SAMPLE_FORMATS},
        **{f"{fmt}10": ("bert", {"max_seq_length": 128, "dupe_factor": 10}, Segmenter.BLINGFIRE, fmt)
           for fmt in SAMPLE_FORMATS[1:]},
    }
    checkout = electra_checkout()
    for repeat in range(s.repeats):
        log(f"objectives: repeat {repeat + 1}/{s.repeats} ({megabytes:.1f} MB task)")
        cpu = {}
        tokenize_cpu = {}
        for name, (objective, params, segmenter, *output) in runs.items():
            if fast is not None and hasattr(fast, "clear_cache"):
                fast.clear_cache()
            proc = processor(vocabulary, tmp / "objectives-out" / name, 1, segmenter=segmenter, objective=objective,
                             objective_params=params, output_format=output[0] if output else "tfrecord")
            run = run_task(proc, storage, task)
            shutil.rmtree(tmp / "objectives-out" / name, ignore_errors=True)
            cpu[name] = run.cpu_seconds / megabytes
            tokenize_cpu[name] = sum(run.stage_cpu.get(stage, 0.0) for stage in ("read", "parse", "split", "tokenize"))
            tokenize_cpu[name] /= megabytes
            for stage in STAGE_NAMES:
                res.add(f"stage_{name}_{stage}", run.stage_cpu.get(stage, 0.0) / megabytes)
        if checkout is not None:
            reference = electra_reference_cpu(checkout, documents_of(content), VOCAB, tmp / "electra-ref") / megabytes
            shutil.rmtree(tmp / "electra-ref", ignore_errors=True)
        else:
            reference = ELECTRA_SCRIPT_CPU_S_PER_MB
            for key in ("obj_electra_ref_cpu_mb", "obj_electra_vs_ref", "obj_electra_vs_ref_sentences"):
                res.notes[key] = " (recorded figure: set MLM_BENCH_ELECTRA_DIR to a checkout to measure it here)"
        res.add("obj_electra_cpu_mb", cpu["electra1"])
        res.add("obj_electra_line_cpu_mb", cpu["electraline1"])
        res.add("obj_electra_ref_cpu_mb", reference)
        res.add("obj_electra_vs_ref", reference / cpu["electraline1"])
        res.add("obj_electra_vs_ref_sentences", reference / cpu["electra1"])
        res.add("obj_roberta_none_cpu_mb", cpu["robertanone1"])
        res.add("obj_roberta_static_cpu_mb", cpu["robertastatic1"])
        res.add("obj_roberta_static10_cpu_mb", cpu["robertastatic10"])
        res.add("obj_roberta_none_vs_bert", BERT_SCRIPT_CPU_S_PER_MB[1] / cpu["robertanone1"])
        res.add("obj_roberta_static10_vs_bert", BERT_SCRIPT_CPU_S_PER_MB[10] / cpu["robertastatic10"])
        res.add("obj_albert10_cpu_mb", cpu["albert10"])
        res.add("obj_albert_vs_bert_worker", cpu["albert10"] / cpu["bert10"])
        res.add("fmt_parquet1_vs_tfrecord", cpu["parquet1"] / cpu["bert1"])
        res.add("fmt_parquet10_vs_tfrecord", cpu["parquet10"] / cpu["bert10"])
        res.add("fmt_megatron_vs_tokenize", cpu["megatron1"] / tokenize_cpu["megatron1"])
        for fmt in SAMPLE_FORMATS[1:]:
            res.add(f"fmt_{fmt}_tokens_vs_parquet", cpu[f"tok{fmt}1"] / cpu["tokparquet1"])
            res.add(f"fmt_{fmt}10_vs_parquet", cpu[f"{fmt}10"] / cpu["parquet10"])
    log("objectives: ALBERT against its reference script, once (the script takes ~1 CPU-minute per MB)")
    albert_section(s, tmp, res, content, vocabulary, fast)


def albert_section(s: Settings, tmp: Path, res: Results, content: bytes, vocabulary, fast) -> None:
    """ALBERT's worker and google-research/albert's script on the same first
    documents of the task (the script holds the corpus in memory and takes
    ~1 CPU-minute per MB at its defaults: a part of the task is enough)."""
    from bench.objectives_bench import ALBERT_SCRIPT_CPU_S_PER_MB as recorded
    from bench.objectives_bench import albert_checkout, albert_reference_cpu
    from bench.worker_bench import documents_of, processor, run_task, task_of
    from common.segmenters.sentences import Segmenter, split_segments

    checkout = albert_checkout()
    segmenter = Segmenter.BLINGFIRE
    cut = content.find(b"</doc>\n", (256 if s.quick else 1024) * 1024)
    subset = content if cut < 0 else content[:cut + len(b"</doc>\n")]
    path = tmp / "albert-input" / "input.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(subset)
    storage, task = task_of(path)
    megabytes = len(subset) / MB
    res.add("obj_albert_subset_mb", megabytes)
    sentences = [split_segments(lines, segmenter) for lines in documents_of(subset)]
    settings = {"128": (128, 10), "default": (512, 40)}
    for name, (seq, dupe) in settings.items():
        if fast is not None:
            fast.clear_cache()  # as in every other row: the worker starts each task with a cold cache
        proc = processor(vocabulary, tmp / "albert-out" / name, dupe, segmenter=segmenter, objective="albert",
                         objective_params={"max_seq_length": seq, "dupe_factor": dupe})
        worker_cpu = run_task(proc, storage, task).cpu_seconds / megabytes
        shutil.rmtree(tmp / "albert-out" / name, ignore_errors=True)
        if checkout is not None:
            reference = albert_reference_cpu(checkout, sentences, VOCAB, tmp / "albert-ref", seq, dupe) / megabytes
            shutil.rmtree(tmp / "albert-ref", ignore_errors=True)
        else:
            reference = recorded[(seq, dupe)]
        if name == "128":
            res.add("obj_albert_ref128_cpu_mb", reference)
            res.add("obj_albert128_vs_ref", reference / worker_cpu)
        else:
            res.add("obj_albert_ref_default_cpu_mb", reference)
            res.add("obj_albert_default_cpu_mb", worker_cpu)
            res.add("obj_albert_default_vs_ref", reference / worker_cpu)
    if checkout is None:
        for key in ("obj_albert_ref128_cpu_mb", "obj_albert128_vs_ref", "obj_albert_ref_default_cpu_mb",
                    "obj_albert_default_vs_ref"):
            res.notes[key] = " (recorded figure: set MLM_BENCH_ALBERT_DIR to a checkout to measure it here)"


def job_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    """The whole job (every process) of each recipe and its own reference script, marginal CPU per MB on the same
    corpus (10 copies of the sample, 20.7 MB, but ALBERT's d=10 on 3, 6.2 MB: ``Recipe.copies``; quick:
    the cut sample), one-document runs subtracted, the two sides alternated, the least of each run over the rounds
    kept (bench/whole_job.py).  ``MLM_BENCH_JOB_RECIPES`` (comma-separated, BERT always among them) runs some
    recipes only: BERT's alone is ~10 minutes with its reference, all three ~25."""
    from bench import whole_job
    from bench.objectives_bench import albert_checkout, electra_checkout
    from bench.worker_bench import documents_of
    from common.segmenters.sentences import Segmenter, split_segments

    work = tmp / "job"
    known = [recipe.name for recipe in whole_job.RECIPES]
    chosen = {"bert", *(name for name in os.environ.get("MLM_BENCH_JOB_RECIPES", ",".join(known)).split(",") if name)}
    if chosen - set(known):
        raise ValueError(f"MLM_BENCH_JOB_RECIPES: unknown {', '.join(sorted(chosen - set(known)))}; "
                         f"of {', '.join(known)}")
    recipes = {recipe.name: recipe for recipe in whole_job.RECIPES if recipe.name in chosen}
    fulls = {copies: corpora.replicate(sources, work / f"full{copies}", 1 if s.quick else copies)
             for copies in sorted({recipe.copies(dupe) for recipe in recipes.values() for dupe in recipe.dupes})}
    one_bytes = corpora.truncated(sources[0][1], 1)
    one = work / "one" / "doc.txt"
    one.parent.mkdir(parents=True)
    one.write_bytes(one_bytes)
    for dupe in recipes["bert"].dupes:
        res.add(f"job{dupe}_input_mb", fulls[recipes["bert"].copies(dupe)].bytes / MB)
    checkouts = {"bert": whole_job.bert_checkout(), "albert": albert_checkout(), "electra": electra_checkout()}
    inputs = {(recipe.reference_input, recipe.copies(dupe)) for recipe in recipes.values() for dupe in recipe.dupes
              if checkouts[recipe.name] is not None}
    # BERT's job also runs on its reference's own input (one sentence a line: the text reader, --segmenter line),
    # the same file the script reads: the split the script never does is then out of both sides.
    inputs |= {("sentences", recipes["bert"].copies(dupe)) for dupe in recipes["bert"].dupes}
    text_recipe = dataclasses.replace(recipes["bert"], name="bert_text", flags=("--format", "text"))

    def reference_input(which: str, copies: int | None, unit: str) -> Path:
        """The file a reference reads (``which``: full or one), alone in its directory so a job can read it."""
        return work / f"ref-{which}{copies if which == 'full' else ''}-{unit}" / "corpus.txt"

    def texts_of(data: bytes, unit: str) -> list[list[str]]:
        documents = documents_of(data)
        return documents if unit == "lines" else [split_segments(lines, Segmenter.BLINGFIRE) for lines in documents]

    for unit, copies in inputs:  # the references' input: the worker's sentences, or the documents' lines
        whole_job.write_sentences([d for path in corpora.source_files(fulls[copies].root)
                                   for d in texts_of(path.read_bytes(), unit)], reference_input("full", copies, unit))
        whole_job.write_sentences(texts_of(one_bytes, unit), reference_input("one", None, unit))
    least: dict[str, float] = {}
    vocab = str(VOCAB)
    exact = whole_job.ALL_PROCESSES

    def prefix(recipe: whole_job.Recipe, dupe: int | None) -> str:
        """Row keys: BERT's as they always were (job10_...), the others' by name (job_albert10_, job_electra_)."""
        return "job" + ("" if recipe.name == "bert" else f"_{recipe.name}") + (str(dupe) if dupe else "")

    def keep(key: str, value: float) -> None:
        least[key] = min(least.get(key, math.inf), value)

    task_runs: list[list[whole_job.TaskCpu]] = []  # BERT d=1's full runs: the same bytes ten times over

    def job(recipe: whole_job.Recipe, data: Path, dupe: int | None, which: str) -> None:
        tasks: list[whole_job.TaskCpu] = []
        spent = whole_job.job_processes(data, work / "run", vocab, dupe, recipe.flags, tasks)
        if recipe.name == "bert" and dupe == 1 and which == "full":
            task_runs.append(tasks)
        log(f"job: {recipe.name} d={dupe} {which}: "
            + ", ".join(f"{role} {cpu:.2f}" for role, cpu in spent.items()) + " CPU-s")
        for role, cpu in spent.items():
            keep(f"{prefix(recipe, dupe)}_{which}_{role}", cpu)

    def run_reference(recipe: whole_job.Recipe, dupe: int | None, which: str) -> None:
        checkout = checkouts[recipe.name]
        corpus = reference_input(which, recipe.copies(dupe), recipe.reference_input)
        assert checkout is not None
        if recipe.name == "bert":
            cpu = whole_job.reference_cpu(checkout, corpus, work / "ref-run", vocab, dupe or 1)
        elif recipe.name == "albert":
            cpu = whole_job.albert_reference_cpu(checkout, corpus, work / "ref-run", vocab, dupe or 1)
        else:
            cpu = whole_job.electra_reference_cpu(checkout, corpus, work / "ref-run", vocab)
        log(f"job: {recipe.name} reference d={dupe} {which}: {cpu:.2f} CPU-s")
        keep(f"ref_{prefix(recipe, dupe)}_{which}", cpu)

    # The job's runs cost ~3 CPU-s and its fixed cost moves by ~0.4 s between runs: it gets 5 rounds; the
    # references (minutes a run) the issue's 2, or 1 where a run reads ten copies at d=10 (Recipe.reference_rounds).
    # Quick: BERT at both dupe factors, the others at their last only, d=1's one-document run standing for every
    # run's.
    for round_ in range(1 if s.quick else 5):
        for recipe in recipes.values():
            for dupe in recipe.dupes if not s.quick or recipe.name == "bert" else recipe.dupes[-1:]:
                with_reference = checkouts[recipe.name] is not None and round_ < recipe.reference_rounds(dupe)
                full = fulls[recipe.copies(dupe)]
                log(f"job: round {round_ + 1}, {recipe.name} d={dupe}, {full.bytes / MB:.1f} MB: the job"
                    + (", the reference" if with_reference else "") + ", each then on one document")
                job(recipe, full.root, dupe, "full")
                if recipe.name == "bert":
                    job(text_recipe, reference_input("full", recipe.copies(dupe), "sentences").parent, dupe, "full")
                if with_reference:
                    run_reference(recipe, dupe, "full")
                if not s.quick or (recipe.name == "bert" and dupe == 1):
                    job(recipe, one.parent, dupe, "one")
                    if recipe.name == "bert":
                        job(text_recipe, reference_input("one", None, "sentences").parent, dupe, "one")
                if with_reference:
                    run_reference(recipe, dupe, "one")
    if s.quick:
        standing = {key[len("job1_one"):]: value for key, value in least.items() if key.startswith("job1_one")}
        for recipe in recipes.values():
            for dupe in recipe.dupes:
                least.update({f"{prefix(recipe, dupe)}_one{rest}": value for rest, value in standing.items()})
        least[f"{prefix(text_recipe, 10)}_one_{exact}"] = least[f"{prefix(text_recipe, 1)}_one_{exact}"]
    recorded: dict[str, dict[Any, float]] = {  # by dupe factor (ELECTRA's: None, it has none)
        "bert": whole_job.BERT_SCRIPT_MARGINAL_CPU_S_PER_MB,
        "albert": whole_job.ALBERT_SCRIPT_MARGINAL_CPU_S_PER_MB,
        "electra": {None: whole_job.ELECTRA_SCRIPT_MARGINAL_CPU_S_PER_MB}}
    for recipe in recipes.values():
        for dupe in recipe.dupes:
            megabytes = (fulls[recipe.copies(dupe)].bytes - len(one_bytes)) / MB
            key = prefix(recipe, dupe)
            if f"{key}_full_{exact}" not in least:
                key_full = f"{prefix(recipe, recipe.dupes[-1])}_full_{exact}"  # quick: the dupe factor it ran
                least[f"{key}_full_{exact}"] = least[key_full]
            cpu = whole_job.Marginal(least[f"{key}_full_{exact}"], least[f"{key}_one_{exact}"], megabytes).per_mb
            if checkouts[recipe.name] is not None and f"ref_{key}_full" in least:
                script = whole_job.Marginal(least[f"ref_{key}_full"], least[f"ref_{key}_one"], megabytes).per_mb
            else:
                script = recorded[recipe.name][dupe]
                variable = {"bert": "MLM_BENCH_BERT_DIR", "albert": "MLM_BENCH_ALBERT_DIR",
                            "electra": "MLM_BENCH_ELECTRA_DIR"}[recipe.name]
                for row in (f"{key}_ref_cpu_mb", f"{key}_vs_ref"):
                    res.notes[row] = f" (recorded figure: set {variable} to a checkout to measure it here)"
            res.add(f"{key}_cpu_mb", cpu)
            res.add(f"{key}_ref_cpu_mb", script)
            res.add(f"{key}_vs_ref", script / cpu)
    # The copies are the same bytes, so every task past the first copy (whose words fill the tokenizer's cache)
    # is the same work: how its CPU spreads within one run is the machine's noise, not the code's.
    every = [task for tasks in task_runs for task in tasks]
    warm = [task.per_mb for task in every if not task.source.startswith("r00000/")] or [t.per_mb for t in every]
    if warm:  # quick: one copy, so every task, within the first copy's cold cache
        res.add("job1_task_cpu_least", min(warm))
        res.add("job1_task_cpu_median", statistics.median(warm))
        res.add("job1_task_cpu_most", max(warm))
    for dupe in (10, 1):  # the job on the reference's input, over the same MB as the reference (WikiExtractor's)
        megabytes = (fulls[recipes["bert"].copies(dupe)].bytes - len(one_bytes)) / MB
        cpu = whole_job.Marginal(least[f"{prefix(text_recipe, dupe)}_full_{exact}"],
                                 least[f"{prefix(text_recipe, dupe)}_one_{exact}"], megabytes).per_mb
        res.add(f"job_text{dupe}_cpu_mb", cpu)
        res.add(f"job_text{dupe}_vs_ref", res.samples[f"job{dupe}_ref_cpu_mb"][-1] / cpu)
        for row in (f"job_text{dupe}_vs_ref",):
            if f"job{dupe}_ref_cpu_mb" in res.notes:
                res.notes[row] = res.notes[f"job{dupe}_ref_cpu_mb"]
    for dupe in (10, 1):
        megabytes = (fulls[recipes["bert"].copies(dupe)].bytes - len(one_bytes)) / MB
        for role in whole_job.ROLES:
            res.add(f"job{dupe}_{role}_cpu_mb", (least.get(f"job{dupe}_full_{role}", 0.0)
                                                 - least.get(f"job{dupe}_one_{role}", 0.0)) / megabytes)
    for role in whole_job.ROLES:
        res.add(f"job_fixed_{role}", least.get(f"job1_one_{role}", 0.0))
    res.add("job_fixed_all", least[f"job1_one_{exact}"])
    if s.quick:  # ~0.2 MB: the marginal is within the fixed cost's swing between runs (even below zero)
        for key in res.samples:
            if key.startswith("job") and not key.startswith(("job_fixed", "job_input")):
                res.notes[key] = res.notes.get(key, "") + " (quick: within the fixed cost's noise)"
    shutil.rmtree(work, ignore_errors=True)


def peers_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    """The tokens objective against Megatron-LM's, datatrove's and ModernBERT's converters on the same JSON Lines,
    three tokenizers (bench/peers.py): 10 copies of the sample (20 MB; ``--scale``), 2 rounds (``--repeats``);
    quick: the cut sample, 1; ``MLM_BENCH_PEERS_FAMILIES`` (comma-separated) runs some tokenizers only.  Its
    tables are printed after the main one (no row of its own: bench.guard holds every row of the default set)."""
    from bench import peers

    families = tuple(f for f in os.environ.get("MLM_BENCH_PEERS_FAMILIES", ",".join(peers.TARGETS)).split(",") if f)
    unknown = sorted(set(families) - set(peers.TARGETS))
    if unknown:
        raise ValueError(f"MLM_BENCH_PEERS_FAMILIES: unknown {', '.join(unknown)}; of {', '.join(peers.TARGETS)}")
    copies = 1 if s.quick else (s.worker_copies if s.worker_copies != 4 else 10)
    rounds = 1 if s.quick else (s.repeats if s.repeats != 3 else 2)
    outcome = peers.measure(sources, tmp / "peers", VOCAB, copies, rounds, families)
    res.tables.append(peers.markdown(outcome, families))
    shutil.rmtree(tmp / "peers", ignore_errors=True)


def ventilator_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench.roles import ventilator_alone

    vocab = str(VOCAB)
    runs = tmp / "runs"
    small = corpora.replicate(sources, tmp / "v-small", s.vent_small)
    log(f"ventilator: {small.bytes / MB:.0f} MB input (×{s.vent_small}), for memory at the smaller size")
    first = ventilator_alone(small.root, runs / "v-small", vocab, shared_fs=False, task_size="8M")
    shutil.rmtree(runs / "v-small")
    per_copy = small.bytes / s.vent_small
    copies = s.vent_big
    if not s.quick:  # at least 10× the ventilator's memory (with a margin)
        copies = max(copies, math.ceil(10 * 1.2 * first.peak_rss["ventilator"] / per_copy))
    big = corpora.replicate(sources, tmp / "v-big", copies)
    res.add("v_input_mb", big.bytes / MB)
    log(f"ventilator: {big.bytes / MB:.0f} MB input (×{copies})")
    peaks = {"ventilator": 0, "sink": 0}
    small_peaks = dict(first.peak_rss)  # a peak is a maximum: both sizes get as many runs to show theirs
    for repeat in range(s.repeats):
        log(f"ventilator: repeat {repeat + 1}/{s.repeats}")
        for mode, shared_fs in (("ship", False), ("range", True)):
            if repeat == 0 and mode == "ship":
                continue  # that is `first`
            again = ventilator_alone(small.root, runs / f"v-small-{mode}-{repeat}", vocab, shared_fs=shared_fs,
                                     task_size="8M")
            shutil.rmtree(runs / f"v-small-{mode}-{repeat}")
            small_peaks = {role: max(small_peaks[role], again.peak_rss[role]) for role in small_peaks}
        for mode, shared_fs in (("ship", False), ("range", True)):
            run = ventilator_alone(big.root, runs / f"v-{mode}-{repeat}", vocab, shared_fs=shared_fs, task_size="8M")
            shutil.rmtree(runs / f"v-{mode}-{repeat}")
            if run.tasks != big.files:
                raise RuntimeError(f"ventilator {mode}: {run.tasks} tasks handed out, expected {big.files}")
            res.add(f"v_{mode}_mb_s", run.bytes / MB / run.wall)
            res.add(f"v_{mode}_mb_cpu", run.bytes / MB / max(run.cpu, 1e-6))
            res.add(f"v_{mode}_tasks_s", run.tasks / run.wall)
            for role in peaks:
                peaks[role] = max(peaks[role], run.peak_rss[role])
        run = ventilator_alone(small.root, runs / f"v-small-{repeat}", vocab, shared_fs=False, task_size=s.small_task)
        shutil.rmtree(runs / f"v-small-{repeat}")
        res.add("v_small_tasks_s", run.tasks / run.wall)
        res.add("v_small_cpu_ms", run.cpu / run.tasks * 1000)
    res.notes["v_small_tasks_s"] = f" ({s.small_task}B tasks)"
    shutil.rmtree(big.root)
    shutil.rmtree(small.root)
    res.add("rss_small_mb", small.bytes / MB)
    res.add("rss_big_mb", big.bytes / MB)
    res.add("rss_big_over_vent", big.bytes / peaks["ventilator"])
    for role, short in (("ventilator", "vent"), ("sink", "sink")):
        res.add(f"rss_{short}_small", small_peaks[role] / MB)
        res.add(f"rss_{short}_big", peaks[role] / MB)
        res.add(f"rss_{short}_growth", peaks[role] / small_peaks[role] - 1)


def derived_ventilator_rows(res: Results) -> None:
    vent = res.value("v_ship_mb_cpu")
    for tok in TOKENIZERS:
        for dupe in (1, 10):
            worker = res.value(f"w{dupe}_{tok}_mb_cpu")
            if vent and worker:
                res.add(f"v_cpu_per_worker_{tok}{dupe}", 100 * worker / vent)
                res.notes[f"v_cpu_per_worker_{tok}{dupe}"] = f" (one core feeds ~{vent / worker:,.0f} workers)"


def sink_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench.roles import sink_flood

    data = corpora.replicate(sources, tmp / "s-corpus", 1)
    for repeat in range(s.repeats):
        log(f"sink: repeat {repeat + 1}/{s.repeats}, {s.flood_acks} acks")
        run = sink_flood(data.root, tmp / "runs" / f"s-{repeat}", str(VOCAB), s.flood_acks)
        shutil.rmtree(tmp / "runs" / f"s-{repeat}")
        res.add("s_acks_s", run.tasks / run.wall)
        res.add("s_cpu_ms_ack", run.cpu / run.tasks * 1000)
    shutil.rmtree(data.root)


def scaling_counts(cores: int) -> list[int]:
    """Worker counts for the scaling table: 1, 2, 4, ... below ``cores``, then ``cores`` itself."""
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    if cores > 1:
        counts.append(cores)
    return counts


def usable_cores() -> int:
    """The cores this process may run on (a cpuset or ``taskset`` leaves fewer than ``os.cpu_count()``)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pipeline_worker_counts(quick: bool, cores: int) -> list[int]:
    """The worker counts the pipeline section runs: 1 and 2 (its ``p_*`` rows) in the quick mode, CI's guard;
    else the scaling table's (:func:`scaling_counts`) with those."""
    return [1, 2] if quick else sorted(set(scaling_counts(cores)) | {1, 2})


@dataclass(frozen=True)
class ScalingPoint:
    """One ``python -m ventilator --workers N`` run of the scaling table."""
    workers: int
    wall_s: float
    steady_mb_s: float
    cpu_s: dict[str, float]  # by role: ventilator, sink, worker (and the worker supervisor, if any)

    def share(self, role: str) -> float:
        return self.cpu_s.get(role, 0.0) / max(sum(self.cpu_s.values()), 1e-9)


def scaling_table(points: list[ScalingPoint], vent_cpu_ms_task: float | None, task_bytes: int) -> str:
    """Markdown: wall-clock and steady speed-up over 1 worker at each count, each role's CPU share, and the
    workers one ventilator could feed by the scale simulation's CPU per task."""
    base = next((p for p in points if p.workers == 1), None)
    if base is None:
        return ""
    out = ["Scaling with cores (`python -m ventilator --workers N` on this machine, the pipeline section's input)",
           "", "| workers | wall s | wall speed-up | steady MB/s | steady speed-up | ventilator CPU | sink CPU | "
           "workers' CPU |", "|" + " --- |" * 8]
    for p in points:
        workers_cpu = p.share("worker") + p.share("worker supervisor")
        out.append(f"| {p.workers} | {p.wall_s:.1f} | {base.wall_s / p.wall_s:.2f}× | {p.steady_mb_s:.2f} | "
                   f"{p.steady_mb_s / base.steady_mb_s:.2f}× | {100 * p.share('ventilator'):.1f}% | "
                   f"{100 * p.share('sink'):.1f}% | {100 * workers_cpu:.1f}% |")
    out.append("")
    if vent_cpu_ms_task:
        tasks_s = 1000 / vent_cpu_ms_task
        per_worker = base.steady_mb_s * MB / task_bytes  # tasks/s
        default_tasks = base.steady_mb_s * MB / parse_size(DEFAULT_TASK_SIZE)
        out.append(f"Projected ceiling of one ventilator (scale section: {vent_cpu_ms_task:.2f} ms of its CPU per task "
                   f"handed out and confirmed): {tasks_s:,.0f} tasks/s. One worker here finishes {per_worker:.2f} "
                   f"tasks/s of {task_bytes // 1024:,} KiB, so one ventilator core feeds ~{tasks_s / per_worker:,.0f} "
                   f"such workers, or ~{tasks_s / default_tasks:,.0f} with the default {DEFAULT_TASK_SIZE}B tasks.")
    else:
        out.append("Projected ceiling of one ventilator: run the scale section too (`--only pipeline,scale`).")
    out.append("")
    return "\n".join(out)


def pipeline_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    """The one-machine command at 1, 2, 4, ... up to this machine's cores: steady-state speed, wall time and
    each role's share of the CPU; ``p_*`` rows compare 2 workers with 1."""
    from bench.roles import pipeline

    data = corpora.replicate(sources, tmp / "p-corpus", s.worker_copies)
    res.add("p_input_mb", data.bytes / MB)
    counts = pipeline_worker_counts(s.quick, usable_cores())
    whole_run = False
    points: dict[int, list[ScalingPoint]] = {n: [] for n in counts}
    for repeat in range(s.repeats):
        runs = {}
        for workers in counts:
            log(f"pipeline: repeat {repeat + 1}/{s.repeats}, {workers} worker(s), {data.bytes / MB:.1f} MB")
            work = tmp / "runs" / f"p{workers}-{repeat}"
            runs[workers] = pipeline(data.root, work, str(VOCAB), workers, task_size=s.pipe_task,
                                     dupe_factor=s.pipe_dupe)
            shutil.rmtree(work)
            points[workers].append(ScalingPoint(workers, runs[workers].wall, runs[workers].extra["steady_mb_s"],
                                                runs[workers].extra["cpu"]))
        res.add("p1_mb_s", runs[1].extra["steady_mb_s"])
        res.add("p2_mb_s", runs[2].extra["steady_mb_s"])
        res.add("p_scaling", runs[2].extra["steady_mb_s"] / runs[1].extra["steady_mb_s"])
        res.add("p_scaling_wall", runs[1].wall / runs[2].wall)
        whole_run |= not all(run.extra["steady_measured"] for run in runs.values())
    for key in ("p1_mb_s", "p2_mb_s"):
        res.notes[key] = f" ({s.pipe_task}B tasks)" if s.pipe_dupe == 10 else f" (d={s.pipe_dupe})"
        if whole_run:
            res.notes[key] += " (whole run: too short for a steady state)"
    # The median run of each count (by wall time) stands for it.
    res.scaling = [sorted(runs_of, key=lambda p: p.wall_s)[len(runs_of) // 2] for runs_of in points.values()]
    res.scaling_task_bytes = parse_size(s.pipe_task)
    shutil.rmtree(data.root)


def rss_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench.roles import pipeline

    peaks = []
    for copies in s.rss_worker_copies:
        data = corpora.replicate(sources, tmp / f"r-corpus-{copies}", copies, per_file=s.rss_worker_per_file)
        log(f"rss: 2 workers on {data.bytes / MB:.0f} MB ({data.files} files)")
        work = tmp / "runs" / f"r-{copies}"
        run = pipeline(data.root, work, str(VOCAB), 2, task_size="8M", dupe_factor=1)
        shutil.rmtree(work)
        shutil.rmtree(data.root)
        peaks.append(run.peak_rss["worker"])
        res.add("rss_worker_small_mb" if len(peaks) == 1 else "rss_worker_big_mb", data.bytes / MB)
    res.add("rss_worker_small", peaks[0] / MB)
    res.add("rss_worker_big", peaks[1] / MB)
    res.add("rss_worker_growth", peaks[1] / peaks[0] - 1)

    data = corpora.replicate(sources, tmp / "r-series", s.rss_series_copies, per_file=s.rss_worker_per_file)
    log(f"rss: one worker process, {data.files} tasks in a row ({data.bytes / MB:.0f} MB)")
    result = subprocess.run([sys.executable, "-m", "bench.worker_memory", str(data.root), str(VOCAB)],
                            capture_output=True, text=True, check=True, timeout=1800)
    shutil.rmtree(data.root)
    series = json.loads(result.stdout.strip().splitlines()[-1])
    warm = min(2, len(series) - 1)  # after the first tasks: caches filled, arenas grown
    res.add("rss_series_tasks", len(series))
    res.add("rss_series_first", series[0] / MB)
    res.add("rss_series_warm", series[warm] / MB)
    res.notes["rss_series_warm"] = f" (after task {warm + 1})"
    res.add("rss_series_last", series[-1] / MB)
    res.add("rss_series_growth", series[-1] / series[warm] - 1)


def _distinct_copies(sources, target: Path, copies: int, per_file: int) -> corpora.Corpus:
    """Like corpora.replicate, but every third word of copy ``c`` gets ``c``
    appended, so copies are not near-duplicates of each other (shingle
    Jaccard well under 0.1): the dedup job then costs what it costs on a
    corpus it removes little from, and the plain job has the same input."""
    import re

    word = re.compile(rb"\b([a-z]{3,})\b")
    target = Path(target)
    total = files = 0
    for group, first in enumerate(range(0, copies, per_file)):
        for relative, data in sources:
            path = target / f"r{group:05d}" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                for copy in range(first, min(first + per_file, copies)):
                    count = iter(range(10**9))
                    def mark(m, copy=copy, count=count):  # every third word of this copy made its own
                        return m.group(1) + b"x%d" % copy if next(count) % 3 == 0 else m.group(1)

                    piece = word.sub(mark, corpora.with_unique_ids(data, copy))
                    handle.write(piece)
                    total += len(piece)
            files += 1
    return corpora.Corpus(target, files, total)


def _children_cpu() -> float:
    """CPU seconds of this process's finished (waited-for) descendants: a job's every process."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def dedup_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench.roles import pipeline
    from bench.worker_bench import WIKIEXTRACTOR, task_of
    from common.readers import ParseReport
    from common.steps.dedup import stages
    from common.steps.dedup.keys import KeyMaker
    from common.steps.dedup.settings import DedupSettings
    from common.storage import LocalStorage

    # The signature stage in this process: what a worker does with one signature task.
    content = corpora.replicated_bytes(sources, s.worker_copies)
    path = tmp / "dedup-input" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    storage, task = task_of(path)
    res.add("dd_sig_input_mb", len(content) / MB)
    for mode in ("minhash", "exact"):
        settings = DedupSettings(mode=mode, partitions=4).resolved(0)
        maker = KeyMaker(settings)
        output = LocalStorage(str(tmp / f"dedup-sig-{mode}"))
        for repeat in range(s.repeats + 1):  # the first run warms the word-hash cache: not counted
            cpu = time.process_time()
            payload = WIKIEXTRACTOR.read(storage, task)
            documents = list(WIKIEXTRACTOR.documents(task, payload, ParseReport()))
            stages.write_signatures(output, settings, maker, stages.signature_task(task), documents)
            if repeat:
                res.add(f"dd_sig_{mode}", len(content) / MB / (time.process_time() - cpu))
        log(f"dedup: signature stage ({mode}) on {len(content) / MB:.1f} MB")
    shutil.rmtree(path.parent)

    # Whole jobs: CPU of every process, plain vs dedup, on the same input.
    data = _distinct_copies(sources, tmp / "dd-corpus", max(2, s.worker_copies), per_file=1)
    data_mb = data.bytes / MB
    res.add("dd_job_input_mb", data_mb)
    task_size = s.pipe_task
    cpu_run_peaks: dict[str, dict[str, int]] = {}
    for repeat in range(s.repeats):
        job_cpu: dict[str, float] = {}
        for name, extra in (("plain", ()), ("minhash", ("--dedup", "minhash")), ("exact", ("--dedup", "exact"))):
            log(f"dedup: repeat {repeat + 1}/{s.repeats}, {name} job, {data.bytes / MB:.1f} MB")
            work = tmp / "runs" / f"dd-{name}-{repeat}"
            before = _children_cpu()
            run = pipeline(data.root, work, str(VOCAB), 2, task_size=task_size, dupe_factor=1, extra=extra)
            job_cpu[name] = _children_cpu() - before
            cpu_run_peaks[name] = run.peak_rss
            shutil.rmtree(work)
        res.add("dd_job_cpu_plain", job_cpu["plain"])
        res.add("dd_job_cpu_minhash_ratio", job_cpu["minhash"] / job_cpu["plain"])
        res.add("dd_job_cpu_exact_ratio", job_cpu["exact"] / job_cpu["plain"])
    shutil.rmtree(data.root)

    # Peak RSS of each role of a dedup job at two input sizes (8 MiB tasks, as the rss section).  The
    # quick mode (CI: only that every row is produced) takes the smaller size's from the runs above.
    peaks, plain_peaks = [], []
    sizes: tuple[int, ...] = s.rss_worker_copies
    if s.quick:
        peaks.append(cpu_run_peaks["minhash"])
        plain_peaks.append(cpu_run_peaks["plain"])
        res.add("dd_rss_small_mb", data_mb)
        sizes = sizes[1:]
    for copies in sizes:
        data = _distinct_copies(sources, tmp / f"dd-rss-{copies}", copies, per_file=s.rss_worker_per_file)
        for extra, found in ((("--dedup", "minhash"), peaks), ((), plain_peaks)):
            log(f"dedup: RSS of a {'minhash' if extra else 'plain'} job on {data.bytes / MB:.0f} MB")
            work = tmp / "runs" / f"dd-rss-{copies}"
            run = pipeline(data.root, work, str(VOCAB), 2, task_size="8M", dupe_factor=1, extra=extra)
            shutil.rmtree(work)
            found.append(run.peak_rss)
        shutil.rmtree(data.root)
        res.add("dd_rss_small_mb" if len(peaks) == 1 else "dd_rss_big_mb", data.bytes / MB)
    res.add("dd_rss_plain_worker_growth", plain_peaks[1]["worker"] / plain_peaks[0]["worker"] - 1)
    for role in ("ventilator", "sink", "worker"):
        res.add(f"dd_rss_{role}_small", peaks[0][role] / MB)
        res.add(f"dd_rss_{role}_big", peaks[1][role] / MB)
        res.add(f"dd_rss_{role}_growth", peaks[1][role] / peaks[0][role] - 1)


def readers_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench import readers_bench
    from bench.worker_bench import load_vocabulary

    vocabulary = load_vocabulary(str(VOCAB))
    inputs = readers_bench.make_inputs(corpora.replicated_bytes(sources, s.worker_copies), tmp / "readers")
    res.add("rd_input_mb", inputs.megabytes)
    runs = tmp / "runs"
    for repeat in range(s.repeats):
        log(f"readers: repeat {repeat + 1}/{s.repeats} ({inputs.megabytes:.1f} MB, WikiExtractor and Parquet)")
        cpu = {}
        for name, (storage, task) in (("wiki", inputs.wiki), ("parquet", inputs.parquet)):
            reader = "wikiextractor" if name == "wiki" else "parquet"
            proc = readers_bench.processor(vocabulary, reader, runs / f"rd-{name}-{repeat}", dupe_factor=1)
            proc.process(task, proc.reader.read(storage, task))  # warm: caches, imports
            shutil.rmtree(runs / f"rd-{name}-{repeat}")
            cpu[name], _documents = readers_bench.worker_cpu(proc, storage, task)
            shutil.rmtree(runs / f"rd-{name}-{repeat}")
            res.add(f"rd_{name}_mb_cpu", inputs.megabytes / cpu[name])
            alone, _ = readers_bench.read_and_parse_cpu(proc.reader, storage, task)
            res.add(f"rd_read_{name}_mb_cpu", inputs.megabytes / alone)
        res.add("rd_parquet_overhead", cpu["parquet"] / cpu["wiki"] - 1)
    count = 50 if s.quick else 1000
    log(f"readers: writing {count} Parquet files, then planning them")
    directory = readers_bench.many_files(tmp / "readers-many", count)
    for _repeat in range(s.repeats):
        wall, plan_cpu, _tasks = readers_bench.planning_seconds(directory)
        res.add("rd_plan_files", count)
        res.add("rd_plan_s", wall)
        res.add("rd_plan_ms_file", plan_cpu / count * 1000)
    shutil.rmtree(directory)
    shutil.rmtree(tmp / "readers")


def chinese_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench import chinese_bench

    vocabulary = chinese_bench.chinese_vocabulary(str(VOCAB), tmp)
    megabytes = chinese_bench.make_corpus(tmp / "zh", 0.3 if s.quick else 4.0)
    res.add("zh_input_mb", megabytes)
    for repeat in range(s.repeats):
        log(f"chinese: repeat {repeat + 1}/{s.repeats} ({megabytes:.1f} MB, with and without --word-segmenter)")
        res.add("zh_words_cpu_mb", chinese_bench.segmentation_cpu_per_mb(megabytes))
        without, _ = chinese_bench.task_cpu(vocabulary, tmp / "zh", tmp / "runs" / f"zh-{repeat}", "none")
        with_words, _ = chinese_bench.task_cpu(vocabulary, tmp / "zh", tmp / "runs" / f"zh-w-{repeat}", "jieba")
        res.add("zh_worker_cpu_mb", without / megabytes)
        res.add("zh_worker_words_cpu_mb", with_words / megabytes)
        res.add("zh_words_ratio", with_words / without)
    shutil.rmtree(tmp / "zh")


def extras_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench import extras
    from bench.worker_bench import WIKIEXTRACTOR, documents_of, load_vocabulary, split_all
    from common.readers import ParseReport
    from common.tokenization.fast_wordpiece import make_fast_encoder

    for repeat in range(s.repeats):
        log(f"extras: imports, repeat {repeat + 1}/{s.repeats}")
        if extras.installed("tensorflow"):
            cost = extras.import_cost("import tensorflow")
            res.add("tf_import_s", cost["seconds"])
            res.add("tf_import_rss", cost["max_rss"] / MB)
        cost = extras.import_cost("import worker.cli")
        res.add("worker_import_s", cost["seconds"])
        res.add("worker_import_rss", cost["max_rss"] / MB)

    content = b"".join(data for _, data in sources)
    documents = list(WIKIEXTRACTOR.parse(content, 0, ParseReport()))
    paragraphs = extras.paragraphs_of(documents)
    sample = extras.take_bytes(paragraphs, s.pysbd_bytes)
    for repeat in range(s.repeats):
        log(f"extras: sentence splitters, repeat {repeat + 1}/{s.repeats}")
        blingfire = extras.text_bytes(paragraphs) / MB / extras.blingfire_cpu(paragraphs)
        res.add("split_blingfire", blingfire)
        if extras.installed("pysbd"):
            pysbd = extras.text_bytes(sample) / MB / extras.pysbd_cpu(sample)
            res.add("split_pysbd", pysbd)
            res.add("split_ratio", blingfire / pysbd)

    vocabulary = load_vocabulary(str(VOCAB))
    segments = split_all(documents_of(content))
    megabytes = sum(len(t.encode()) for t in segments) / MB
    fast = make_fast_encoder(vocabulary.to_json())
    kitoken = extras.kitoken_encoder(vocabulary.to_json()) if extras.installed("kitoken") else None
    for repeat in range(s.repeats):
        log(f"extras: tokenizer candidates, repeat {repeat + 1}/{s.repeats}")
        cpu = time.process_time()
        vocabulary.tokenizer.encode_batch(segments, add_special_tokens=False)
        res.add("cand_hf", megabytes / (time.process_time() - cpu))
        if fast is not None and hasattr(fast, "clear_cache"):
            fast.clear_cache()
            cpu = time.process_time()
            fast(segments)
            res.add("cand_nanotoken_cold", megabytes / (time.process_time() - cpu))
            cpu = time.process_time()
            fast(segments)
            res.add("cand_nanotoken_warm", megabytes / (time.process_time() - cpu))
        if kitoken is not None:
            cpu = time.process_time()
            kitoken(segments)
            res.add("cand_kitoken", megabytes / (time.process_time() - cpu))
    res.notes["cand_hf"] = f" ({megabytes:.1f} MB of segment text)"
    family_rows(s, res, segments, megabytes, vocabulary)


def family_rows(s: Settings, res: Results, segments: list[str], megabytes: float, wordpiece) -> None:
    """Each tokenizer family's encode_many alone on the same segments (tokenizers trained on them first)."""
    from bench import extras
    from common.tokenization import Vocabulary
    from common.tokenization.training import train_bpe, train_unigram
    from tests.support.tokenizer_families import modernbert_like

    lines = segments[:2000] if s.quick else segments
    size = 1000 if s.quick else 8000
    log(f"extras: training a BPE and a Unigram tokenizer of {size} pieces for the family rows")
    bpe = Vocabulary.from_tokenizer(train_bpe(lines, size, do_lower_case=False))
    modernbert = Vocabulary.from_tokenizer(modernbert_like(lines, size))
    unigram = Vocabulary.from_tokenizer(train_unigram(lines[:4000], size, do_lower_case=True))
    spm_model = spm = None
    if extras.installed("sentencepiece"):
        import io

        import sentencepiece
        from tokenizers import Tokenizer

        from common.tokenization.sentencepiece_conversion import convert

        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines[:4000]), model_writer=model, vocab_size=size, model_type="unigram",
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols="[CLS],[SEP],[MASK]", minloglevel=2,
            num_threads=1)
        spm = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue(), num_threads=1)
        spm_model = Vocabulary.from_tokenizer(Tokenizer.from_str(convert(model.getvalue())))

    for vocabulary in (wordpiece, bpe, modernbert, unigram, spm_model):
        if vocabulary is not None:
            vocabulary._fast_encoder()  # made (and checked against HF) once per worker, not per task: not timed

    def rate(encode) -> float:
        cpu = time.process_time()
        encode(segments)
        return megabytes / (time.process_time() - cpu)

    for repeat in range(s.repeats):
        log(f"extras: tokenizer families, repeat {repeat + 1}/{s.repeats}")
        res.add("fam_wordpiece", rate(wordpiece.encode_many))
        hf = rate(lambda texts: bpe._encode_hf(texts, with_words=False))
        worker = rate(bpe.encode_many)
        res.add("fam_bpe_hf", hf)
        res.add("fam_bpe", worker)
        res.add("fam_bpe_ratio", worker / hf)
        hf = rate(lambda texts: modernbert._encode_hf(texts, with_words=False))
        worker = rate(modernbert.encode_many)
        res.add("fam_modernbert_hf", hf)
        res.add("fam_modernbert", worker)
        res.add("fam_modernbert_ratio", worker / hf)
        hf = rate(lambda texts: unigram._encode_hf(texts, with_words=False))
        worker = rate(unigram.encode_many)
        res.add("fam_unigram_hf", hf)
        res.add("fam_unigram", worker)
        res.add("fam_unigram_ratio", worker / hf)
        if spm_model is not None and spm is not None:  # made together
            res.add("fam_spm_hf", rate(lambda texts: spm_model._encode_hf(texts, with_words=False)))
            res.add("fam_spm", rate(spm_model.encode_many))
            res.add("fam_spm_native", rate(lambda texts: spm.encode(texts, num_threads=1)))
    for row, vocabulary in (("fam_bpe", bpe), ("fam_modernbert", modernbert)):
        fast = vocabulary._fast_encoder()
        res.notes[row] = f" ({fast.name})" if fast is not None else " (HF: no faster encoder is exact here)"


def loader_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench.loader_bench import measure
    from bench.roles import pipeline

    work = tmp / "runs" / "l-data"
    data = corpora.replicate(sources, tmp / "l-corpus", 1)
    pipeline(data.root, work, str(VOCAB), 2, task_size="256K", dupe_factor=2)
    output = work / "out"
    records = sum(json.loads(line)["records"] for line in (output / "manifest.jsonl").read_text().splitlines())
    res.add("l_records", records)
    for repeat in range(s.repeats):
        for ranks in (1, 8):
            for masked in (False, True):
                key = f"l{ranks}{'m' if masked else ''}"
                masks = "dynamic" if masked else "stored"
                log(f"loader: repeat {repeat + 1}/{s.repeats}, {ranks} rank(s), {masks} masks")
                run = measure(output, tmp / "runs" / key, ranks, max(1, s.loader_batches // ranks), masked, str(VOCAB))
                res.add(f"{key}_mb_s", run.bytes / MB / run.wall)
                res.add(f"{key}_batches_s", run.batches / run.wall)
                res.add(f"{key}_seq_cpu", run.sequences / max(run.server_cpu, 0.01))
                res.add(f"{key}_client_ms", run.client_cpu / run.batches * 1000)
                if key == "l8":
                    res.add("l_mb_cpu", run.bytes / MB / max(run.server_cpu, 0.01))
    mixture_rows(s, tmp, res, output, sources)
    shutil.rmtree(data.root)
    # Memory: the same cache on a larger output (more copies of the corpus), one epoch each.
    copies = 2 if s.quick else 6
    big = corpora.replicate(sources, tmp / "l-corpus-big", copies)
    pipeline(big.root, tmp / "runs" / "l-big", str(VOCAB), 2, task_size="256K", dupe_factor=2)
    shutil.rmtree(big.root)
    big_output = tmp / "runs" / "l-big" / "out"
    peaks = {}
    for name, where in (("small", output), ("big", big_output)):
        count = sum(json.loads(line)["records"] for line in (where / "manifest.jsonl").read_text().splitlines())
        res.add(f"l_rss_{name}_records", count)
        log(f"loader: peak RSS serving {count:,} records")
        run = measure(where, tmp / "runs" / f"l-rss-{name}", 1, -(-count // 256), False, str(VOCAB),
                      server_args=("--cache-mb", 16, "--shuffle-window", 4096))
        peaks[name] = run.server_peak_rss
        res.add(f"l_rss_{name}", peaks[name] / MB)
    res.add("l_rss_growth", peaks["big"] / peaks["small"] - 1)


def mixture_rows(s: Settings, tmp: Path, res: Results, output: Path, sources) -> None:
    """The output cut into 3 outputs of 1/6, 2/6 and 3/6 of its tasks, mixed (--temperature 0.3), against the
    output alone: the same records either way; the server's tokens per CPU-second, 8 ranks, stored masks, in turn
    in each repeat."""
    from bench.loader_bench import measure, split_output
    from bench.roles import pipeline

    lines = (output / "manifest.jsonl").read_text().splitlines()
    if sum((json.loads(line).get("records") or 0) > 0 for line in lines) < 3:  # a --quick output: 2 tasks of 256K
        data = corpora.replicate(sources, tmp / "l-mix-corpus", 1)
        pipeline(data.root, tmp / "runs" / "l-mix-data", str(VOCAB), 2, task_size="64K", dupe_factor=2)
        shutil.rmtree(data.root)
        output = tmp / "runs" / "l-mix-data" / "out"
    parts = split_output(output, tmp / "runs" / "l-mix-parts")
    mixed = ("--data", parts[1], "--data", parts[2], "--temperature", 0.3)
    for repeat in range(s.repeats):
        for name, extra in (("one", ()), ("mix", mixed)):
            log(f"loader: repeat {repeat + 1}/{s.repeats}, 8 ranks, {'3 sources' if extra else 'one source'}")
            run = measure(parts[0] if extra else output, tmp / "runs" / f"l-{name}", 8,
                          max(1, s.loader_batches // 8), False, str(VOCAB), server_args=extra)
            res.add(f"l_{name}_tok_cpu", run.sequences * 128 / max(run.server_cpu, 0.01))
    one, mix = res.value("l_one_tok_cpu"), res.value("l_mix_tok_cpu")
    if one and mix:
        res.add("l_mix_ratio", mix / one)
    shutil.rmtree(tmp / "runs" / "l-mix-parts")


def batches_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    """--batch-tokens: padding waste against fixed padding, packing cost, serving speed to 8 ranks."""
    from bench import token_batches_bench as tb

    lengths = tb.web_lengths(20_000 if s.quick else 200_000)
    for context in (1024, 8192):
        pieces = tb.chunked(lengths, context)
        for layout in ("flat", "padded"):
            res.add(f"tb_waste_{layout}_{context}", tb.packed_waste(pieces, context, layout))
        res.add(f"tb_waste_fixed_{context}", tb.fixed_waste(pieces, context))
    for context in (4096, 8192):  # real documents: each article cut by the tokens objective itself
        output = tb.make_output(WIKI, tmp / "runs" / f"tb-wiki-{context}", str(VOCAB), "--max-seq-length",
                                str(context))
        pieces = tb.output_lengths(output)
        for layout in ("flat", "padded"):
            res.add(f"tb_wiki_waste_{layout}_{context}", tb.packed_waste(pieces, context, layout))
        res.add(f"tb_wiki_fixed_{context}", tb.fixed_waste(pieces, context))
        res.add(f"tb_wiki_samples_{context}", len(pieces))
    pieces = tb.chunked(lengths, 8192)
    started = time.process_time()
    tb.packed_waste(pieces, 8192, "flat")
    res.add("tb_pack_s", (time.process_time() - started) / len(pieces) * 1e6)
    corpus = tb.web_like_corpus(sources, tmp / "tb-corpus" / "web.txt", 4)  # quick: >= 8 batches still
    output = tb.make_output(corpus, tmp / "runs" / "tb-data", str(VOCAB))
    shutil.rmtree(corpus.parent)
    res.add("tb_samples", sum(json.loads(line)["records"]
                              for line in (output / "manifest.jsonl").read_text().splitlines()))
    per_rank = 10 if s.quick else 100
    for repeat in range(s.repeats):
        for masked in (True, False):
            log(f"batches: repeat {repeat + 1}/{s.repeats}, 8 ranks, flat 8,192, {'masked' if masked else 'unmasked'}")
            run = tb.measure(output, tmp / "runs" / f"tb-{masked}", 8, per_rank, str(VOCAB), masked=masked)
            if masked:
                res.add("tb8_tok_s", run.tokens / run.wall / 8)
                res.add("tb8_tok_cpu", run.tokens / max(run.server_cpu, 0.01))
                res.add("tb8_client_ms", run.client_cpu / run.batches * 1000)
            else:
                res.add("tb8u_tok_cpu", run.tokens / max(run.server_cpu, 0.01))


def report_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench.report_bench import enlarge, run_report
    from bench.roles import pipeline

    data = corpora.replicate(sources, tmp / "rep-corpus", 1)
    pipeline(data.root, tmp / "runs" / "rep", str(VOCAB), 2, task_size="256K", dupe_factor=2)
    shutil.rmtree(data.root)
    base = tmp / "runs" / "rep" / "out"
    size = enlarge(base, tmp / "runs" / "rep-big", (32 << 20) if s.quick else (1 << 30))
    res.add("rep_gb", size / 1e9)
    for repeat in range(s.repeats):
        log(f"report: repeat {repeat + 1}/{s.repeats}, {size / 1e9:.2f} GB output")
        small, _ = run_report(base)
        wall, report = run_report(tmp / "runs" / "rep-big")
        res.add("rep_s", wall)
        res.add("rep_read", report["sample"]["bytes_read"] / report["sample"]["bytes_total"])
        res.add("rep_small_s", small)
        res.add("rep_ratio", wall / small)


def scale_section(s: Settings, tmp: Path, res: Results, sources) -> None:
    from bench import scale

    points = scale.run_all(scale.Plan.make(s.quick), tmp / "runs" / "scale", str(VOCAB), log=log)
    most_workers = max(points["throughput"], key=lambda p: (p["workers"], -p["tasks"]))
    res.add("sc_grants_s", most_workers["grants_s"])
    res.notes["sc_grants_s"] = f" ({most_workers['workers']:,} workers, {most_workers['tasks']:,} tasks)"
    res.add("sc_vent_cpu_ms", most_workers["ventilator_cpu_ms_task"])
    res.add("sc_sink_cpu_ms", most_workers["sink_cpu_ms_task"])
    largest = max(points["plan"], key=lambda p: p["tasks"])
    res.add("sc_plan_s", largest["plan_s"])
    res.add("sc_plan_rss_mb", largest["ventilator_rss_mb"])
    res.notes["sc_plan_s"] = res.notes["sc_plan_rss_mb"] = f" ({largest['tasks']:,} tasks)"
    largest = max(points["resume"], key=lambda p: p["tasks"])
    res.add("sc_resume_s", largest["resume_s"])
    res.notes["sc_resume_s"] = f" ({largest['tasks']:,} lines)"
    busiest = max(points["heartbeats"], key=lambda p: p["workers"])
    res.add("sc_heartbeat_core", busiest["ventilator_core"])
    res.notes["sc_heartbeat_core"] = f" ({busiest['workers']:,} workers every {busiest['heartbeat_s']:g} s)"
    lost = points["loss"][0]
    res.add("sc_loss_late_s", lost["requeued_after_s"] - lost["lease_s"])
    res.add("sc_loss_handed_out_s", lost["handed_out_after_s"])
    res.notes["sc_loss_late_s"] = (f" ({lost['vanished']:,} of {lost['workers']:,} workers holding {lost['held']:,} "
                                   f"tasks, lease {lost['lease_s']:g} s; manifest: each task once)")
    res.tables.append(scale.curves(points))


SECTION_FUNCTIONS = {"worker": worker_section, "objectives": objectives_section, "job": job_section,
                     "ventilator": ventilator_section,
                     "sink": sink_section, "pipeline": pipeline_section, "rss": rss_section, "readers": readers_section,
                     "dedup": dedup_section, "chinese": chinese_section,
                     "extras": extras_section, "loader": loader_section, "batches": batches_section,
                     "report": report_section,
                     "scale": scale_section, "peers": peers_section}


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

def _section_of(key: str) -> str:
    if key.startswith("job"):
        return "job"
    if key.startswith("sc_"):
        return "scale"
    if key.startswith("tb"):
        return "batches"
    if key.startswith("rep_"):
        return "report"
    if key.startswith("dd_"):
        return "dedup"
    if key.startswith("l") and key[1:2] in ("_", "1", "8"):
        return "loader"
    if key.startswith(("obj_", "fmt_")):
        return "objectives"
    if key.startswith(("w", "tok", "out", "fast", "stage", "ratio_")) and not key.startswith("worker_"):
        return "worker"
    if key.startswith("v_"):
        return "ventilator"
    if key.startswith("s_"):
        return "sink"
    if key.startswith("p"):
        return "pipeline"
    if key.startswith("rd_"):
        return "readers"
    if key.startswith("zh_"):
        return "chinese"
    if key.startswith(("rss_worker", "rss_series")):
        return "rss"
    if key.startswith("rss"):
        return "ventilator"
    return "extras"


def render(res: Results, s: Settings, command: str, elapsed: float, ran: list[str]) -> str:
    from bench import extras

    load = os.getloadavg()
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
        f"Python {platform.python_version()}, load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
        f"{'quick mode (tiny inputs: numbers mean little)' if s.quick else 'full mode'}, "
        f"median of {s.repeats} repeat(s), {elapsed:.0f} s in all.",
        "",
        "| Metric | Value | Target | Meets target |",
        "| --- | --- | --- | --- |",
    ]
    for row in ROWS:
        section = _section_of(row.key)
        value = res.value(row.key)
        if value is not None:
            text = row.fmt.format(value) + res.notes.get(row.key, "")
            verdict = ("yes" if row.meets(value) else "no") if row.meets else ""
        elif section not in ran:
            text, verdict = "not run (--only)", ""
        elif section in res.errors:
            text, verdict = f"error: {res.errors[section]}", ""
        elif missing := [m for m in row.needs if not extras.installed(m)]:
            text, verdict = f"n/a: {', '.join(missing)} not installed", ""
        else:
            text, verdict = "n/a", ""
        lines.append(f"| {row.metric} | {text} | {row.target} | {verdict} |")
    lines += ["", "Worker CPU by stage, CPU-s per input MB (share of the task's CPU):", "",
              "| Worker | " + " | ".join(STAGE_NAMES.values()) + " |",
              "| --- |" + " --- |" * len(STAGE_NAMES)]
    for tok, dupe, label in STAGE_ROWS:
        values = [res.value(f"stage_{tok}{dupe}_{stage}") for stage in STAGE_NAMES]
        present = [v for v in values if v is not None]
        if len(present) < len(values):
            cells = ["n/a"] * len(values)
        else:
            total = sum(present) or 1.0
            cells = [f"{v:.3f} ({v / total:.0%})" for v in present]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Worker stage CPU / its reference's CPU on the same text, the least of each over rounds that "
              "alternate them (bench/ratios.py: Bling Fire alone for the split, the tokenizer alone for the rest; "
              "the regression guard's figures):", "",
              "| Worker | " + " | ".join(f"{STAGE_NAMES[stage]} / {against}" for stage, against in REFERENCES.items())
              + " |", "| --- |" + " --- |" * len(REFERENCES)]
    for tok, dupe, label in STAGE_ROWS:
        values = [res.value(ratio_key(f"{tok}{dupe}", stage)) for stage in REFERENCES]
        if any(v is not None for v in values):
            lines.append(f"| {label} | " + " | ".join("n/a" if v is None else f"{v:.3f}" for v in values) + " |")
    for table in res.tables:
        lines += ["", table]
    return "\n".join(lines) + "\n"


@click.command(context_settings={"help_option_names": ["-h", "--help"]},
               help="Benchmark every role of the pipeline (docs/benchmarks.md).")
@click.option("--quick", is_flag=True, help="Tiny inputs, one repeat: checks the benchmark runs.")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Repeats per measurement (median reported).")
@click.option("--scale", type=click.IntRange(min=1), default=None,
              help="Copies of the corpus in the worker's task and the pipeline's input (default 4: ~8 MB).")
@click.option("--markdown", type=click.Path(dir_okay=False), default=None, help="Also write the table to this file.")
@click.option("--only", default=",".join(SECTIONS), show_default=True, help="Sections to run, comma-separated.")
@click.option("--ratios", "ratios_out", type=click.Path(dir_okay=False), default=None,
              help="Also write the worker's stage ratios (bench/ratios.py) to this JSON file.")
@click.option("--record-ratios", is_flag=True,
              help="Record this run's worker stage ratios as the guard's figures (bench/ratios.json; --quick only).")
@click.pass_context
def main(ctx: click.Context, quick: bool, repeats: int | None, scale: int | None, markdown: str | None,
         only: str, ratios_out: str | None, record_ratios: bool) -> None:
    sections = [name.strip() for name in only.split(",") if name.strip()]
    unknown = sorted(set(sections) - set(SECTIONS) - set(OPTIONAL_SECTIONS))
    if unknown:
        raise click.BadParameter(f"unknown section(s): {', '.join(unknown)}; of "
                                 f"{', '.join(SECTIONS + OPTIONAL_SECTIONS)}",
                                 param_hint="--only")
    if record_ratios and (not quick or "worker" not in sections or repeats or scale):
        raise click.BadParameter("records the quick run's figures, as the suite measures them: use it with --quick "
                                 "and the worker section, without --repeats or --scale", param_hint="--record-ratios")
    if record_ratios:
        from bench import ratios
        from common import kernels

        if kernels.compiled is None:
            raise click.BadParameter(f"not recorded: {ratios.NO_KERNELS}", param_hint="--record-ratios")
    if not WIKI.is_dir() or not VOCAB.is_file():
        raise click.ClickException(f"needs ../shared (corpus and vocabulary) beside the repository: {SHARED} is absent")
    settings = Settings.make(quick, repeats, scale)
    compile_project()  # no run's CPU includes compiling the project (bench/procs.py)
    command = "python -m bench.run " + " ".join(sys.argv[1:])
    started = time.monotonic()
    res = Results()
    sources = corpora.load_sources(WIKI, settings.limit_per_file)
    with tempfile.TemporaryDirectory(prefix="mlm-bench-") as tmp:
        for name in SECTIONS + OPTIONAL_SECTIONS:
            if name not in sections:
                continue
            section_started = time.monotonic()
            try:
                SECTION_FUNCTIONS[name](settings, Path(tmp), res, sources)
                log(f"section {name}: {time.monotonic() - section_started:.0f} s")
            except Exception as error:  # report it in the table, go on with the other sections
                res.errors[name] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                log(f"{name} failed:\n{traceback.format_exc()}")
            shutil.rmtree(Path(tmp) / "runs", ignore_errors=True)
    derived_ventilator_rows(res)
    if res.scaling:
        res.tables.insert(0, scaling_table(res.scaling, res.value("sc_vent_cpu_ms"), res.scaling_task_bytes))
    table = render(res, settings, command.strip(), time.monotonic() - started, sections)
    print(table)
    if markdown:
        Path(markdown).write_text(table)
    measured = {name: statistics.median(values) for name, values in res.samples.items() if name.startswith("ratio_")}
    if ratios_out:
        Path(ratios_out).write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    if record_ratios and not res.errors:
        from bench import ratios

        load = os.getloadavg()[0]
        ratios.save(measured, f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load:.2f}")
        log(f"recorded {len(measured)} ratios in {ratios.RECORDED}")
    ctx.exit(1 if res.errors else 0)


if __name__ == "__main__":
    main(prog_name="python -m bench.run")
