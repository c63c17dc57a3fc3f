"""JSON serialisation shared by every report (analyze and eval).

One writer for every report: values are converted to plain JSON (non-finite floats
become ``null``), keys keep their insertion order, and the file is written atomically.
The same input gives byte-identical JSON; only ``tool.created`` carries a timestamp.
:func:`from_jsonable` is the way back: it rebuilds typed values (dataclasses, unions,
dicts, lists, tuples) from their JSON, driven by the type hints alone.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from math import isfinite
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from ratioscope.errors import ReportError
from ratioscope.io.atomic import atomic_write_text
from ratioscope.io.jsontext import loads, located

#: the version this ratioscope writes; 2 added the typed reader (Report.from_dict), the
#: JSON layout is that of version 1, which is still read
SCHEMA_VERSION = 2
#: versions this ratioscope reads
READABLE_SCHEMA_VERSIONS = (1, 2)


def tool_info() -> dict[str, Any]:
    """The ``tool`` block: name, version and creation time (the only timestamp)."""
    from ratioscope._version import __version__

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
    # a report holds thousands of plain numbers (a histogram's state): those are kept as
    # they are without a call each (the same values the calls give back)
    if is_dataclass(value) and not isinstance(value, type):
        items = ((f.name, getattr(value, f.name)) for f in fields(value))
        return {
            k: v if type(v) is int or (type(v) is float and isfinite(v)) else to_jsonable(v)
            for k, v in items
        }
    if isinstance(value, Mapping):
        return {
            str(k): v if type(v) is int or (type(v) is float and isfinite(v)) else to_jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [
            v if type(v) is int or (type(v) is float and isfinite(v)) else to_jsonable(v)
            for v in value
        ]
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
        document = loads(text)
    except json.JSONDecodeError as error:
        raise ReportError(path, f"not valid JSON ({located(error)})") from None
    if not isinstance(document, dict) or "schema_version" not in document:
        raise ReportError(path, "not a ratioscope report (no 'schema_version' key)")
    check_schema_version(document, path)
    return document


#: what each ratioscope JSON document is, by its "kind" (the newer documents) or a key
#: only it has (the reports, which predate "kind")
_KINDS_BY_NAME = {
    "timeline": "a timeline (ratioscope timeline --json)",
    "comparison": "a comparison (ratioscope compare --json)",
    "objectives": "an objectives report (ratioscope objectives --json)",
    "verdict": "a verdict (analyze --verdict-json)",
}
_KINDS_BY_KEY = (
    ("ratios", "an analyze report"),
    ("by_method", "an evaluation report (eval-passk or eval-ucc --json)"),
    ("sweep", "a sweep report (ratioscope sweep --json)"),
)


def document_kind(document: Any) -> str:
    """What a JSON document is, in words, for messages that refuse one kind where another
    is needed ("eval.json is an evaluation report (eval-passk or eval-ucc --json), not an
    analyze report").

    >>> document_kind({"schema_version": 2, "kind": "timeline"})
    'a timeline (ratioscope timeline --json)'
    >>> document_kind({"schema_version": 2, "by_method": {}})
    'an evaluation report (eval-passk or eval-ucc --json)'
    >>> document_kind([1, 2])
    'a JSON document of another kind'
    """
    if not isinstance(document, Mapping):
        return "a JSON document of another kind"
    name = document.get("kind")
    if isinstance(name, str) and name in _KINDS_BY_NAME:
        return _KINDS_BY_NAME[name]
    for key, kind in _KINDS_BY_KEY:
        if key in document:
            return kind
    return "a JSON document of another kind"


def check_schema_version(document: Mapping[str, Any], source: str | Path | None) -> int:
    """The document's ``schema_version``; a missing, unknown or newer one raises ReportError."""
    version = document.get("schema_version")
    if version is None:
        raise ReportError(source, "not a ratioscope report (no 'schema_version' key)")
    if isinstance(version, bool) or version not in READABLE_SCHEMA_VERSIONS:
        newer = isinstance(version, int) and version > SCHEMA_VERSION
        hint = "; it was written by a newer ratioscope, upgrade to read it" if newer else ""
        raise ReportError(
            source,
            f"report schema version {version} is not one this ratioscope reads "
            f"({', '.join(map(str, READABLE_SCHEMA_VERSIONS))}){hint}",
        )
    return int(version)


def upgrade_pooled_proportion(document: Mapping[str, Any]) -> dict[str, Any]:
    """An analyze report as read now: ``proportion`` keeps its current meaning.

    Reports written before ``proportion_pooled`` existed (schema 1, and schema 2 before
    the field) hold in ``ratios.<variant>.proportion`` the state shares pooled over
    tokens; ``proportion`` now means the shares averaged over sequences (KPO Table 2),
    which such a report cannot give. So a variant row without a ``proportion_pooled``
    key has its ``proportion`` moved there and ``proportion`` left null; rows that have
    the key, and the rest of the document, are returned as they are.

    >>> old = {"ratios": {"token": {"proportion": {"on": 0.5}}}}
    >>> upgrade_pooled_proportion(old)["ratios"]["token"]
    {'proportion': None, 'proportion_pooled': {'on': 0.5}}
    """
    ratios = document.get("ratios")
    if not isinstance(ratios, Mapping):
        return dict(document)
    rows: dict[str, Any] = {}
    for variant, row in ratios.items():
        if isinstance(row, Mapping) and "proportion" in row and "proportion_pooled" not in row:
            upgraded: dict[str, Any] = {}
            for key, value in row.items():
                if key == "proportion":
                    upgraded.update(proportion=None, proportion_pooled=value)
                else:
                    upgraded[key] = value
            row = upgraded
        rows[variant] = row
    return {**document, "ratios": rows}


class JSONShapeError(ValueError):
    """A JSON value that does not fit the type it should become (the message names where)."""


def from_jsonable(hint: Any, value: Any, where: str = "$") -> Any:
    """Rebuild a value of type ``hint`` from the JSON :func:`to_jsonable` made of it.

    Handles dataclasses (also generic ones, ``ByCorrectness[float | None]``), ``X | None``
    and other unions, ``dict[K, V]`` (keys back to int/float where typed so), ``list[T]``,
    ``tuple[...]``, ``Literal`` and ``Any`` (kept as is). A ``null`` in a ``float`` field
    is NaN (to_jsonable writes every non-finite float as null). A dataclass field absent
    from the JSON takes its default (a report older than the field); a key the dataclass
    does not have, or a value of the wrong kind, raises :class:`JSONShapeError` naming
    its path (``$.ratios.token.clip_band``).

    >>> from ratioscope.sections.distribution import Distribution
    >>> from_jsonable(Distribution, {"count": 0, "mean": None, "std": 0.0, "min": None,
    ...                              "max": None, "quantiles": {}}).mean
    nan
    >>> from_jsonable(tuple[float, float] | None, [0.2, 0.28])
    (0.2, 0.28)
    """
    return _rebuild(hint, value, where, {})


def _rebuild(hint: Any, value: Any, where: str, bound: dict[Any, Any]) -> Any:
    if isinstance(hint, TypeVar):
        hint = bound.get(hint, Any)
    if hint is Any or hint is object:
        return value
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is Union or origin is types.UnionType:
        return _union(args, value, where, bound)
    if origin is typing.Literal:
        if value not in args:
            raise JSONShapeError(f"{where}: {value!r} is not one of {args}")
        return value
    if hint in (float, int, str, bool):
        return _scalar(hint, value, where)
    if hint is type(None):
        if value is not None:
            raise JSONShapeError(f"{where}: expected null, found {_kind(value)}")
        return None
    target = origin or hint
    if is_dataclass(target) and isinstance(target, type):
        variables = getattr(target, "__parameters__", ())
        inner = {
            v: bound.get(a, a) if isinstance(a, TypeVar) else a
            for v, a in zip(variables, args, strict=False)
        }
        return _dataclass(target, value, where, inner)
    if target in (dict, Mapping) or target is typing.Dict:  # noqa: UP006
        return _mapping(args, value, where, bound)
    if target in (list, tuple) or target in (typing.List, typing.Tuple):  # noqa: UP006
        return _sequence(target, args, value, where, bound)
    raise JSONShapeError(f"{where}: cannot rebuild a value of type {hint!r} from JSON")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _union(args: tuple[Any, ...], value: Any, where: str, bound: dict[Any, Any]) -> Any:
    if value is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    problems = []
    for option in options:
        try:
            return _rebuild(option, value, where, bound)
        except JSONShapeError as error:
            problems.append(str(error))
    if len(problems) == 1:
        raise JSONShapeError(problems[0])
    names = " | ".join(getattr(o, "__name__", str(o)) for o in options)
    raise JSONShapeError(f"{where}: {_kind(value)} fits none of {names}")


def _scalar(hint: type, value: Any, where: str) -> Any:
    if hint is float:
        if value is None:
            return math.nan  # to_jsonable wrote a NaN or an infinity
        # an int is a float to the type system; kept as is, it is written back the same
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, hint):
        return value
    raise JSONShapeError(f"{where}: expected {hint.__name__}, found {_kind(value)}")


def _dataclass(cls: type, value: Any, where: str, bound: dict[Any, Any]) -> Any:
    if not isinstance(value, Mapping):
        raise JSONShapeError(f"{where}: expected an object ({cls.__name__}), found {_kind(value)}")
    hints = _hints(cls)
    known = {f.name: f for f in fields(cls) if f.init}
    unknown = [key for key in value if key not in known]
    if unknown:
        raise JSONShapeError(f"{where}: unknown key '{unknown[0]}' for {cls.__name__}")
    values = {}
    for name, item in known.items():
        if name in value:
            values[name] = _rebuild(hints[name], value[name], f"{where}.{name}", bound)
        elif item.default is MISSING and item.default_factory is MISSING:
            raise JSONShapeError(f"{where}: no '{name}' (a field of {cls.__name__})")
    return cls(**values)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _mapping(args: tuple[Any, ...], value: Any, where: str, bound: dict[Any, Any]) -> Any:
    if not isinstance(value, Mapping):
        raise JSONShapeError(f"{where}: expected an object, found {_kind(value)}")
    key_type, value_type = args or (str, Any)
    result = {}
    for key, item in value.items():
        typed_key: Any = key
        if key_type in (int, float):
            try:
                typed_key = key_type(key)
            except ValueError:
                raise JSONShapeError(f"{where}: key {key!r} is not a {key_type.__name__}") from None
        result[typed_key] = _rebuild(value_type, item, f"{where}.{key}", bound)
    return result


def _sequence(
    target: Any, args: tuple[Any, ...], value: Any, where: str, bound: dict[Any, Any]
) -> Any:
    if not isinstance(value, list):
        raise JSONShapeError(f"{where}: expected a list, found {_kind(value)}")
    if target in (list, typing.List):  # noqa: UP006
        item_type = args[0] if args else Any
        return [_rebuild(item_type, v, f"{where}.{i}", bound) for i, v in enumerate(value)]
    if not args or (len(args) == 2 and args[1] is Ellipsis):
        item_type = args[0] if args else Any
        return tuple(_rebuild(item_type, v, f"{where}.{i}", bound) for i, v in enumerate(value))
    if len(args) != len(value):
        raise JSONShapeError(f"{where}: expected {len(args)} items, found {len(value)}")
    return tuple(
        _rebuild(t, v, f"{where}.{i}", bound)
        for i, (t, v) in enumerate(zip(args, value, strict=True))
    )


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


# ------------------------------------------------------------------- timeline layout
#: the layout of a timeline document's parts that its readers walk (a hand-edited or
#: damaged file is named where it breaks, not with the error the walk runs into)
_TIMELINE_PARTS: dict[str, Any] = {
    "tool": dict[str, Any],
    "params": dict[str, Any],
    "headlines": list[dict[str, Any]],
    "steps": list[dict[str, Any]],
}
_STEP_PARTS: dict[str, Any] = {
    "step": int,
    "inputs": list[str],
    "values": dict[str, float | None],
    "flags": list[str],
}


def check_timeline_shape(document: Mapping[str, Any], source: str | Path | None) -> None:
    """Raise ReportError naming the first part of a timeline ``document`` that is not laid
    out as ratioscope writes it (``steps.3.values: expected an object, found str``): a
    value that is not a number or null, an infinite or NaN one (the writer writes those
    as null, so only a hand edit puts one there, and a gate would read past it), steps
    out of order.
    """
    try:
        for key, hint in _TIMELINE_PARTS.items():
            if key not in document:
                raise JSONShapeError(f"no '{key}' key")
            from_jsonable(hint, document[key], key)
        previous = None
        for index, step in enumerate(document["steps"]):
            for key, hint in _STEP_PARTS.items():
                if key not in step:
                    raise JSONShapeError(f"steps.{index}: no '{key}' key")
                from_jsonable(hint, step[key], f"steps.{index}.{key}")
            for name, value in step["values"].items():
                if value is not None and not isfinite(value):
                    raise JSONShapeError(
                        f"steps.{index}.values.{name}: {value} (the writer writes null there)"
                    )
            if previous is not None and step["step"] <= previous:
                raise JSONShapeError(
                    f"steps.{index}.step: {step['step']} after {previous} (steps increase)"
                )
            previous = step["step"]
    except JSONShapeError as error:
        raise ReportError(source, f"malformed timeline: {error}") from None
