"""JSON text parsed within limits, as every reader of ratioscope parses it.

Python's parser raises RecursionError on an array nested some thousand levels deep and
ValueError on an integer of more than 4300 digits, and code that walks a parsed document
recursively can exceed the interpreter's stack on far less. No file ratioscope reads
nests deeper than a few levels, so :func:`loads` refuses documents nested deeper than
:data:`MAX_DEPTH`, and an integer beyond the range of a float (every number ratioscope
reads becomes one: an integer of 400 digits stopped the reader that converted it), and
turns these limits into a ``json.JSONDecodeError``: each reader already turns that into
exit 2 with one sentence naming the file (:func:`problem` words it).
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: the deepest nesting of arrays and objects accepted (reports nest about 8 levels)
MAX_DEPTH = 64


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``, with the limits above as ``json.JSONDecodeError``.

    >>> loads('{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> loads("[" * 100 + "]" * 100)
    Traceback (most recent call last):
    json.decoder.JSONDecodeError: nested deeper than 64 levels: line 1 column 1 (char 0)
    """
    document = text.decode("utf-8") if isinstance(text, (bytes, bytearray)) else text
    try:
        value = json.loads(document, parse_int=_int_of_float_range)
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", "", 0) from None
    except json.JSONDecodeError:
        raise
    except _TooLarge:
        raise json.JSONDecodeError("an integer too large for a float", "", 0) from None
    except ValueError as error:  # the interpreter's limit on the digits of an int
        if "digits" not in str(error):
            raise
        raise json.JSONDecodeError("an integer of more than 4300 digits", "", 0) from None
    if too_deep(value):
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", "", 0)
    return value


#: the largest finite float: an integer beyond it has no float value
_FLOAT_MAX = sys.float_info.max
#: the messages of the limits above, which have no place in the text
_LIMITS = ("nested deeper than", "an integer too large", "an integer of more than")


class _TooLarge(ValueError):
    """An integer beyond the range of a float (raised from within the parser)."""


def _int_of_float_range(digits: str) -> int:
    value = int(digits)
    # the digits first: a float's range needs at most 309 of them, and the comparison
    # of a longer integer with a float is what this guards against
    if len(digits) > 308 and abs(value) > _FLOAT_MAX:
        raise _TooLarge(digits[:12])
    return value


def problem(error: json.JSONDecodeError) -> str:
    """The parser's complaint with where in the text it is (``Expecting ',' delimiter
    at column 74``), or the limit that was reached, which has no place.

    >>> problem(json.JSONDecodeError("Expecting value", '{"a": }', 6))
    'Expecting value at column 7'
    """
    if error.msg.startswith(_LIMITS):
        return error.msg
    return f"{error.msg} at column {error.colno}"


def located(error: json.JSONDecodeError) -> str:
    """:func:`problem` for a whole document: ``line 3, column 7: Expecting value``."""
    if error.msg.startswith(_LIMITS):
        return error.msg
    return f"line {error.lineno}, column {error.colno}: {error.msg}"


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists and dicts deeper than ``limit`` (walked without
    recursion, so that the check itself cannot exceed the stack)."""
    if not isinstance(value, (list, dict)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, (list, dict)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False
