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
:mod:`ratioscope.stats` types, :class:`Record`) writes that and is read by its class's
``from_state``; other dataclasses write their fields; tensors write ``tolist()``; lists,
tuples and dicts are written element by element; numbers and strings as they are. A
field whose layout is a quirk of reports already written declares its codec.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, ClassVar, Literal, TypeVar, cast

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
    ) -> None:
        self.default = default
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

    Returns:
        The declaration, typed as the value: instances hold the value itself.
    """
    # typed as the value, as dataclasses.field is: the class holds the declaration
    return cast(T, Field(default, reduce, key, codec, optional, legacy))


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
        """Restore the declared fields from a block :meth:`dump_state` wrote.

        Raises:
            KeyError: a required key is missing.
        """
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
            setattr(self, f.name, f.codec.load(source) if f.codec.load else load(template, source))


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


def load(template: Any, value: Any) -> Any:
    """``value`` (JSON) read back in the type of ``template``, a field's default; items
    of a list or dict take the type of the template's first item."""
    kind = type(template)
    if callable(getattr(kind, "from_state", None)):
        return kind.from_state(value)
    if isinstance(template, Tensor):
        import torch

        return torch.tensor(value, dtype=template.dtype)
    if is_dataclass(template):
        return kind(**value)
    if isinstance(template, (list, tuple)):
        items = [load(template[0], item) for item in value] if template else list(value)
        return kind(items)
    if isinstance(template, dict):
        if not template:
            return dict(value)
        first = next(iter(template.values()))
        return {key: load(first, item) for key, item in value.items()}
    if isinstance(template, (int, float)) and not isinstance(template, bool):
        return kind(value)
    return value


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
