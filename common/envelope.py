"""The envelope every message frame shares, opened once for every protocol.

A frame is a msgpack map ``{"v": version, "t": type name, ...fields}``.  This
module checks the envelope (msgpack, a map, the version, a type name that is
a string naming a known type) before anything looks inside, so a hostile but
well-formed frame (a type that is a list, a map, a float, None or bytes; a
version that is not an int; deep nesting; ext types) is one error of the
caller's own type, never a TypeError in the caller's loop.  The pipeline's
protocol (common/protocol.py) and the loader's (loader/messages.py) both open
their frames here; neither knows the other's messages.
"""

from __future__ import annotations

import msgpack


def open_envelope(frame: bytes, version: int, types: dict[str, type], error: type[Exception]) -> tuple[type, dict]:
    """(the message class, its fields) of ``frame``; raises ``error`` for anything else."""
    try:
        payload = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as problem:  # msgpack raises several unrelated types (and StackError for deep nesting)
        raise error(f"not msgpack: {problem}") from None
    if not isinstance(payload, dict):
        raise error("message is not a map")
    got = payload.pop("v", None)
    if type(got) is not int or got != version:
        raise error(f"protocol version {_short(got)}, expected {version}")
    name = payload.pop("t", None)
    cls = types.get(name) if type(name) is str else None
    if cls is None:
        raise error(f"unknown message type {_short(name)}")
    return cls, payload


def checked(convert, payload: dict, cls: type, error: type[Exception]):
    """``convert(payload)``; any failure but the protocol's own error becomes one, naming the type."""
    try:
        return convert(payload)
    except error:
        raise
    except Exception as problem:  # a field the converter did not foresee: never the caller's crash
        raise error(f"{cls.__name__}: malformed fields ({type(problem).__name__})") from None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
