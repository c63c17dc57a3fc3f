"""``ratioscope convert``: a dump in any readable type -> canonical safetensors, streamed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._path_params import path_argument

Input = Annotated[Path, path_argument(help="A dump file (.pt, .npz, .parquet, .jsonl, ...).")]
Output = Annotated[Path, path_argument(help="The .safetensors file to write.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on success.")]


def convert(source: Input, target: Output, quiet: Quiet = False) -> None:
    """Write a dump's canonical tensors to a safetensors file, a chunk of rows at a time.

    Ragged rows are padded on the right, string group labels become ids in order of first
    appearance, everything else is kept as the file holds it (left padding, values on
    masked tokens), so the new file gives the same analysis, read by byte ranges in bounded
    memory. A .pt file is memory-mapped (torch's zip format) or, in the legacy format,
    read whole once.

    Example: ratioscope convert dump/step_0032.pt dump/step_0032.safetensors
    """
    from ratioscope.cli._common import announce_written, check_output_paths, check_suffix
    from ratioscope.io.loaders import refuse_json
    from ratioscope.io.streaming import convert_to_safetensors

    check_output_paths([source], [target])
    check_suffix(target, ".safetensors", "OUT")
    refuse_json(source)
    convert_to_safetensors(source, target)
    announce_written([target], quiet)
