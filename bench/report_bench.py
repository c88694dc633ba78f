"""mlm-report on a large output, made cheaply: a real run's shards hard-linked many times over.

``enlarge`` lists every copy in one manifest (task ids and file names made
unique, sha256 and record counts as the real files have them), so the
report sees an output of the target size whose files are real shards, and
the disk holds the run's bytes once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.procs import REPO


def enlarge(base: Path, target: Path, size_bytes: int) -> int:
    """``base``'s output copied (hard links) into ``target`` until its shards hold ``size_bytes``; the bytes."""
    entries = [json.loads(line) for line in (base / "manifest.jsonl").read_text().splitlines()]
    per_copy = sum(f["bytes"] for e in entries for f in e["shards"])
    copies = max(1, -(-size_bytes // max(per_copy, 1)))
    target.mkdir(parents=True)
    for name in ("summary.json", "dataset_info.json", "tokenizer.json"):
        if (base / name).exists():
            shutil.copy(base / name, target / name)
    lines = []
    for copy in range(copies):
        for entry in entries:
            shards = []
            for f in entry["shards"]:
                name = f"copy-{copy:05d}/{f['name']}"
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                os.link(base / f["name"], target / name)
                shards.append({**f, "name": name})
            lines.append(json.dumps({**entry, "task": f"{entry['task']}-{copy}", "shards": shards}))
    (target / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return per_copy * copies


def run_report(output: Path, *args: str) -> tuple[float, dict]:
    """``python -m report OUTPUT``: its wall seconds and report.json."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "report", str(output), *args], cwd=REPO, capture_output=True,
                            text=True, timeout=900)
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"mlm-report failed:\n{result.stderr[-3000:]}")
    return wall, json.loads((output / "report" / "report.json").read_text())
