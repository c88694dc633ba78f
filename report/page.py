"""report.json as one self-contained HTML page: inline CSS, plots as inline SVG, no script, no link out."""

from __future__ import annotations

import bisect
import datetime
import html

from report import plots
from report.unknown_text import code_points

#: The throughput plot's line of every worker together.
OVERALL = "all workers"

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:60em;color:#222;
padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .8em;border-bottom:1px solid #eee;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.problems{background:#fff0f0;border:2px solid #c00;padding:.5em 1em}.problems h2{color:#c00;border:0;margin:0}
.ok{background:#f0fff0;border:2px solid #080;padding:.5em 1em}.note{color:#666;font-size:.9em}
code{background:#f4f4f4;padding:0 .2em}svg{max-width:100%;height:auto}
"""


def _e(value) -> str:
    return html.escape(str(value))


def _n(value, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and digits:
        return f"{value:,.{digits}f}"
    return f"{value:,.0f}" if isinstance(value, (int, float)) else _e(value)


def _pct(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value * 100:.{digits}f}%"


#: summary.json's cost figures, in the table's order, with their units.
COST_LABELS = {"worker_hosts": "worker hosts", "instance_hours": "instance-hours",
               "worker_cpu_hours": "worker CPU-hours", "input_gb": "input (GB)",
               "output_tokens": "output tokens (padding included)",
               "output_tokens_without_padding": "output tokens without padding",
               "instance_hourly_price": "instance price (USD per hour)", "cost": "cost (USD)",
               "cost_per_billion_output_tokens": "USD per billion output tokens",
               "cost_per_billion_tokens_without_padding": "USD per billion tokens without padding",
               "cost_per_input_gb": "USD per input GB"}


def cost_value(key: str, value) -> str:
    """A summary's cost figure for people: money as dollars, hours and gigabytes to four significant digits,
    counts with thousands separators, an unknown one (None) as a dash."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None else _e(value)
    if "cost" in key or "price" in key:
        return f"${value:,.4f}" if abs(value) < 100 else f"${value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _figure(svg: str | None, missing: str) -> str:
    return f"<figure>{svg}</figure>" if svg else f"<p class=note>{_e(missing)}</p>"


def _records_read(read: dict) -> str:
    """"N training and M held-out": the records read on each side (the training side's first)."""
    from common.steps import side_named

    def label(side: str) -> str:
        known = side_named(side)
        return known.label if known is not None else side

    named = [f"{read.get('train', 0):,} training"] + [f"{n:,} {label(side)}" for side, n in read.items()
                                                        if side != "train"]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def _step_sections(report: dict) -> list[str]:
    """Each reporting step's section (``Step.report_section``): its counters, and its histogram."""
    from common.steps import reported_steps

    parts = []
    for step in reported_steps():
        spec = step.report_section
        if spec is None:
            continue
        parts.append(f"<h2>{_e(spec.title)}</h2>")
        section = report.get(step.name)
        if not section:
            parts.append(f"<p>{_e(spec.absent)}</p>")
            continue
        parts.append(_table(["counter", "value"], [[_e(k), _n(v)] for k, v in section["counters"].items()]))
        if spec.histogram and (section.get(spec.histogram) or {}).get("count"):
            parts.append(_figure(plots.histograms({"train": section[spec.histogram]}, spec.x_label, spec.y_label),
                                 ""))
    return parts


def _mixture_section(mixture: dict) -> list[str]:
    """Target and realized token shares per source and phase (the loader's plan of these outputs), and the
    shares over the clock."""
    parts = ["<h2 id=mixture>Mixture</h2>",
             f"<p>{len(mixture['sources'])} outputs served as one stream by <code>mlm-loader</code> with the same "
             f"flags: {_n(mixture['horizon_tokens'])} tokens planned (a mixture epoch is "
             f"{_n(mixture['epoch_tokens'])} tokens: one pass of {_e(mixture['anchor'])}). Shares are of tokens; "
             "a realized share may be off its target by the tolerance (records are whole).</p>"]
    rows = []
    for phase in mixture["phases"]:
        for name, share in phase["sources"].items():
            rows.append([_n(phase["phase"]), f"{_n(phase['from_tokens'])}–{_n(phase['to_tokens'])}", _e(name),
                         _pct(share["target"]), _pct(share["realized"]), _pct(share["tolerance"]),
                         _n(share["tokens"])])
    parts.append(_table(["phase", "tokens", "source", "target", "realized", "tolerance", "tokens served"], rows))
    curve = mixture["curve"]
    starts = [p["from_tokens"] for p in mixture["phases"]]
    targets = {name: [mixture["phases"][max(0, bisect.bisect_right(starts, c - 1) - 1)]["sources"][name]["target"]
                      for c in curve["clock"]] for name in mixture["sources"]}
    parts.append(_figure(plots.shares(curve["clock"], curve["shares"], targets, curve["phase_starts"]),
                         "No tokens planned."))
    return parts


def render(report: dict) -> str:
    parts = []
    objective = report.get("objective") or {}
    title = f"mlm-pipeline data report: {objective.get('name', '?')}, {report.get('format') or '?'}"
    parts.append(f"<h1>{_e(title)}</h1>")
    generated = datetime.datetime.fromtimestamp(report["generated_unix"], datetime.UTC)
    parts.append(f"<p class=note>{_e(report['output'])} · job {_e(report.get('job'))} · made "
                 f"{generated:%Y-%m-%d %H:%M} UTC in {report['seconds']:.1f} s</p>")
    if report["problems"]:
        items = "".join(f"<li>{_e(p)}</li>" for p in report["problems"])
        parts.append(f"<div class=problems id=problems><h2>This output has problems</h2><ul>{items}</ul>"
                     "<p>The numbers below come from what is there.</p></div>")
    else:
        parts.append("<div class=ok id=status>No problem found: the manifest is complete, every listed file is "
                     "there, no foreign file.</div>")

    sample = report["sample"]
    fraction = sample["bytes_read"] / sample["bytes_total"] if sample["bytes_total"] else 0
    parts.append("<h2>Sample</h2>")
    parts.append(f"<p id=sample>Read {sample['files_read']:,} of {sample['files_total']:,} files, "
                 f"{sample['bytes_read'] / 1e6:,.1f} of {sample['bytes_total'] / 1e6:,.1f} MB ({_pct(fraction, 1)}): "
                 f"{_records_read(sample['records_read'])} records. Counts below marked "
                 "<em>sampled</em> come from them; the others are the manifest's, exact.</p>")

    parts.append("<h2>Documents, sequences and tokens</h2>")
    sides = report["sides"]
    parts.append(_table(["side", "documents", "sequences", "tokens", "files", "MB"],
                        [[side, _n(v["documents"]), f"<span id=sequences-{side}>{_n(v['sequences'])}</span>",
                          _n(v["tokens"]), _n(v["files"]), _n(v["bytes"] / 1e6, 1)]
                         for side, v in sides.items() if side == "train" or v["files"]]))

    records = report["records"]
    parts.append("<h2>Sequence lengths <small>(sampled)</small></h2>")
    parts.append(_figure(plots.histograms({s: r["sequence_length"] for s, r in records.items()},
                                          "tokens in a sequence (padding excluded)"), "No record was read."))
    rows = [[side, _n(r["sequence_length"].get("mean"), 1), _n(r["sequence_length"].get("median"), 1),
             _n(r["sequence_length"].get("max")), _pct(r["padding_share"])] for side, r in records.items()]
    parts.append(_table(["side", "mean", "median", "max", "padding share"], rows))

    parts.append("<h2>Tokens per document</h2>")
    exact = report.get("tokens_per_document") or {}
    documents = {s: r["tokens_per_document"] for s, r in records.items() if r.get("tokens_per_document")}
    if exact:
        parts.append(_figure(plots.histograms(exact, "tokens in a document (bins of powers of two)", "documents",
                                              log_x=True), "No task recorded documents."))
        parts.append("<p class=note>Every document of the job, counted by the workers as they tokenized it "
                     "(before any was cut into sequences), in bins of powers of two.</p>")
    elif documents:
        parts.append(_figure(plots.histograms(documents, "tokens in a document", "documents"), ""))
        parts.append("<p class=note>Sampled: each record is a whole document in this output.</p>")
    else:
        parts.append(_figure(plots.histograms({"train": report["mean_tokens_per_document_by_task"]},
                                              "mean tokens per document of a task", "tasks"),
                             "No task recorded documents."))
        parts.append("<p class=note>Records here are instances, not documents, and this output's manifest has "
                     "no counts of documents by tokens (made by an older version): the manifest's mean per task "
                     "(tokens ÷ documents of each task) is shown.</p>")

    parts.append("<h2>Unknown tokens</h2>")
    rows = [[side, f"<span id=unk-count-{side}>{_n(r['unk']['count'])}</span>", _n(r["tokens_read"]),
             _pct(r["unk"]["rate"], 3)] for side, r in records.items()]
    parts.append(_table(["side", "[UNK] (sampled)", "text tokens read", "rate"], rows))
    unknown = report.get("unknown_text") or {}
    if unknown.get("skipped"):
        parts.append(f"<p class=note>By script: {_e(unknown['skipped'])}.</p>")
    else:
        parts.append(f"<p class=note>By Unicode script, from {unknown['input_bytes_read'] / 1e6:.1f} MB of the input "
                     f"tokenized again ({unknown['tokens']:,} tokens, {unknown['unk']:,} [UNK]).</p>")
        parts.append(_table(["script", "tokens", "[UNK]", "rate"],
                            [[_e(s["script"]), _n(s["tokens"]), _n(s["unk"]), _pct(s["rate"], 3)]
                             for s in unknown["by_script"][:15]]))
        if unknown["top_unk_texts"]:
            parts.append(_table(["text that became [UNK]", "code points", "times"],
                                [[f"<code>{_e(t['text'])}</code>",
                                  f"<code>{_e(t.get('code_points') or code_points(t['text']))}</code>",
                                  _n(t["count"])] for t in unknown["top_unk_texts"]]))

    train = records.get("train") or next(iter(records.values()), None)
    if train and train["top_tokens"]:
        parts.append("<h2>Top tokens <small>(sampled, training side)</small></h2>")
        top = train["top_tokens"][:25]
        parts.append(_figure(plots.bars([str(t["token"] if t["token"] is not None else t["id"]) for t in top],
                                        [t["share"] for t in top], "% of text tokens", percent=True), ""))

    masking = {s: r["masking"] for s, r in records.items() if r.get("masking")}
    parts.append("<h2>Masking <small>(sampled)</small></h2>")
    if masking:
        parts.append(_table(["side", "masked", "share of text tokens", "→ [MASK]", "→ random", "kept",
                             "mean per sequence"],
                            [[s, _n(m["masked"]), _pct(m["masked_share"]), _pct(m["as_mask"], 1),
                              _pct(m["as_random"], 1), _pct(m["as_kept"], 1), _n(m["per_sequence"].get("mean"), 2)]
                             for s, m in masking.items()]))
        parts.append(_figure(plots.histograms({s: m["per_sequence"] for s, m in masking.items()},
                                              "masked positions in a sequence"), ""))
    else:
        parts.append("<p class=note>The records hold no masked positions (masked at train time, or token "
                     "sequences).</p>")

    labels = {s: r["labels"] for s, r in records.items() if r.get("labels")}
    if labels:
        name = "sentence order (SOP)" if objective.get("name") == "albert" and not objective.get(
            "random_next_sentence") else "next sentence (NSP)"
        parts.append(f"<h2>Label balance: {_e(name)} <small>(sampled)</small></h2>")
        rows = []
        for side, counts in labels.items():
            total = sum(counts.values())
            rows.append([side] + [f"<span id=label-{side}-{k}>{_n(counts.get(k, 0))}</span> "
                                  f"({_pct(counts.get(k, 0) / total, 1)})" for k in ("0", "1")])
        parts.append(_table(["side", "label 0 (actual next / in order)", "label 1 (random / swapped)"], rows))

    parts.append("<h2>Skipped documents</h2>")
    skipped = report["skipped_documents"]
    parts.append(_table(["reason", "documents"], [[_e(k), _n(v)] for k, v in skipped.items()])
                 if skipped else "<p>None.</p>")

    parts += _step_sections(report)

    parts.append("<h2>Throughput</h2>")
    throughput = report.get("throughput")
    if throughput:
        series = {OVERALL: throughput["tokens_per_second"]}
        series.update({w: v["rate"] for w, v in list(throughput["workers"].items())[:12]})
        parts.append(f"<p>{throughput['mean_tokens_per_second']:,.0f} tokens/s over {throughput['seconds']:,.1f} s "
                     f"(each task's tokens spread over the seconds its worker spent on it, in bins of "
                     f"{throughput['bin_seconds']:,.2f} s).</p>")
        parts.append(_figure(plots.lines(series, throughput["bin_seconds"], "tokens per second", overall=OVERALL),
                             ""))
        parts.append(_table(["worker", "tasks", "tokens", "input MB", "working s", "tokens/s working"],
                            [[_e(w), _n(v["tasks"]), _n(v["tokens"]), _n(v["bytes_in"] / 1e6, 1),
                              _n(v["seconds"], 1), _n(v["tokens_per_second_working"])]
                             for w, v in throughput["workers"].items()]))
    else:
        parts.append("<p class=note>The manifest records no times (made before mlm-report existed).</p>")

    mixture = report.get("mixture")
    if mixture:
        parts += _mixture_section(mixture)

    parts.append("<h2>Cost</h2>")
    cost = report.get("cost")
    if cost:
        keys = [k for k in COST_LABELS if k in cost] + [k for k in cost if k not in COST_LABELS]
        parts.append(_table(["", "this job"], [[_e(COST_LABELS.get(k, k.replace("_", " "))), cost_value(k, cost[k])]
                                               for k in keys]))
        if cost.get("instance_hourly_price") is None:
            parts.append("<p class=note>No price was given (the ventilator's --instance-hourly-price): hours only."
                         "</p>")
    else:
        parts.append("<p class=note>No summary.json: the run's cost is unknown.</p>")

    made_by = report.get("made_by") or {}
    tokenizer = report.get("tokenizer") or {}
    parts.append("<h2>How this output was made</h2>")
    version, command = _e(made_by.get("version", "?")), _e(made_by.get("command", "?"))
    parts.append(f"<p>mlm-pipeline {version}: <code>{command}</code></p>")
    if tokenizer:
        parts.append(f"<p>Tokenizer: {_e(tokenizer.get('model'))}, {_n(tokenizer.get('vocab_size'))} ids, "
                     f"{'lower-casing' if tokenizer.get('lower_case') else 'keeping case'}; sha256 "
                     f"<code>{_e(tokenizer.get('sha256'))}</code></p>")
    parts.append("<p class=note>The same numbers are in report.json beside this page.</p>")
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>" + _e(title) + "</title><style>"
            + STYLE + "</style></head><body>" + "\n".join(parts) + "</body></html>\n")
