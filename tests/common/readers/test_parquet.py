"""Parquet input: tasks of whole row groups cut from footers, every row once,
bad rows counted, bad files refused, only the task's column chunks read."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.readers import ParseReport, detect, reader_named
from common.readers.parquet import RowGroup, cut_row_groups
from common.storage import LocalStorage
from tests.support.helpers import need_shared
from tests.support.web_corpora import wiki_articles, wiki_parquet, write_parquet

PARQUET = reader_named("parquet")


@pytest.fixture(scope="module")
def articles():
    need_shared()
    return wiki_articles()


def read_all(reader, root, task_size):
    """Every document of every task, and the skips counted, in task order."""
    storage = LocalStorage(str(root))
    files = storage.list_inputs()
    reader.check_inputs(storage, files)
    tasks = list(reader.plan(files, task_size, storage))
    report = ParseReport()
    documents = [d for task in tasks for d in reader.documents(task, reader.read(storage, task), report)]
    return tasks, documents, report.skipped


@pytest.mark.parametrize("task_size", [1, 60_000, 300_000, 10 ** 9])
def test_every_row_once_in_tasks_of_whole_row_groups(tmp_path, articles, task_size):
    paths = wiki_parquet(tmp_path, files=2, row_group_size=8)
    tasks, documents, skipped = read_all(PARQUET(), tmp_path, task_size)
    assert skipped == {}
    assert [(d.id, "\n".join(d.lines)) for d in documents] == [(a.id, a.text) for a in articles]
    assert len({t.key for t in tasks}) == len(tasks)
    for path in paths:  # a file's tasks tile it, and own whole row groups
        ranges = [(t.start, t.end) for t in tasks if t.path == path.name]
        assert ranges[0][0] == 0 and ranges[-1][1] == path.stat().st_size
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        groups = pq.ParquetFile(path).metadata.num_row_groups
        if task_size == 1:
            assert len(ranges) == groups  # never finer than a row group
        if task_size == 10 ** 9:
            assert len(ranges) == 1
    # Rows are named by their position in their file.
    first_file = [d for d in documents][:8]
    assert [d.offset for d in first_file] == list(range(8))


def test_cutting_groups_consecutive_row_groups_up_to_the_task_size():
    groups = tuple(RowGroup(offset, 100, 10) for offset in (4, 104, 204, 304, 404))
    assert cut_row_groups(groups, 250, 600) == [(0, 204), (204, 404), (404, 600)]
    assert cut_row_groups(groups, 1, 600) == [(0, 104), (104, 204), (204, 304), (304, 404), (404, 600)]
    assert cut_row_groups((), 250, 600) == []


def test_bad_rows_are_skipped_and_counted_by_reason(tmp_path):
    invalid = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00"),
                                                     pa.py_buffer(b"\xff\xfe")])
    good = "A first sentence here. And a second one."
    texts = pa.concat_arrays([pa.array([good, None, "  \n ", good], pa.string()), invalid])
    write_parquet(tmp_path / "a.parquet", {"text": texts, "id": pa.array(["a", "b", "c", None, "e"])}, 2)
    # Another file whose "text" column holds numbers, and one without an id column.
    write_parquet(tmp_path / "b.parquet", {"text": [1, 2, 3]}, 2)
    write_parquet(tmp_path / "c.parquet", {"text": [good, good]}, 1)
    _tasks, documents, skipped = read_all(PARQUET(), tmp_path, 1)
    assert skipped == {"missing_text": 1, "empty_text": 1, "invalid_utf8": 1, "non_string_text": 3}
    assert [(d.id, d.offset) for d in documents] == [("a", 0), ("", 3), ("", 0), ("", 1)]
    assert documents[0].lines == [good]


def test_other_columns_named_by_flags(tmp_path):
    write_parquet(tmp_path / "x.parquet", {"content": ["Body one.", "Body two."], "doc": [7, 8], "text": [1, 2]}, 1)
    _tasks, documents, skipped = read_all(PARQUET(PARQUET.make_params({"text_column": "content",
                                                                       "id_column": "doc"})), tmp_path, 1)
    assert skipped == {} and [(d.id, d.lines) for d in documents] == [("7", ["Body one."]), ("8", ["Body two."])]


def test_a_corrupt_row_group_is_skipped_and_the_rest_read(tmp_path, articles):
    (path,) = wiki_parquet(tmp_path, files=1, row_group_size=8)
    metadata = pq.ParquetFile(path).metadata
    group = metadata.row_group(1)
    text = next(group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == "text")
    data = bytearray(path.read_bytes())
    data[text.data_page_offset:text.data_page_offset + 8] = b"\xff" * 8  # the page header
    path.write_bytes(bytes(data))
    _tasks, documents, skipped = read_all(PARQUET(), tmp_path, 1)
    assert skipped == {"corrupt_row_group": group.num_rows}
    assert [d.id for d in documents] == [a.id for i, a in enumerate(articles) if not 8 <= i < 16]


def test_files_that_are_not_parquet_or_lack_the_column_are_refused_naming_them(tmp_path, articles):
    (good,) = wiki_parquet(tmp_path / "ok", files=1)
    reader = PARQUET()

    def refusal(root):
        storage = LocalStorage(str(root))
        with pytest.raises(ValueError) as error:
            reader.check_inputs(storage, storage.list_inputs())
        message = str(error.value)
        assert "\n" not in message
        return message

    (tmp_path / "ok" / "README.md").write_text("# not data\n")
    assert refusal(tmp_path / "ok") == "README.md: not a Parquet file (Parquet magic bytes not found in footer. " \
                                       "Either the file is corrupted or this is not a parquet file.)"
    truncated = tmp_path / "cut" / "part.parquet"
    truncated.parent.mkdir()
    truncated.write_bytes(good.read_bytes()[:good.stat().st_size // 2])
    assert refusal(tmp_path / "cut").startswith("part.parquet: not a Parquet file (")
    reader = PARQUET(PARQUET.make_params({"text_column": "body"}))
    (tmp_path / "ok" / "README.md").unlink()
    assert refusal(tmp_path / "ok") == (f"--text-column body: no input file has such a text column ({good.name} has: "
                                        "id (string), text (string), url (string))")


class CountingStorage(LocalStorage):
    """LocalStorage that records every byte range read."""

    def __init__(self, root):
        super().__init__(root)
        self.ranges: list[tuple[int, int]] = []

    def open_reader(self, relative, version):
        reader = super().open_reader(relative, version)
        inner = reader.read_at

        def read_at(offset, length):
            self.ranges.append((offset, length))
            return inner(offset, length)
        reader.read_at = read_at
        return reader


def test_a_task_reads_the_footer_and_only_its_row_groups_text_and_id_chunks(tmp_path, articles):
    many = [a for _ in range(12) for a in articles]  # ~8 MB: the footer's tail read is a small part
    path = write_parquet(tmp_path / "big.parquet", {"url": [f"https://example.org/{a.id}" * 20 for a in many],
                                                    "text": [a.text for a in many], "id": [a.id for a in many]},
                         100, compression="none")
    storage = CountingStorage(str(tmp_path))
    files = storage.list_inputs()
    reader = PARQUET()
    tasks = list(reader.plan(files, 1, storage))
    task = tasks[len(tasks) // 2]
    storage.ranges.clear()
    documents = list(reader.documents(task, reader.read(storage, task), ParseReport()))
    metadata = pq.ParquetFile(path).metadata
    owned, allowed = [], []
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
        start = min(c.dictionary_page_offset or c.data_page_offset for c in columns.values())
        if task.start <= start < task.end:
            owned.append(index)
            allowed += [(c.dictionary_page_offset or c.data_page_offset,
                         (c.dictionary_page_offset or c.data_page_offset) + c.total_compressed_size)
                        for name, c in columns.items() if name in ("text", "id")]
    assert len(owned) == 1 and len(documents) == metadata.row_group(owned[0]).num_rows
    allowed.sort()
    merged = [list(allowed[0])]
    for lo, hi in allowed[1:]:  # the text and id chunks are adjacent: read in one request
        if lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    tail = path.stat().st_size - 1024 * 1024  # pyarrow reads the footer from the file's end
    for offset, length in storage.ranges:
        inside = offset >= tail or any(lo <= offset and offset + length <= hi for lo, hi in merged)
        assert inside, (offset, length, allowed)
    read = sum(length for offset, length in storage.ranges if offset < tail)
    assert 0 < read <= sum(hi - lo for lo, hi in allowed)
    # adjacent chunks in one request each (read ahead by the file object: pyarrow's pre_buffer starts a pool)
    assert len([offset for offset, _length in storage.ranges if offset < tail]) == len(merged)


def test_reading_a_task_starts_none_of_arrows_thread_pools(tmp_path, articles):
    """A pool Arrow starts (pre_buffer's, read_table's) can abort a short process at its exit
    (apache/arrow#34314): mlm-report, mlm-train-vocab and the ventilator read Parquet input too.  In a fresh
    interpreter, reading a task's row groups starts no thread."""
    from tests.support.threads import threads_started

    write_parquet(tmp_path / "in" / "a.parquet", {"text": [a.text for a in articles], "id": [a.id for a in articles]},
                  8)
    started, printed = threads_started(
        "import pyarrow.parquet\n"
        "from common.readers import ParseReport\n"
        "from common.readers.parquet import ParquetReader\n"
        "from common.storage import LocalStorage\n"
        "storage = LocalStorage(sys.argv[1])\n"
        "reader = ParquetReader(ParquetReader.make_params({}))",
        "tasks = list(reader.plan(storage.list_inputs(), 1 << 20, storage))\n"
        "print(sum(1 for t in tasks for _ in reader.documents(t, reader.read(storage, t), ParseReport())))",
        str(tmp_path / "in"))
    assert int(printed) == len(articles)
    assert started == 0, "reading Parquet input started threads"


def test_a_file_written_by_datasets_to_parquet(tmp_path, articles):
    import datasets  # a test dependency (setup.cfg): never skipped
    dataset = datasets.Dataset.from_dict({"id": [a.id for a in articles], "text": [a.text for a in articles],
                                          "title": [f"T{a.id}" for a in articles]})
    dataset.to_parquet(str(tmp_path / "train-00000-of-00001.parquet"), batch_size=16)
    assert pq.ParquetFile(tmp_path / "train-00000-of-00001.parquet").metadata.num_row_groups > 1
    _tasks, documents, skipped = read_all(PARQUET(), tmp_path, 1)
    assert skipped == {} and [(d.id, "\n".join(d.lines)) for d in documents] == [(a.id, a.text) for a in articles]


def test_parquet_is_detected_by_magic_or_name():
    assert detect(b"PAR1\x15\x04") is PARQUET
    assert detect(b"", "data/train-00000.parquet") is PARQUET
    assert detect(b'<doc id="1">', "x.parquet") is PARQUET
    assert detect(b'<doc id="1">\n').name == "wikiextractor"


def test_a_file_changed_since_planning_fails_its_tasks_permanently(tmp_path, articles):
    from common.readers.content import is_permanent

    (path,) = wiki_parquet(tmp_path, files=1)
    storage = LocalStorage(str(tmp_path))
    reader = PARQUET()
    tasks = list(reader.plan(storage.list_inputs(), 1, storage))
    write_parquet(path, {"text": ["Another text."], "id": ["z"]}, 1)
    with pytest.raises(Exception) as error:
        reader.read(storage, tasks[0])
    assert is_permanent(error.value) and "changed since it was listed" in str(error.value)


@pytest.mark.parametrize("kind", ["dictionary", "large_string", "string_view"])
def test_every_arrow_string_type_is_text(tmp_path, kind):
    """A dictionary-encoded, large_string or string_view text column was taken for not text."""
    texts = [f"Document {i}. It has text." for i in range(6)]
    column = {"dictionary": pa.array(texts).dictionary_encode(), "large_string": pa.array(texts, pa.large_string()),
              "string_view": pa.array(texts, pa.string_view())}[kind]
    pq.write_table(pa.table({"text": column, "id": [str(i) for i in range(6)]}), tmp_path / "a.parquet")
    _tasks, documents, skipped = read_all(PARQUET(), tmp_path, 10 ** 9)
    assert skipped == {}
    assert [d.lines for d in documents] == [[t] for t in texts]


def test_a_flipped_byte_in_a_checksummed_page_is_a_corrupt_row_group(tmp_path, articles):
    """Page checksums were never verified: a flipped byte inside a data page
    silently changed the text.  Now its row group is counted corrupt and the
    others are read."""
    rows = articles[:16]
    pq.write_table(pa.table({"text": [a.text for a in rows], "id": [a.id for a in rows]}),
                   tmp_path / "a.parquet", row_group_size=8, write_page_checksum=True, compression="none",
                   use_dictionary=False)
    path = tmp_path / "a.parquet"
    group = pq.ParquetFile(path).metadata.row_group(0)
    text = next(group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == "text")
    data = bytearray(path.read_bytes())
    middle = text.data_page_offset + text.total_compressed_size // 2  # inside the page's values, not its header
    data[middle] ^= 0x20  # one letter's case
    path.write_bytes(bytes(data))
    _tasks, documents, skipped = read_all(PARQUET(), tmp_path, 10 ** 9)
    assert skipped == {"corrupt_row_group": 8}
    assert [d.id for d in documents] == [a.id for a in rows[8:]]
