"""Section state declared once: what an accumulator keeps, how it merges, how it is written.

An accumulator (or a record nested in one, such as the sums of one ratio variant)
declares each piece of its mergeable state once, as a class attribute::

    class TepoAccumulator(Accumulator):
        log_weight = mergeable(Histogram, "merge")  # per sequence log w
        outside = mergeable(int, "sum")  # sequences with w outside the band
        no_entropy: list[str] = mergeable(list, "extend")

and :class:`Declared` does the rest: every instance starts from the defaults,
``merge`` reduces field by field, ``state()`` writes the JSON block in declaration
order and ``from_state`` reads it back, in the type of the field's default.

Reductions (``reduce``):

- ``"sum"``: numbers and tensors add; lists add element by element; dicts add key by
  key (a key only the other side has is copied over).
- ``"max"``; ``"min_index"``: the smaller of two optional indices (None: none yet).
- ``"extend"``: lists concatenate (files noted in order); ``"union"``: the same without
  repeats.
- ``"merge"``: the value's own ``merge``, in place or returning the merged value (frozen
  sums); lists and dicts of such values merge element by element and key by key.
- ``"same"``: values that must agree (the lambdas of a sweep); merging fails otherwise.

JSON, where no :class:`Codec` is declared: a value with a ``state()`` method (the
:mod:`ratioscope.sections.summaries` types, :class:`Record`) writes that and is read by its class's
``from_state``; other dataclasses write their fields; tensors write ``tolist()``; lists,
tuples and dicts are written element by element; numbers and strings as they are. A
field whose layout is a quirk of reports already written declares its codec.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, ClassVar, Literal, TypeVar, cast

import torch
from torch import Tensor

T = TypeVar("T")
ReduceName = Literal["sum", "max", "min_index", "extend", "union", "merge", "same"]


@dataclass(frozen=True)
class Codec:
    """A field's own JSON layout; a side left None uses the default.

    Attributes:
        dump: value -> JSON value written under the field's key.
        load: JSON value -> value.
        flat: ``dump`` returns several keys, written in the field's place in the block,
            and ``load`` is given the whole block (a field spread over several keys).
    """

    dump: Callable[[Any], Any] | None = None
    load: Callable[[Any], Any] | None = None
    flat: bool = False


class Field:
    """One declared piece of state; made by :func:`mergeable`."""

    name: str

    def __init__(
        self,
        default: Callable[[], Any],
        reduce: ReduceName | Callable[[Any, Any], Any],
        key: str | None,
        codec: Codec | None,
        optional: bool,
        legacy: Callable[[Any], Any] | None,
        minimum: float | None = None,
    ) -> None:
        self.default = default
        self.minimum = minimum
        self.reduce = _REDUCTIONS[reduce] if isinstance(reduce, str) else reduce
        self.key = key or ""
        self.codec = codec or Codec()
        self.optional = optional or legacy is not None
        self.legacy = legacy

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.key = self.key or name


def mergeable(
    default: Callable[[], T],
    reduce: ReduceName | Callable[[Any, Any], Any],
    *,
    key: str | None = None,
    codec: Codec | None = None,
    optional: bool = False,
    legacy: Callable[[Any], Any] | None = None,
    minimum: float | None = None,
) -> T:
    """Declare a piece of mergeable state as a class attribute of a :class:`Declared`.

    Args:
        default: makes the starting value of each instance (``int``, ``Histogram``, a
            lambda); an ``__init__`` may replace it where it depends on the parameters.
        reduce: how two values merge: a name listed in the module docstring, or a
            function ``(mine, theirs) -> merged``.
        key: the JSON key (default: the attribute's name).
        codec: a JSON layout other than the default.
        optional: a block without the key restores the default (reports written before
            the field existed); otherwise the key is required.
        legacy: like ``optional``, but the value for such reports is computed from the
            fields declared before this one.
        minimum: the least value a number may take (a sum of non-negative values: 0);
            a state with less is refused when read.

    Returns:
        The declaration, typed as the value: instances hold the value itself.
    """
    # typed as the value, as dataclasses.field is: the class holds the declaration
    return cast(T, Field(default, reduce, key, codec, optional, legacy, minimum))


class Declared:
    """A class whose mergeable state is declared with :func:`mergeable`."""

    _declared: ClassVar[tuple[Field, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = {f.name: f for f in cls._declared}
        declared.update((v.name, v) for v in vars(cls).values() if isinstance(v, Field))
        cls._declared = tuple(declared.values())

    def init_state(self) -> None:
        """Every declared field at its default."""
        for f in self._declared:
            setattr(self, f.name, f.default())

    def merge_state(self, other: Declared) -> None:
        """Fold ``other``'s declared fields into this one's, each by its reduction."""
        if type(other) is not type(self):
            raise TypeError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        if not torch.is_inference_mode_enabled():  # entered once, not by each nested record
            with torch.inference_mode():
                self.merge_state(other)
            return
        for f in self._declared:
            setattr(self, f.name, f.reduce(getattr(self, f.name), getattr(other, f.name)))

    def dump_state(self) -> dict[str, Any]:
        """The JSON block of the declared fields, in declaration order."""
        block: dict[str, Any] = {}
        for f in self._declared:
            value = getattr(self, f.name)
            dumped = f.codec.dump(value) if f.codec.dump else dump(value)
            if f.codec.flat:
                block.update(dumped)
            else:
                block[f.key] = dumped
        return block

    def load_state(self, block: dict[str, Any]) -> None:
        """Restore the declared fields from a block :meth:`dump_state` wrote, each checked
        against its default: the same type, the same length for fixed layouts (a
        histogram's bins, one entry a ratio state), counts non-negative integers, and
        numbers never null (see :func:`load`).

        Raises:
            KeyError: a required key is missing.
            StateError: a value that does not fit its field, naming the field.
        """
        if not isinstance(block, dict):
            raise StateError([], f"is {_kind(block)}, not an object")
        for f in self._declared:
            if f.codec.flat:
                source: Any = block
            elif f.key in block:
                source = block[f.key]
            elif f.legacy is not None:
                setattr(self, f.name, f.legacy(self))
                continue
            elif f.optional:
                continue
            else:
                raise KeyError(f.key)
            template = getattr(self, f.name)
            path = [] if f.codec.flat else [f.key]
            try:
                value = f.codec.load(source) if f.codec.load else load(template, source)
                if f.minimum is not None and not value >= f.minimum:
                    raise StateError([], f"is {value!r}, below its least value {f.minimum}")
            except StateError as error:
                raise error.under(*path) from None
            except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as error:
                raise StateError(path, f"is malformed ({type(error).__name__}: {error})") from None
            setattr(self, f.name, value)


class Record(Declared):
    """Mergeable state nested in an accumulator (one variant's or one lambda's sums): its
    fields are declared with :func:`mergeable` and it merges, writes and restores by them."""

    def __init__(self) -> None:
        self.init_state()

    def merge(self, other: Record) -> None:
        self.merge_state(other)

    def state(self) -> dict[str, Any]:
        return self.dump_state()

    @classmethod
    def from_state(cls, block: dict[str, Any]) -> Record:
        record = cls()
        record.load_state(block)
        return record


# ------------------------------------------------------------------------ default JSON
def dump(value: Any) -> Any:
    """A value's JSON form (see the module docstring); non-finite floats are left to the
    report writer, which writes them as null."""
    if callable(getattr(value, "state", None)):
        return value.state()
    if isinstance(value, Tensor):
        return value.tolist()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [dump(item) for item in value]
    if isinstance(value, dict):
        return {key: dump(item) for key, item in value.items()}
    return value


class StateError(ValueError):
    """A value of a report's ``state`` block that does not fit its field: wrong type,
    null, a negative count, a length other than the field's layout."""

    def __init__(self, path: list[str], problem: str) -> None:
        self.path = path
        self.problem = problem
        where = ".".join(path)
        super().__init__(f"'{where}' {problem}" if where else problem)

    def under(self, *keys: Any) -> StateError:
        """The same problem, with ``keys`` in front of its path."""
        return StateError([str(k) for k in keys] + self.path, self.problem)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _shown(value: Any) -> str:
    """A value in a message: ``null``, or its type and its start (``str 'abc'``)."""
    return "null" if value is None else f"{_kind(value)} {value!r:.40}"


def check_count(value: Any) -> int:
    """A count read from a state block: an int (not a bool), at least 0.

    >>> check_count(3)
    3
    >>> check_count(-1)
    Traceback (most recent call last):
    ratioscope.sections.state.StateError: is -1; a count cannot be negative
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateError([], f"is {_shown(value)}, not a count")
    if value < 0:
        raise StateError([], f"is {value}; a count cannot be negative")
    return value


def check_number(value: Any) -> float:
    """A float read from a state block: a number (not a bool, not null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StateError([], f"is {_shown(value)}, not a number")
    return float(value)


def check_fields(value: Any) -> Any:
    """A dataclass read from a state block, its int fields counts and its float fields
    numbers (a log-sum may be -inf)."""
    for f in fields(value):
        item = getattr(value, f.name)
        try:
            if isinstance(f.default, int) and not isinstance(f.default, bool):
                check_count(item)
            elif isinstance(f.default, float):
                check_number(item)
        except StateError as error:
            raise error.under(f.name) from None
    return value


def load(template: Any, value: Any) -> Any:
    """``value`` (JSON) read back in the type of ``template``, a field's default; items
    of a list or dict take the type of the template's first item.

    The value must fit the template: ints are counts (non-negative), floats numbers,
    tensors of the template's shape when it has a fixed one (the bins of a histogram),
    and integer tensors counts; lists as long as a non-empty template (one entry per
    ratio state), dicts objects.

    Raises:
        StateError: naming where in ``value`` it does not fit.
    """
    kind = type(template)
    if callable(getattr(kind, "from_state", None)):
        return kind.from_state(value)
    if isinstance(template, Tensor):
        return _load_tensor(template, value)
    if is_dataclass(template):
        if not isinstance(value, dict):
            raise StateError([], f"is {_kind(value)}, not an object")
        return check_fields(kind(**value))
    if isinstance(template, (list, tuple)):
        if not isinstance(value, list):
            raise StateError([], f"is {_kind(value)}, not a list")
        if template and len(value) != len(template):
            raise StateError([], f"has {len(value)} entries, not {len(template)}")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(load(template[index], item) if template else item)
            except StateError as error:
                raise error.under(index) from None
        return kind(items)
    if isinstance(template, dict):
        if not isinstance(value, dict):
            raise StateError([], f"is {_kind(value)}, not an object")
        if not template:
            return dict(value)
        first = next(iter(template.values()))
        loaded = {}
        for key, item in value.items():
            try:
                loaded[key] = load(template.get(key, first), item)
            except StateError as error:
                raise error.under(key) from None
        return loaded
    if isinstance(template, bool):
        if not isinstance(value, bool):
            raise StateError([], f"is {_kind(value)}, not true or false")
        return value
    if isinstance(template, int):
        return check_count(value)
    if isinstance(template, float):
        return check_number(value)
    return value


def _load_tensor(template: Tensor, value: Any) -> Tensor:
    import torch

    if not isinstance(value, list):
        raise StateError([], f"is {_kind(value)}, not a list")
    try:
        tensor = torch.tensor(value, dtype=template.dtype)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise StateError([], "is not a list of numbers") from None
    if template.numel() and tensor.shape != template.shape:
        raise StateError(
            [], f"has the shape {list(tensor.shape)}, not {list(template.shape)} (its layout)"
        )
    if not template.is_floating_point() and bool((tensor < 0).any()):
        raise StateError([], "holds a negative count")
    return tensor


# ------------------------------------------------------------------------- reductions
def _sum(mine: Any, theirs: Any) -> Any:
    if isinstance(mine, dict):
        total = dict(mine)
        for key, value in theirs.items():
            total[key] = _sum(total[key], value) if key in total else copy.deepcopy(value)
        return total
    if isinstance(mine, list):
        return [_sum(a, b) for a, b in zip(mine, theirs, strict=True)]
    return mine + theirs


def _merge(mine: Any, theirs: Any) -> Any:
    if isinstance(mine, dict):
        return {key: _merge(value, theirs[key]) for key, value in mine.items()}
    if isinstance(mine, list):
        return [_merge(a, b) for a, b in zip(mine, theirs, strict=True)]
    merged = mine.merge(theirs)
    return mine if merged is None else merged


def _min_index(mine: int | None, theirs: int | None) -> int | None:
    present = [i for i in (mine, theirs) if i is not None]
    return min(present) if present else None


def _same(mine: Any, theirs: Any) -> Any:
    if mine != theirs:
        raise ValueError(f"values that must agree differ: {mine!r} and {theirs!r}")
    return mine


_REDUCTIONS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": _sum,
    "max": max,
    "min_index": _min_index,
    "extend": lambda mine, theirs: [*mine, *theirs],
    "union": lambda mine, theirs: [*mine, *(x for x in theirs if x not in mine)],
    "merge": _merge,
    "same": _same,
}
