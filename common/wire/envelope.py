"""The envelope every message frame shares, opened once for every protocol.

A frame is a msgpack map ``{"v": version, "t": type name, ...fields}``.  This
module checks the envelope (msgpack, a map, the version, a type name that is
a string naming a known type) before anything looks inside, so a hostile but
well-formed frame (a type that is a list, a map, a float, None or bytes; a
version that is not an int; deep nesting; ext types) is one error of the
caller's own type, never a TypeError in the caller's loop.  The pipeline's
protocol (common/wire/protocol.py) and the loader's (loader/messages.py) both
encode and decode their frames here (:func:`encode`, :func:`decode`: every
field checked against its dataclass's type hints); neither knows the other's
messages.

Numbers are hostile too: a well-typed float may be inf or NaN (which no
strict JSON reader takes back, so one such statistic would corrupt a
manifest line), and a well-typed int may be 2**64-1 (which the next
increment cannot encode).  Every float must be finite, and a field may
declare its range with :class:`Range` (``Count``, ``Seconds``, ``WallClock``
below): a value outside it is a malformed frame like any other.  A string
may declare its form with :class:`Matches` (a job id is 16 hex digits), and
a ``typing.NewType`` over a plain type (an opaque value a layer above the
wire encodes, such as the job) is checked as that type.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from types import UnionType
from typing import Any

import msgpack


@dataclass(frozen=True)
class Range:
    """A number's declared bounds, both included: ``Annotated[int, Range(0, 2**53)]`` is checked at decode."""

    low: float
    high: float


@dataclass(frozen=True)
class Matches:
    """A string's declared form: ``Annotated[str, Matches("[0-9a-f]{16}")]`` must match the whole pattern."""

    pattern: str


#: A count, size, byte offset, index or epoch: never negative, and exact both as a JSON number read into a
#: double and after the increments a role makes (2**53: 9 PB of offsets, 285 years of batches a microsecond).
Count = typing.Annotated[int, Range(0, 2**53)]
#: A duration: a task or a lease of more than 31 years is a hostile peer's, not a real one.
Seconds = typing.Annotated[float, Range(0.0, 1e9)]
#: A wall-clock time (time.time()): from 1970 to the year 5138.
WallClock = typing.Annotated[float, Range(0.0, 1e11)]

#: A check built from a type hint: takes a decoded value (anything msgpack gives: hostile until checked, so
#: ``Any`` here, its hint being a run-time object mypy cannot follow) and returns it checked or raises.
Converter = Callable[[Any], Any]
#: (the exact types a plain hint is decoded from, its lowest value, its highest): see :func:`_scalar`.
Scalar = tuple[frozenset, float | None, float | None]


@dataclass(frozen=True)
class Codec:
    """A protocol's frames, as a role's inbox (common/wire/inbox.py) reads and answers them: ``decode`` raises
    ``error`` for anything but a checked message of it."""

    decode: Callable[[bytes], object]
    encode: Callable[[object], bytes]
    error: type[Exception]


def open_envelope(frame: bytes, version: int, types: dict[str, type], error: type[Exception]) -> tuple[type, dict]:
    """(the message class, its fields) of ``frame``; raises ``error`` for anything else."""
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as problem:  # msgpack raises several unrelated types (and StackError for deep nesting)
        raise error(f"not msgpack: {problem}") from None
    if not isinstance(body, dict):
        raise error("message is not a map")
    got = body.pop("v", None)
    if type(got) is not int or got != version:
        raise error(f"protocol version {_short(got)}, expected {version}")
    name = body.pop("t", None)
    cls = types.get(name) if type(name) is str else None
    if cls is None:
        raise error(f"unknown message type {_short(name)}")
    return cls, body


def checked(convert: Converter, body: dict, cls: type, error: type[Exception]) -> Any:
    """``convert(body)``; any failure but the protocol's own error becomes one, naming the type."""
    try:
        return convert(body)
    except error:
        raise
    except Exception as problem:  # a field the converter did not foresee: never the caller's crash
        raise error(f"{cls.__name__}: malformed fields ({type(problem).__name__})") from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --------------------------------------------------------------------------
# The codec: dataclass messages to frames and back, every field checked
# --------------------------------------------------------------------------

def encode(message: object, version: int) -> bytes:
    """``message`` (a dataclass) as one frame: ``v``, ``t`` (its class's name), then its fields."""
    body = {"v": version, "t": type(message).__name__}
    body.update(_fields(message))
    # msgpack packs maps, lists and scalars itself and asks ``default`` only for nested messages: a
    # sink's hello of 5,000 done tasks is one C call, not 5,000 Python ones.
    return msgpack.packb(body, use_bin_type=True, default=_fields)


def decode(frame: bytes, version: int, types: dict[str, type], error: type[Exception]) -> Any:
    """The message in ``frame``, every field checked against its type hint (nested messages, lists
    and maps included), so a receiving loop never meets a wrongly typed value deep inside a message
    it has already started acting on; raises ``error`` for anything else."""
    cls, body = open_envelope(frame, version, types, error)
    return checked(converter(cls, cls.__name__, error), body, cls, error)


# Decoding is hot (the sink decodes tens of thousands of acknowledgements a
# second): each type's check is built once, as closures, instead of walking
# type hints per message (dataclasses.asdict and typing introspection cost
# ~50 us each).

@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _fields(value: object) -> dict:
    """A message's (or nested message's) fields as a map; anything else cannot be sent."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        raise TypeError(f"cannot encode {type(value).__name__}")
    return {name: getattr(value, name) for name in _field_names(type(value))}


#: What msgpack decodes each plain hint from (exact types: bool is not an int here).
_PLAIN = {str: frozenset({str}), int: frozenset({int}), float: frozenset({int, float}), bool: frozenset({bool}),
          bytes: frozenset({bytes}), list: frozenset({list}), dict: frozenset({dict})}


@functools.cache
def _scalar(hint: Any) -> Scalar | None:
    """(the types msgpack decodes ``hint`` from, its lowest and highest value) for a plain hint or a ranged
    one, so the hot paths check a value with one comparison; None for anything else.  A float's bounds are
    the finite ones (NaN fails every comparison, inf the bound); str, bytes and bool have none."""
    base, low, high = hint, -math.inf, math.inf
    if typing.get_origin(hint) is typing.Annotated:
        base = hint.__origin__
        for item in hint.__metadata__:
            if isinstance(item, Range):
                low, high = max(low, item.low), min(high, item.high)
    types = _PLAIN.get(base)
    if types is None:
        return None
    if base is float:
        return types, max(low, -sys.float_info.max), min(high, sys.float_info.max)
    if base is int:
        return types, low, high
    return (types, None, None) if base is hint else None


def _all_fit(scalar: Scalar, values: Any) -> bool:
    """Every value of a list or a map's values fits: C loops (a sink's hello lists 5,000 tasks)."""
    types, low, high = scalar
    if not set(map(type, values)) <= types:
        return False
    if low is None or not values or (low == -math.inf and high == math.inf and float not in types):
        return True
    if float in types and not all(map(math.isfinite, values)):  # min and max skip a NaN
        return False
    return low <= min(values) and max(values) <= high


@functools.cache
def converter(hint: Any, where: str, error: type[Exception]) -> Converter:
    """A function checking a decoded value against ``hint`` (and building
    nested dataclasses from their maps); ``where`` names it in ``error``s."""

    def wrong() -> Exception:
        return error(f"{where} has the wrong type")

    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        base = converter(hint.__origin__, where, error)
        bounds = [item for item in hint.__metadata__ if isinstance(item, Range)]
        forms = [re.compile(item.pattern) for item in hint.__metadata__ if isinstance(item, Matches)]

        def ranged(value: Any) -> Any:
            value = base(value)
            for bound in bounds:
                if not bound.low <= value <= bound.high:
                    raise error(f"{where} is out of its range [{bound.low:g}, {bound.high:g}]")
            for form in forms:
                if form.fullmatch(value) is None:
                    raise error(f"{where} is not of its form {form.pattern}")
            return value
        return ranged
    if isinstance(hint, typing.NewType):  # an opaque value of a plain type: checked as that type
        return converter(hint.__supertype__, where, error)
    if origin in (typing.Union, UnionType):
        options = [converter(option, where, error) for option in typing.get_args(hint)]

        def union(value: Any) -> Any:
            for option in options:
                try:
                    return option(value)
                except error:
                    pass
            raise wrong()
        return union
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # a message class (never an instance)
        hints = typing.get_type_hints(hint, include_extras=True)
        fields = [(f.name, *(_scalar(hints[f.name]) or (None, None, None)),
                   converter(hints[f.name], f"{where}.{f.name}", error),
                   f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                  for f in dataclasses.fields(hint)]
        names = {name for name, *_ in fields}

        def build(value: Any) -> Any:
            if type(value) is not dict:
                raise wrong()
            kwargs = {}
            for name, types, low, high, convert, required in fields:
                if name in value:
                    field_value = value[name]  # inline: a sink decodes tens of thousands of these a second
                    kwargs[name] = field_value if types is not None and type(field_value) in types \
                        and (low is None or low <= field_value <= high) else convert(field_value)
                elif required:
                    raise error(f"{where} lacks {name}")
            if len(kwargs) < len(value):
                raise error(f"{where} has unknown fields {sorted(map(str, set(value) - names))}")
            return hint(**kwargs)
        return build
    if origin is tuple:  # tuple[X, ...]: sent as a list
        item_hint, _ellipsis = typing.get_args(hint)
        as_list = converter(list[item_hint], where, error)

        def as_tuple(value: Any) -> tuple:
            return tuple(as_list(value))
        return as_tuple
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        item, scalar_item = converter(item_hint, where, error), _scalar(item_hint)

        def items(value: Any) -> list:
            if type(value) is not list:
                raise wrong()
            if scalar_item is not None and _all_fit(scalar_item, value):
                return value
            return [item(v) for v in value]
        return items
    if origin is dict:
        key_hint, value_hint = typing.get_args(hint)
        key, val = converter(key_hint, where, error), converter(value_hint, where, error)
        scalar_key, scalar_value = _scalar(key_hint), _scalar(value_hint)

        def mapping(value: Any) -> dict:
            if type(value) is not dict:
                raise wrong()
            if scalar_key is not None and scalar_value is not None and _all_fit(scalar_key, value) \
                    and _all_fit(scalar_value, list(value.values())):
                return value
            return {key(k): val(v) for k, v in value.items()}
        return mapping
    if hint is type(None):
        def none(value: Any) -> None:
            if value is not None:
                raise wrong()
        return none
    accepted = _PLAIN.get(hint, frozenset({hint}))
    if hint is float:
        def finite(value: Any) -> float:
            if type(value) not in accepted:
                raise wrong()
            if not math.isfinite(value):
                raise error(f"{where} is not a finite number")
            return value
        return finite

    def plain(value: Any) -> Any:
        if type(value) not in accepted:
            raise wrong()
        return value
    return plain
