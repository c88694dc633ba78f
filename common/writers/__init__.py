"""The writer axis: output formats, each one object that writes and reads
its files.  Each is one module of this package (see :mod:`.base`), or a
class another installed package names under the entry-point group
``mlm_pipeline.writers``; the job names it (``--output-format``) and
:func:`writers` finds it, so adding one touches no other file: the
ventilator offers it, workers write it, ``mlm-verify`` checks it and the
loader serves it."""

from __future__ import annotations

from common.job.params import Registry
from common.output.files import SHARD_PREFIX
from common.writers.base import OutputFile, ShardFile, TaskOutput, Writer

DEFAULT = "tfrecord"
#: Where other installed packages name their formats (``name = module:Class``): common.job.params.entry_point_group.
ENTRY_POINT_GROUP = "mlm_pipeline.writers"


_REGISTRY: Registry[Writer] = Registry(__name__, Writer, "output format")
writers = _REGISTRY.variants
writer_named = _REGISTRY.named


def writer_for_file(name: str) -> type[Writer]:
    """The format whose files are named like ``name`` (the longest suffix that matches wins)."""
    matches = [(len(suffix), writer) for writer in writers().values() for suffix in writer.suffixes
               if name.endswith(suffix)]
    if not matches:
        raise ValueError(f"{name}: no output format writes such files (known endings: "
                         f"{', '.join(sorted({s for w in writers().values() for s in w.suffixes}))})")
    return max(matches, key=lambda match: match[0])[1]


def is_output_file(name: str) -> bool:
    """A file a job's writer writes (a task's ``part-*``, a format's finish files, on any side), as opposed to
    the job's descriptions, dedup's files or anyone else's: what must be in the manifest (mlm-verify), and
    what a job removes when its manifest will not list it (common.output.manifest)."""
    base = name.rsplit("/", 1)[-1]
    if base.startswith("."):
        return False
    if base.startswith(SHARD_PREFIX):
        return True
    try:
        writer = writer_for_file(name)
    except ValueError:
        return False
    return any(f"/{prefix}" in f"/{name}" for prefix in writer.finish_prefixes)


__all__ = ["DEFAULT", "ENTRY_POINT_GROUP", "OutputFile", "ShardFile", "TaskOutput", "Writer", "is_output_file",
           "writer_for_file", "writer_named", "writers"]
