"""Device tensors read back to the host together.

On a GPU every read back (``.cpu()``, ``float()``, ``.tolist()``) waits for the work
queued before it; a section that folds a chunk's columns into its sums on the host read
them one by one, a wait each. :func:`host_arrays` reads them in one copy per dtype.
On the CPU it is ``.numpy()`` of each tensor: no copy, the same arrays as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor


def host_arrays(*tensors: Tensor) -> list[np.ndarray]:
    """Each of ``tensors`` (any shapes, dtypes numpy knows, one device) as a numpy array
    of its shape and dtype; off the CPU, one copy to the host per dtype among them.

    >>> import torch
    >>> a, b = host_arrays(torch.tensor([1.0, 2.0]), torch.tensor([[True], [False]]))
    >>> a.tolist(), b.tolist()
    ([1.0, 2.0], [[True], [False]])
    """
    import torch

    if all(t.device.type == "cpu" for t in tensors):
        return [t.detach().numpy() for t in tensors]
    groups: dict[torch.dtype, list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault(tensor.dtype, []).append(index)
    arrays: list[np.ndarray | None] = [None] * len(tensors)
    for members in groups.values():
        flat = torch.cat([tensors[i].detach().reshape(-1) for i in members]).cpu().numpy()
        start = 0
        for i in members:
            size = tensors[i].numel()
            arrays[i] = flat[start : start + size].reshape(tuple(tensors[i].shape))
            start += size
    return arrays  # type: ignore[return-value]
