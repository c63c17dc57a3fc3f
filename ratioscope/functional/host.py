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

    The device tensors travel as bytes: each one's bytes (``view(torch.uint8)``), the
    widest dtypes first so that every tensor starts at a multiple of its element size
    (a float64 at a multiple of 8), joined in one ``cat`` and copied once.

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
    # the widest first: a sort on the element size keeps each start aligned to its own
    remote.sort(key=lambda i: -tensors[i].element_size())
    parts = [tensors[i].detach().contiguous().view(-1).view(torch.uint8) for i in remote]
    flat = torch.cat(parts).cpu()
    start = 0
    for i, part in zip(remote, parts, strict=True):
        size = part.numel()
        tensor = tensors[i]
        found[i] = flat[start : start + size].view(tensor.dtype).view(tensor.shape)
        start += size
    return found  # type: ignore[return-value]
