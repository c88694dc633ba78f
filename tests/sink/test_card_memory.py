"""The dataset card of a large output is written from the sink's journal as a stream.

The card names each side's files, so it reads every manifest line.  It read the published manifest whole, as a
list of dicts (~1 KB a line): at a million tasks, gigabytes in a sink that otherwise keeps only its done set
(the scale bench's resume: the sink's peak RSS 146 -> 564 MB at 300,000 lines when the card came).
"""

from __future__ import annotations

from pathlib import Path

from common.describe.dataset_card import write_card
from common.storage import LocalStorage
from sink.manifest import Manifest
from tests.support.journals import journal_line, peak_traced_bytes

LINES = 20_000
DATA = Path(__file__).parent.parent / "data"


def _journal(root) -> None:
    # A real Parquet output's description (`--objective tokens --max-seq-length 128 --output-format parquet` on
    # the start of ../shared's wiki_00), so the card is rendered as the sink renders one.
    (root / "dataset_info.json").write_bytes((DATA / "card_dataset_info.json").read_bytes())
    with open(root / "manifest.jsonl", "w") as out:
        for i in range(LINES):
            side = "validation/" if i % 10 == 0 else ""
            shard = {"name": f"{side}part-{i:020d}.parquet", "records": 7, "sha256": "0" * 64, "bytes": 1000,
                     **({"split": "holdout"} if side else {})}
            out.write(journal_line(i, "j", [shard]))


def test_the_card_from_the_journal_stream_is_the_same_card_in_a_fraction_of_the_memory(tmp_path):
    _journal(tmp_path)
    storage = LocalStorage(str(tmp_path))
    manifest = Manifest(storage, "j", str(tmp_path / "state"))

    whole = peak_traced_bytes(lambda: write_card(storage, None))
    card = (tmp_path / "README.md").read_bytes()
    (tmp_path / "README.md").unlink()
    streamed = peak_traced_bytes(lambda: write_card(storage, None, "", manifest.entries()))

    assert (tmp_path / "README.md").read_bytes() == card
    assert b'path: "validation/' in card and b"part-*.parquet" in card
    assert whole > 20 * 1024 * 1024, whole  # the list of every line's dict: what a million lines multiply
    assert streamed < whole / 10, (streamed, whole)
