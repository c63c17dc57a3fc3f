"""Device tensors read back to the host together.

On a GPU every read back (``.cpu()``, ``float()``, ``.tolist()``) waits for the work
queued before it; a section that folds a chunk's columns into its sums on the host read
them one by one, a wait each. :func:`host_tensors` reads any number of them, of any
dtypes, in one copy (``sections.context.HostReads`` gathers a chunk's). On the CPU they
are the tensors' own memory: no copy, the same values as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


def host_tensors(*tensors: Tensor) -> list[Tensor]:
    """Each of ``tensors`` (any shapes and dtypes, CPU or one device) as a CPU tensor of
    its shape and dtype: the CPU's as they are (detached), the device's in one copy.

    The device tensors travel as bytes: those of one dtype joined by a ``cat`` (which
    takes a strided column as it is), each dtype's bytes (``view(torch.uint8)``) the
    widest first so that every tensor starts at a multiple of its element size (a
    float64 at a multiple of 8), joined again and copied once.

    >>> import torch
    >>> a, b = host_tensors(torch.tensor([1.0, 2.0]), torch.tensor([[True], [False]]))
    >>> a.tolist(), b.tolist()
    ([1.0, 2.0], [[True], [False]])
    """
    import torch

    found: list[Tensor | None] = [t.detach() if t.device.type == "cpu" else None for t in tensors]
    remote = [i for i, t in enumerate(found) if t is None]
    if not remote:
        return found  # type: ignore[return-value]
    groups: dict[torch.dtype, list[int]] = {}
    for i in remote:
        groups.setdefault(tensors[i].dtype, []).append(i)
    # the widest first: a sort on the element size keeps each start aligned to its own
    order = sorted(groups.values(), key=lambda members: -tensors[members[0]].element_size())
    parts = [_joined([tensors[i].detach().reshape(-1) for i in members]) for members in order]
    flat = _joined([part.view(torch.uint8) for part in parts]).cpu()
    start = 0
    for members in order:
        for i in members:
            tensor = tensors[i]
            size = tensor.numel() * tensor.element_size()
            found[i] = flat[start : start + size].view(tensor.dtype).view(tensor.shape)
            start += size
    return found  # type: ignore[return-value]


def _joined(parts: list[Tensor]) -> Tensor:
    """``parts`` (1-D) end to end: the one part itself where it is contiguous (no copy)."""
    import torch

    if len(parts) == 1 and parts[0].is_contiguous():
        return parts[0]
    return torch.cat(parts)
