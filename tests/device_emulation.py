"""A second device emulated on the CPU, for the CUDA paths' device handling without a GPU.

Tensors moved to ``cuda`` (``.to("cuda")``, ``device="cuda"``) become :class:`Emulated`:
CPU tensors that say ``device == cuda:0``, so every ``device.type == "cpu"`` check takes
the branch a GPU run takes, and whose tag follows them through every operation. What a
real GPU refuses raises :class:`DeviceMixError` here:

* ``.numpy()`` of a device tensor (it needs ``.cpu()`` first);
* an operation mixing device tensors with CPU tensors of one dimension or more (a 0-dim
  CPU tensor is allowed, as CUDA allows it), or with any CPU tensor where CUDA takes none
  (``cat``, ``gather``, ``index_select``, ``searchsorted``, ...);
* a CPU tensor indexed by a device index, and an advanced assignment across the two.

``.cpu()`` and ``.to("cpu")`` give untagged copies. With an :class:`OperationCount`, the
mode also counts what a GPU would do, by the ratioscope function that asked for it: each
operation on device tensors (a kernel launch, or a view that launches none), the bytes a
launch moves, each read back to the host and each wait for a result's size, and the peak
of device memory. The numbers are the CPU's, so a report made on the emulated device can
be compared with the CPU's (the torch paths against the compiled ones). Operations on
other threads are not checked (torch's function modes are per thread); the analysis runs
its torch work on the calling thread. Built on torch's function modes and two of its
private helpers (``torch._C.DisableTorchFunctionSubclass``, ``torch.utils._pytree``): a
torch release that moves them breaks this file, not the package.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("cuda", 0)

#: operations that take no CPU tensor beside CUDA ones, not even a 0-dim one
STRICT = {
    "cat", "stack", "hstack", "vstack", "concat", "concatenate", "index_select", "gather",
    "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_",
    "searchsorted", "bucketize", "mm", "matmul", "bmm", "dot", "index_add", "index_add_",
    "index_copy", "index_copy_", "index_fill", "index_fill_", "take", "take_along_dim",
    "masked_scatter", "masked_scatter_", "index_reduce", "index_reduce_", "put", "put_",
    "__matmul__", "__rmatmul__", "bincount", "histc",
}  # fmt: skip
#: operations that read a tensor's metadata only
METADATA = {
    "__get__", "__set__", "__repr__", "__format__", "__str__", "dim", "size", "numel",
    "__len__", "stride", "is_contiguous", "data_ptr", "element_size", "storage_offset",
    "untyped_storage", "__hash__", "is_floating_point", "is_complex", "nelement",
    "ndimension", "__reduce_ex__", "__deepcopy__",
}  # fmt: skip
IN_PLACE = {
    "__setitem__",
    "__iadd__",
    "__isub__",
    "__imul__",
    "__itruediv__",
    "__ior__",
    "__iand__",
}

#: operations that give a view of their tensor or allocate one: no kernel runs on a GPU
VIEWS = {
    "empty", "empty_like", "new_empty",
    "view", "view_as", "reshape", "reshape_as", "unsqueeze", "squeeze", "t", "T",
    "transpose", "permute", "expand", "expand_as", "narrow", "select", "flatten",
    "unflatten", "movedim", "diagonal", "unbind", "split", "chunk", "tensor_split",
    "as_strided", "detach", "real", "imag", "view_as_real", "unfold",
}  # fmt: skip
#: operations that read a device tensor on the host: each waits for the GPU to finish
READS = {
    "cpu", "item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__",
    "__array__",
}  # fmt: skip

#: operations whose result's size depends on the values: a GPU computes it, then the
#: host waits for it before it can allocate the result
DATA_SIZED = {
    "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive",
    "repeat_interleave", "bincount",
}  # fmt: skip

_state = threading.local()


class DeviceMixError(RuntimeError):
    """What a GPU would have refused."""


class Emulated(Tensor):
    """A CPU tensor that stands for one on the device."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return DEVICE

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if not getattr(_state, "active", 0) and _name(func) not in METADATA:
            raise DeviceMixError(f"{_name(func)} of a device tensor outside the checked thread")
        return super().__torch_function__(func, types, args, kwargs or {})


def tag(value: Any) -> Any:
    if isinstance(value, Tensor) and not isinstance(value, Emulated):
        with torch._C.DisableTorchFunctionSubclass():
            return value.as_subclass(Emulated)
    return value


def untag(value: Any) -> Any:
    if isinstance(value, Emulated):
        with torch._C.DisableTorchFunctionSubclass():
            return value.as_subclass(Tensor)
    return value


def _name(func: Any) -> str:
    return getattr(func, "__name__", str(func))


def _is_device(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return isinstance(value, str) and value.startswith("cuda")


def _is_cpu(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cpu"
    return value == "cpu"


def _same_dtype(tensor: Tensor, args: tuple, kwargs: dict) -> bool:
    """Whether ``tensor.to(*args[1:], **kwargs)`` asks only for the dtype it has (torch
    returns the tensor itself: no kernel)."""
    dtypes = [a for a in args[1:] if isinstance(a, torch.dtype)]
    if "dtype" in kwargs:
        dtypes.append(kwargs["dtype"])
    others = [a for a in args[1:] if not isinstance(a, torch.dtype)]
    return dtypes == [tensor.dtype] and not others and not kwargs.get("copy", False)


def _advanced(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(item, (Tensor, list)) or hasattr(item, "__array__") for item in items)


class OperationCount:
    """What a run on the emulated device asked of the device, by the innermost function
    of the ``ratioscope`` package on the stack (:func:`_caller`): ``launches`` (an
    operation that runs a kernel on a GPU), ``views`` (one that only reshapes),
    ``reads`` (a copy of a device tensor to the host, which waits for the GPU: ``.cpu()``
    and its kin, or a host tensor assigned a device one),
    ``uploads`` (a copy of a host tensor to the device), ``waits`` (launches whose
    result's size depends on the values, a boolean mask's index among them: the host
    waits for the GPU there too, without a read of its own) and ``moved`` (bytes), each
    a counter by (section, function); ``peak_bytes`` for the whole run."""

    def __init__(self) -> None:
        self.launches: collections.Counter[tuple[str, str]] = collections.Counter()
        self.views: collections.Counter[tuple[str, str]] = collections.Counter()
        self.reads: collections.Counter[tuple[str, str]] = collections.Counter()
        self.uploads: collections.Counter[tuple[str, str]] = collections.Counter()
        self.waits: collections.Counter[tuple[str, str]] = collections.Counter()
        #: bytes of the device tensors each launch takes and gives (its arguments and
        #: results by their sizes: what it reads and writes, roughly)
        self.moved: collections.Counter[tuple[str, str]] = collections.Counter()
        #: the most bytes of device storage alive at once (each storage counted once,
        #: while a device tensor on it is alive): what a GPU's allocator must hold
        self.peak_bytes = 0
        self._live_bytes = 0
        self._holders: collections.Counter[int] = collections.Counter()
        self._sizes: dict[int, int] = {}

    def record(self, name: str, args: tuple, kwargs: dict) -> tuple[str, str] | None:
        """One call of the mode, before its arguments are rewritten; where it was asked
        for when it is a launch (for :meth:`add_moved`), else None."""
        if name in METADATA or name in ("__get__", "__set__"):
            return None
        first = args[0] if args and isinstance(args[0], Tensor) else None
        target = kwargs.get("device")
        if name == "to":
            target = next((a for a in args[1:] if isinstance(a, (str, torch.device))), target)
        on_device = any(isinstance(t, Emulated) for t in tree_flatten((args, kwargs))[0])
        if name == "to" and first is not None and target is not None:
            if isinstance(first, Emulated) and _is_cpu(target):
                self.reads[_caller()] += 1
            elif not isinstance(first, Emulated) and _is_device(target):
                self.uploads[_caller()] += 1
            elif on_device:
                where = _caller()
                self.launches[where] += 1  # a dtype conversion on the device
                return where
        elif on_device and name in READS:
            self.reads[_caller()] += 1
        elif on_device and name in ("__setitem__", "copy_") and not isinstance(first, Emulated):
            # a device tensor written into a host one: a copy back that waits, as .cpu()
            self.reads[_caller()] += 1
        elif (on_device or _is_device(target)) and (
            name in VIEWS  # torch.empty(..., device="cuda") among them: no kernel
            or (name == "__getitem__" and not _advanced(args[1]))
            # a contiguous tensor's .contiguous() is the tensor itself: no kernel
            or (name == "contiguous" and first is not None and first.is_contiguous())
            # and so is .to() of the dtype it has
            or (name == "to" and first is not None and _same_dtype(first, args, kwargs))
        ):
            self.views[_caller()] += 1
        elif on_device or _is_device(target):
            where = _caller()
            self.launches[where] += 1
            if name in DATA_SIZED or (name == "__getitem__" and _boolean(args[1])):
                self.waits[where] += 1
            return where
        return None

    def hold(self, value: Any) -> None:
        """The device tensors of ``value`` now alive: their storages count until the
        last of them is gone."""
        for tensor in tree_flatten(value)[0]:
            if not isinstance(tensor, Emulated):
                continue
            storage = tensor.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if not key or not size:
                continue
            if not self._holders[key]:
                self._sizes[key] = size
                self._live_bytes += size
                self.peak_bytes = max(self.peak_bytes, self._live_bytes)
            self._holders[key] += 1
            weakref.finalize(tensor, self._release, key)

    def _release(self, key: int) -> None:
        self._holders[key] -= 1
        if not self._holders[key]:
            del self._holders[key]
            self._live_bytes -= self._sizes.pop(key)

    def launch(self, moved: int) -> None:
        """One launch of a fused kernel (a stand-in for a Triton kernel, which the
        emulated device cannot compile) moving ``moved`` bytes, by its caller."""
        where = _caller()
        self.launches[where] += 1
        self.moved[where] += moved

    def add_moved(self, where: tuple[str, str], tensors: list[Tensor], out: Any) -> None:
        """The bytes of a launch's device arguments ``tensors`` and its results ``out``."""
        results = [t for t in tree_flatten(out)[0] if isinstance(t, Tensor)]
        self.moved[where] += sum(t.numel() * t.element_size() for t in [*tensors, *results])


def _caller() -> tuple[str, str]:
    """(section, function) that asked: the innermost ``ratioscope.sections`` module on
    the stack (else the innermost ratioscope module) and the innermost ratioscope frame's
    ``module:function``."""
    frame = sys._getframe(2)
    function = section = ""
    while frame is not None and not section:
        module = frame.f_globals.get("__name__", "")
        if module == "ratioscope" or module.startswith("ratioscope."):
            function = function or f"{module}:{frame.f_code.co_name}"
            if module.startswith("ratioscope.sections."):
                section = module
        frame = frame.f_back
    return section or function.partition(":")[0] or "(outside ratioscope)", function


def _boolean(index: Any) -> bool:
    """Whether an index holds a boolean tensor (its result's size is its count)."""
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(item, Tensor) and item.dtype == torch.bool for item in items)


class SecondDevice(TorchFunctionMode):
    """The mode that tags, propagates and checks (see the module); ``count``, when given,
    records each operation on device tensors."""

    def __init__(self, count: OperationCount | None = None) -> None:
        super().__init__()
        self.count = count

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        _state.active = getattr(_state, "active", 0) + 1
        try:
            return self._run(func, args, dict(kwargs or {}))
        finally:
            _state.active -= 1

    def _run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        name = _name(func)
        if name == "cuda" and args and isinstance(args[0], Tensor):  # a copy to the device
            name, func, args, kwargs = "to", Tensor.to, (args[0], DEVICE), {}
        launched = self.count.record(name, args, kwargs) if self.count is not None else None
        first = args[0] if args and isinstance(args[0], Tensor) else None
        if name == "__get__":  # an attribute: .T, .real, .data follow their tensor
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            if isinstance(out, Tensor) and isinstance(first, Emulated):
                return self._held(tag(out))
            return out
        want: bool | None = None  # True: the result is on the device; False: on the CPU
        if _is_device(kwargs.get("device")):
            kwargs["device"], want = "cpu", True
        elif _is_cpu(kwargs.get("device")):
            want = False
        if name == "to" and first is not None:
            moved: list[Any] = [first]
            for arg in args[1:]:
                if _is_device(arg):
                    moved.append(torch.device("cpu"))
                    want = True
                else:
                    want = False if _is_cpu(arg) else want
                    moved.append(arg)
            args = tuple(moved)
        if name == "cpu":
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            return untag(out.clone() if out is first else out)
        if name in ("numpy", "__array__") and isinstance(first, Emulated):
            raise DeviceMixError(f".numpy() of a device tensor {tuple(first.shape)}")
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)]
        tagged = [t for t in tensors if isinstance(t, Emulated)]
        self._check(name, args, first, tensors, tagged)
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if launched is not None and self.count is not None:
            self.count.add_moved(launched, tagged, out)
        in_place = (name.endswith("_") and not name.endswith("__")) or name in IN_PLACE
        if in_place or (isinstance(out, Tensor) and out is first and want is None):
            return out
        if want or (want is None and tagged and name != "numpy"):
            return self._held(tree_map(lambda x: tag(x) if isinstance(x, Tensor) else x, out))
        if want is False:
            return tree_map(lambda x: untag(x) if isinstance(x, Tensor) else x, out)
        return out

    def _held(self, value: Any) -> Any:
        if self.count is not None:
            self.count.hold(value)
        return value

    @staticmethod
    def _check(
        name: str, args: tuple, first: Tensor | None, tensors: list[Tensor], tagged: list
    ) -> None:
        if name in ("__getitem__", "__setitem__") and first is not None:
            index = [t for t in tree_flatten(args[1])[0] if isinstance(t, Tensor)]
            if not isinstance(first, Emulated) and any(isinstance(t, Emulated) for t in index):
                raise DeviceMixError(f"a CPU tensor {tuple(first.shape)} indexed on the device")
            value = args[2] if name == "__setitem__" else None
            if isinstance(value, Tensor) and isinstance(value, Emulated) != isinstance(
                first, Emulated
            ):
                scalar = isinstance(first, Emulated) and value.dim() == 0
                if not scalar and _advanced(args[1]):
                    raise DeviceMixError(f"an advanced assignment across devices ({name})")
            return
        if not tagged or name in METADATA or name in ("copy_", "__set__"):
            return
        cpu = [t for t in tensors if not isinstance(t, Emulated)]
        if name not in STRICT:
            cpu = [t for t in cpu if t.dim() > 0]
        if cpu:
            raise DeviceMixError(
                f"{name} of device tensors {[tuple(t.shape) for t in tagged][:3]} and CPU "
                f"tensors {[tuple(t.shape) for t in cpu][:3]}"
            )


def resolve_device(name: str) -> torch.device:
    """``ratioscope.analysis.device.resolve_device`` with ``cuda`` the emulated device:
    patched in where ``analyze(device="cuda")`` is to run on it."""
    return DEVICE if name.startswith("cuda") else torch.device(name)


_TORCH_MEMORY = torch.cuda.mem_get_info


def host_memory(device: Any = None) -> tuple[int, int]:
    """``torch.cuda.mem_get_info`` of the emulated device: the host's (free, total) bytes."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


@contextmanager
def second_device(count: OperationCount | None = None) -> Iterator[None]:
    """Inside, ``cuda`` is the emulated device (pair it with a ``resolve_device`` that
    returns :data:`DEVICE` for ``"cuda"``), whose free memory is the host's unless a
    test set ``torch.cuda.mem_get_info`` before; ``count`` records what it is asked."""
    asked = torch.cuda.mem_get_info
    if asked is _TORCH_MEMORY:
        torch.cuda.mem_get_info = host_memory
    try:
        with SecondDevice(count):
            yield
    finally:
        torch.cuda.mem_get_info = asked
