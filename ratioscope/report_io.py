"""JSON serialisation shared by every report (analyze and eval).

One writer for every report: values are converted to plain JSON (non-finite floats
become ``null``), keys keep their insertion order, and the file is written atomically.
The same input gives byte-identical JSON; only ``tool.created`` carries a timestamp.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from ratioscope.errors import ReportError
from ratioscope.io.atomic import atomic_write_text

SCHEMA_VERSION = 1


def tool_info() -> dict[str, Any]:
    """The ``tool`` block: name, version and creation time (the only timestamp)."""
    from ratioscope import __version__

    created = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    return {"name": "ratioscope", "version": __version__, "created": created}


def to_jsonable(value: Any) -> Any:
    """Convert dataclasses, numpy/torch scalars and arrays, tuples and paths to JSON types.

    Non-finite floats become None, since JSON has no NaN; a reader sees ``null``.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # numpy arrays/scalars and torch tensors
        return to_jsonable(value.tolist())
    if hasattr(value, "item"):
        return to_jsonable(value.item())
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")


def dumps(document: Any) -> str:
    """Serialise a report document deterministically (two-space indent, trailing newline)."""
    return json.dumps(to_jsonable(document), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_json(document: Any, path: str | Path) -> None:
    """Write a report atomically: a temporary file beside ``path``, then a rename."""
    atomic_write_text(path, dumps(document))


def read_json_report(path: str | Path) -> dict[str, Any]:
    """Read a report JSON written by ratioscope and check its schema version."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ReportError(path, "not a JSON report (the file is binary, not UTF-8 text)") from None
    except OSError as error:
        raise ReportError(path, f"cannot read the report ({error.strerror or error})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReportError(
            path, f"not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
        ) from None
    if not isinstance(document, dict) or "schema_version" not in document:
        raise ReportError(path, "not a ratioscope report (no 'schema_version' key)")
    if document["schema_version"] != SCHEMA_VERSION:
        raise ReportError(
            path,
            f"report schema version {document['schema_version']} is not the supported "
            f"version {SCHEMA_VERSION}",
        )
    return document


_MISSING = object()


def lookup(document: Mapping[str, Any], dotted: str) -> Any:
    """Follow a dotted path (``ratios.kalman.switch_frequency``, ``pass_at_k.8``).

    List elements are addressed by integer index. Keys that contain dots themselves
    (the quantiles ``"0.99"``, ``fraction_below."0.5"``) are matched too: the plain split
    on dots is tried first, then the parts are re-joined. Raises KeyError naming the
    first part of the plain split that does not exist.

    >>> lookup({"quantiles": {"0.99": 2.5}, "k": [1, 2]}, "quantiles.0.99")
    2.5
    >>> lookup({"k": [1, 2]}, "k.-1")
    2
    """
    try:
        return _plain_lookup(document, dotted)
    except KeyError as error:
        try:
            return _dotted_key_lookup(document, dotted.split("."))
        except KeyError:
            raise error from None


def _plain_lookup(document: Mapping[str, Any], dotted: str) -> Any:
    node: Any = document
    walked: list[str] = []
    for part in dotted.split("."):
        walked.append(part)
        found: Any = _MISSING
        if isinstance(node, Mapping):
            found = node.get(part, _MISSING)
        elif isinstance(node, list) and part.lstrip("-").isdigit():
            index = int(part)
            if -len(node) <= index < len(node):
                found = node[index]
        if found is _MISSING:
            raise KeyError(".".join(walked))
        node = found
    return node


def _dotted_key_lookup(node: Any, parts: list[str]) -> Any:
    """Follow ``parts`` where some keys contain dots, longest join first at each level."""
    if not parts:
        return node
    if isinstance(node, Mapping):
        for end in range(len(parts), 0, -1):
            key = ".".join(parts[:end])
            if key in node:
                try:
                    return _dotted_key_lookup(node[key], parts[end:])
                except KeyError:
                    continue
    elif isinstance(node, list) and parts[0].lstrip("-").isdigit():
        index = int(parts[0])
        if -len(node) <= index < len(node):
            return _dotted_key_lookup(node[index], parts[1:])
    raise KeyError(parts[0])
