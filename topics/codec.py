"""Codecs: MessagePack on the wire, JSON (orjson) for humans, dashboards and scripts."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec
import orjson

from runtime.errors import SchemaError
from topics.events import Event
from topics.registry import topic

__all__ = ["encode", "decode", "to_json", "from_json", "to_dict"]

_encoder = msgspec.msgpack.Encoder()


@cache
def _msgpack_decoder(event_type: type[Event]) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(event_type)


def encode(event: Event) -> bytes:
    """Encode an event for the wire."""
    return _encoder.encode(event)


def decode(topic_name: str, data: bytes | None) -> Event:
    """Decode wire bytes of a topic into its event type, or raise SchemaError with the reason."""
    spec = topic(topic_name)
    if data is None:
        raise SchemaError(f"{topic_name}: record has no value (tombstone)")
    try:
        return _msgpack_decoder(spec.event_type).decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SchemaError(f"{topic_name}: not a {spec.event_type.__name__}: {exc}") from exc


def to_dict(event: Event) -> dict[str, Any]:
    """Return every field of an event as JSON-compatible builtins (bytes become base64)."""
    return msgspec.to_builtins(event)


def to_json(event: Event) -> bytes:
    """Encode an event as one line of JSON."""
    return orjson.dumps(to_dict(event))


def from_json(topic_name: str, data: bytes | str) -> Event:
    """Validate JSON into the topic's event type, or raise SchemaError with the reason."""
    spec = topic(topic_name)
    try:
        return msgspec.json.decode(data, type=spec.event_type)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SchemaError(f"{topic_name}: not a valid {spec.event_type.__name__}: {exc}") from exc
