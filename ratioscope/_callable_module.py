"""Modules that are also the function they are named after.

``ratioscope.timeline`` is both a module (``ratioscope.timeline.HEADLINES``) and the
function users call (``ratioscope.timeline(paths)``). Importing a submodule sets the
package's attribute of that name to the module, so whichever is imported first would hide
the other; a module whose class is :class:`CallableModule` is both at once, whatever the
import order.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class CallableModule(types.ModuleType):
    """A module that calls its function of the same name (``ratioscope.verdict(report)``
    runs ``ratioscope.verdict.verdict(report)``); ``inspect.signature`` gives the
    function's signature."""

    def _function(self) -> Any:
        return self.__dict__[self.__name__.rpartition(".")[2]]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function()(*args, **kwargs)

    @property
    def __signature__(self) -> Any:
        import inspect

        return inspect.signature(self._function())


def make_callable(module_name: str) -> None:
    """Turn the module ``module_name`` (already in ``sys.modules``; call this at the end of
    the module) into a :class:`CallableModule`."""
    sys.modules[module_name].__class__ = CallableModule
