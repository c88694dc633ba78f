"""An output format: a JSON object per record, a line each, one file per task."""

from __future__ import annotations

import json

import numpy as np

from mlm_pipeline.plugin import OutputFile, Ragged, TaskOutput, Writer

SUFFIX = ".demo.jsonl"


class _Output(TaskOutput):
    def __init__(self, output, name):
        self.file = OutputFile(output, name)  # temporary name, sha256 and size, renamed on commit: the base's
        self.records = 0

    def write(self, batch):
        rows = [dict(zip(batch.columns, values)) for values in zip(*(
            column.rows() if isinstance(column, Ragged) else column for column in batch.columns.values()))]
        self.file.write("".join(json.dumps({k: np.asarray(v).tolist() for k, v in row.items()}) + "\n"
                                for row in rows).encode())
        self.records += len(rows)

    def commit(self):
        return [self.file.commit(self.records)]

    def abort(self):
        self.file.abort()


class JsonLinesWriter(Writer):
    name = "demo-jsonl"
    from mlm_pipeline.plugin import NoParams as Params
    suffixes = (SUFFIX,)

    def open(self, output, stem):
        return _Output(output, stem + SUFFIX)

    @classmethod
    def count_records(cls, name, data):
        try:
            return sum(1 for line in data.decode().splitlines() if json.loads(line) is not None)
        except ValueError as error:
            raise ValueError(f"{name}: not JSON lines ({error})") from None

    @classmethod
    def read_columns(cls, name, data, companion):
        rows = [json.loads(line) for line in data.decode().splitlines()]
        names = rows[0].keys() if rows else ()
        return {key: Ragged(np.asarray([v for row in rows for v in row[key]], dtype=np.int32),
                            np.asarray([len(row[key]) for row in rows], dtype=np.int64)) for key in names}
