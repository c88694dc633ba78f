"""Parquet and JSON Lines corpora made from ../shared's WikiExtractor sample
(parsed with the wikiextractor reader), for the tests of those readers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from common.readers import ParseReport, reader_named
from tests.support.helpers import WIKI


@dataclass(frozen=True)
class Article:
    id: str
    text: str


def wiki_articles() -> list[Article]:
    """Every article of the shared sample: its id and body (paragraphs joined by newlines)."""
    reader = reader_named("wikiextractor")()
    articles = []
    for path in sorted(WIKI.rglob("wiki_*")):
        for document in reader.parse(path.read_bytes(), 0, ParseReport()):
            articles.append(Article(document.id, "\n".join(line for line in document.lines if line.strip())))
    return articles


def write_parquet(path: Path, columns: dict[str, list], row_group_size: int, **kwargs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size, **kwargs)
    return path


def wiki_parquet(directory: Path, files: int = 2, row_group_size: int = 8) -> list[Path]:
    """The sample as ``files`` Parquet files of ``text`` and ``id`` columns, several row groups each."""
    articles = wiki_articles()
    per_file = -(-len(articles) // files)
    paths = []
    for i in range(files):
        part = articles[i * per_file:(i + 1) * per_file]
        paths.append(write_parquet(directory / f"train-{i:05d}-of-{files:05d}.parquet",
                                   {"id": [a.id for a in part], "text": [a.text for a in part],
                                    "url": [f"https://example.org/{a.id}" for a in part]}, row_group_size))
    return paths


def wiki_jsonl(path: Path, text_field: str = "text", id_field: str = "id", articles=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    articles = wiki_articles() if articles is None else articles
    path.write_text("".join(json.dumps({id_field: a.id, text_field: a.text, "meta": {"n": i}}) + "\n"
                            for i, a in enumerate(articles)))
    return path
