"""Local directories and files: listed by walking, read with pread, written to a hidden temporary file in
the same directory and renamed over the final name (fsynced, then the directory too)."""

from __future__ import annotations

import os
import tempfile

from common.job.tasks import InputFile
from common.storage.base import AtomicWriter, Backend, RangeReader, StorageError, VersionChanged, _umask, ignored


class LocalStorage(Backend):
    """A directory (or one file) on this machine or a shared file system."""

    name = "file"
    remote = False  # workers get the content from the ventilator, unless --shared-fs

    @classmethod
    def open(cls, uri: str, endpoint_url: str | None = None) -> LocalStorage:
        return cls(uri.removeprefix("file://"))

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.unlisted: dict[str, str] = {}  # inputs that could not even be listed, with why

    def uri(self, name: str) -> str:
        return os.path.join(self.root, name)

    # Inputs -----------------------------------------------------------------
    def list_inputs(self) -> list[InputFile]:
        if os.path.isfile(self.root):
            stat = os.stat(self.root)
            return [InputFile("", stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}")]
        if not os.path.isdir(self.root):
            raise StorageError(f"--data {self.root}: no such file or directory")
        found = []
        for directory, subdirs, files in os.walk(self.root):
            subdirs.sort()
            for name in sorted(files):
                full = os.path.join(directory, name)
                relative = os.path.relpath(full, self.root).replace(os.sep, "/")
                if ignored(relative):
                    continue
                try:
                    stat = os.stat(full)
                except OSError as error:  # a dangling link, a file removed meanwhile
                    self.unlisted[relative] = f"cannot stat: {error.strerror}"
                    continue
                found.append(InputFile(relative, stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}"))
        found.sort(key=lambda f: f.path)
        return found

    def _path(self, relative: str) -> str:
        return os.path.join(self.root, relative) if relative else self.root

    def check_version(self, relative: str, version: str) -> None:
        stat = os.stat(self._path(relative))
        current = f"{stat.st_size}-{stat.st_mtime_ns}"
        if current != version:
            raise VersionChanged(f"{relative}: file changed since it was listed ({version} -> {current})")

    def open_reader(self, relative: str, version: str) -> RangeReader:
        self.check_version(relative, version)
        handle = open(self._path(relative), "rb")
        return RangeReader(lambda offset, length: os.pread(handle.fileno(), length, offset), handle.close)

    def read_all(self, relative: str, version: str) -> bytes:
        self.check_version(relative, version)
        with open(self._path(relative), "rb") as handle:
            return handle.read()

    # Outputs ----------------------------------------------------------------
    def open_atomic(self, name: str) -> AtomicWriter:
        """``name`` may hold ``/``: a file in a subdirectory of the output."""
        final = self.uri(name)
        directory = os.path.dirname(final)
        os.makedirs(directory, exist_ok=True)
        handle = tempfile.NamedTemporaryFile(dir=directory, prefix=f".{os.path.basename(final)}.", suffix=".tmp",
                                             delete=False)
        # mkstemp makes the file 0600; the output is read by trainers that may run as another user, so it gets
        # the mode any other writer's file gets: 0666 less the umask.
        os.fchmod(handle.fileno(), 0o666 & ~_umask())

        def commit() -> str:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            os.replace(handle.name, final)
            _fsync_directory(directory)
            return final

        return AtomicWriter(handle, commit, handle.name)

    def put_bytes(self, name: str, data: bytes) -> str:
        with self.open_atomic(name) as writer:
            writer.file.write(data)
            return writer.commit()

    def create_if_absent(self, name: str, data: bytes) -> bool:
        """Write ``data`` as ``name`` unless it exists, atomically (a hard link of a complete temporary file:
        a reader sees all of it or nothing, and of two creators exactly one wins); whether this call wrote it."""
        with self.open_atomic(name) as writer:
            writer.file.write(data)
            writer.file.flush()
            os.fsync(writer.file.fileno())
            try:
                os.link(writer.file.name, self.uri(name))
            except FileExistsError:
                return False
            _fsync_directory(os.path.dirname(self.uri(name)))
            return True  # the temporary name is removed as the writer is left uncommitted

    def remove(self, name: str) -> None:
        """Delete the file if it is there."""
        try:
            os.unlink(self.uri(name))
        except FileNotFoundError:
            pass

    def get_bytes(self, name: str, limit: int | None = None) -> bytes | None:
        """The file's bytes (its first ``limit`` only, if given); None if there is no such file."""
        try:
            with open(self.uri(name), "rb") as handle:
                return handle.read(-1 if limit is None else limit)
        except FileNotFoundError:
            return None

    def list_outputs(self) -> list[str]:
        """Every file below the output root, by relative name (as S3 lists keys)."""
        if not os.path.isdir(self.root):
            return []
        names = []
        for directory, _subdirs, files in os.walk(self.root):
            relative = os.path.relpath(directory, self.root)
            names += [name if relative == "." else f"{relative}/{name}".replace(os.sep, "/") for name in files]
        return sorted(names)

    def output_sizes(self) -> dict[str, int]:
        """Every file below the output root and its size in bytes (one listing, not one call per file)."""
        sizes = {}
        for name in self.list_outputs():
            try:
                sizes[name] = os.path.getsize(self.uri(name))
            except FileNotFoundError:  # removed since the listing
                pass
        return sizes

    def remove_temporaries(self) -> int:
        """Delete temporary shards left by writers that died (call when no
        writer of this job can still be running: at the end of the job)."""
        removed = 0
        for name in self.list_outputs():
            base = name.rsplit("/", 1)[-1]
            if base.startswith(".") and base.endswith(".tmp"):
                try:
                    os.unlink(self.uri(name))
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
