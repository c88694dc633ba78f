"""A format that exists only for the tests: JSON lines, one record a line.

It is what a new format is: one class of the writer axis that writes its
files through the base's OutputFile and reads them back.  The tests install
it the way another package would (an entry point in ``mlm_pipeline.writers``)
and show that the ventilator writes it, ``mlm-verify`` checks it and the
loader serves it, with nothing about it in loader/ or sink/.
"""

from __future__ import annotations

import json

import numpy as np

from mlm_pipeline.plugin import NoParams, OutputFile, ShardFile, TaskOutput, Writer

NAME = "jsonl-test"
SUFFIX = ".records.jsonl"
#: What an installed package would declare (its entry_points.txt).
ENTRY_POINTS = f"[mlm_pipeline.writers]\n{NAME} = {__name__}:JsonLinesWriter\n"


class _JsonLinesOutput(TaskOutput):
    def __init__(self, output, name: str, features):
        self._file = OutputFile(output, name)
        self._names = [f.name for f in features]
        self._records = 0

    def write(self, batch) -> None:
        columns = [np.asarray(batch.columns[name]).tolist() for name in self._names]
        lines = [json.dumps(dict(zip(self._names, values))) + "\n" for values in zip(*columns)]
        self._file.write("".join(lines).encode())
        self._records += len(lines)

    def commit(self) -> list[ShardFile]:
        return [self._file.commit(self._records)]

    def abort(self) -> None:
        self._file.abort()


class JsonLinesWriter(Writer):
    """Records as JSON lines, each feature a list of numbers."""

    name = NAME
    Params = NoParams
    suffixes = (SUFFIX,)
    exact_dtypes = False  # JSON keeps numbers, not their widths

    @classmethod
    def check_features(cls, params, features) -> None:
        variable = [f.name for f in features if f.length is None]
        if variable:
            raise ValueError(f"{NAME} writes fixed-length features; {', '.join(variable)} vary in length")

    def open(self, output, stem: str) -> TaskOutput:
        return _JsonLinesOutput(output, stem + SUFFIX, self.features)

    @classmethod
    def _lines(cls, data: bytes) -> list[dict]:
        try:
            records = [json.loads(line) for line in data.decode().splitlines()]
        except ValueError as error:
            raise ValueError(f"not JSON lines: {error}") from None
        if not all(isinstance(record, dict) for record in records):
            raise ValueError("a line is not a record")
        return records

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        return len(cls._lines(data))

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict | None:
        records = cls._lines(data)
        if not records:
            return None
        return {key: np.asarray([record[key] for record in records]) for key in records[0]}
