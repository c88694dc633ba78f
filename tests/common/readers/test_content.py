"""Compressed inputs: every member, frame or stream is read; corrupt or
oversized data is a permanent, clearly worded failure, not a worker's OOM."""

import bz2
import gzip

import pytest
import zstandard

from common.readers import reader_named
from common.readers.content import UnreadableInput, decompress, is_permanent, task_content
from common.storage import VersionChanged

WIKI_READER, JSON_READER, TEXT_READER = (reader_named(name)() for name in ("wikiextractor", "json", "text"))


PARTS = [b"<doc id='1'>first\n</doc>\n", b"<doc id='2'>second\n</doc>\n", b"<doc id='3'>third\n</doc>\n"]

COMPRESSORS = {
    "gzip": gzip.compress,
    "bz2": bz2.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_concatenated_members_are_all_read(compression):
    """`cat a.gz b.gz`, pbzip2 and pzstd write several members, streams or frames."""
    data = b"".join(COMPRESSORS[compression](part) for part in PARTS)
    assert decompress(data, compression) == b"".join(PARTS)


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_corrupt_data_is_a_permanent_error(compression):
    data = COMPRESSORS[compression](b"".join(PARTS) * 50)
    members = b"".join(COMPRESSORS[compression](part) for part in PARTS)
    for broken in (data[: len(data) // 2], data[:10] + bytes(200) + data[210:], b"not compressed at all",
                   members[:-3]):  # whole members, then a truncated one
        with pytest.raises(UnreadableInput, match=f"corrupt {compression} data"):
            decompress(broken, compression)


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_data_expanding_past_the_limit_is_refused(compression):
    bomb = COMPRESSORS[compression](bytes(3 << 20))  # 3 MB of zeros, a few KB compressed
    assert decompress(bomb, compression, limit=3 << 20) == bytes(3 << 20)
    with pytest.raises(UnreadableInput, match="expands past 2,097,152 bytes"):
        decompress(bomb, compression, limit=2 << 20)


def test_which_failures_are_permanent():
    assert is_permanent(UnreadableInput("x"))
    assert is_permanent(VersionChanged("x"))
    assert not is_permanent(OSError("connection reset"))
    assert not is_permanent(FileNotFoundError("gone"))


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_compressed_tasks_travel_compressed(tmp_path, compression):
    """What the ventilator ships for a compressed file is the file as it is;
    the worker decompresses it, whether shipped or read itself."""
    from common.job.tasks import plan_tasks
    from common.storage import LocalStorage

    suffix = {"gzip": ".gz", "bz2": ".bz2", "zstd": ".zst"}[compression]
    data = COMPRESSORS[compression](b"".join(PARTS))
    (tmp_path / f"wiki_00{suffix}").write_bytes(data)
    storage = LocalStorage(str(tmp_path))
    (task,) = plan_tasks(storage.list_inputs(), 1 << 20)
    assert task.compression == compression
    shipped = WIKI_READER.read(storage, task)
    assert shipped == data
    assert task_content(task, shipped) == task_content(task, WIKI_READER.read(storage, task)) \
        == b"".join(PARTS)
