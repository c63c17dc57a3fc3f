"""Token text for the run report: a local Hugging Face ``tokenizer.json`` read with the
``tokenizers`` package (never a download: only a file path is accepted).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.errors import InputError

if TYPE_CHECKING:
    from torch import Tensor


class TokenText:
    """The text of token ids under one tokenizer.

    Raises (at construction):
        InputError: the file is missing, or not a tokenizer the package reads, or the
            ``tokenizers`` package is not installed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(self.path, "tokenizer file does not exist")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise InputError(
                self.path,
                "reading a tokenizer needs the tokenizers package "
                "(pip install 'ratioscope[report]')",
            ) from None
        try:
            self._tokenizer: Any = Tokenizer.from_file(str(self.path))
        except Exception as error:  # the package raises its own exception type
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise InputError(
                self.path, f"not a tokenizer.json the tokenizers package reads ({reason})"
            ) from None
        self.size = int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def check(self, ids: Tensor, source: str) -> None:
        """Refuse ids outside the vocabulary (ids: any shape of integers)."""
        if ids.numel() == 0:
            return
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= self.size:
            bad = low if low < 0 else high
            raise InputError(
                self.path,
                f"the tokenizer's vocabulary ({self.size} tokens) does not cover token id "
                f"{bad} of {source}",
            )

    def texts(self, ids: Iterable[int]) -> dict[int, str]:
        """Each id's text, decoded alone (special tokens kept, so none is blank)."""
        return {i: self._tokenizer.decode([i], skip_special_tokens=False) for i in ids}
