"""Finding line starts in a byte stream read at offsets: what byte-range
readers need to place document boundaries without reading a whole file."""

from __future__ import annotations

from collections.abc import Callable, Iterator

#: Reads ``length`` bytes at ``offset``; returns fewer only at end of file.
ReadAt = Callable[[int, int], bytes]

ASCII_SPACE = b" \t\r\f\v"
SCAN_CHUNK = 64 * 1024


def first_line_start_at_or_after(read_at: ReadAt, pos: int) -> int | None:
    """The offset of the first line start >= pos, or None at end of file."""
    if pos == 0:
        return 0
    offset = pos - 1
    while True:
        chunk = read_at(offset, SCAN_CHUNK)
        if not chunk:
            return None
        newline = chunk.find(b"\n")
        if newline >= 0:
            return offset + newline + 1
        offset += len(chunk)


def iter_lines_from(read_at: ReadAt, line_start: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line without newline) for each line from a line start on."""
    offset = line_start
    buffer = b""
    buffer_offset = offset
    while True:
        newline = buffer.find(b"\n")
        if newline >= 0:
            yield buffer_offset, buffer[:newline]
            buffer = buffer[newline + 1:]
            buffer_offset += newline + 1
            continue
        chunk = read_at(buffer_offset + len(buffer), SCAN_CHUNK)
        if not chunk:
            if buffer:
                yield buffer_offset, buffer
            return
        buffer += chunk


def previous_line_is_blank(read_at: ReadAt, line_start: int) -> bool:
    """Whether the line ending just before ``line_start`` holds only spaces.

    Scans backwards over whitespace only, so the cost is the length of the
    whitespace run, not of the line.
    """
    if line_start == 0:
        return False
    pos = line_start - 1  # the newline ending the previous line
    while pos > 0:
        start = max(0, pos - SCAN_CHUNK)
        chunk = read_at(start, pos - start)
        for i in range(len(chunk) - 1, -1, -1):
            byte = chunk[i:i + 1]
            if byte == b"\n":
                return True
            if byte not in ASCII_SPACE:
                return False
        pos = start
    return True  # only whitespace back to the start of the file
