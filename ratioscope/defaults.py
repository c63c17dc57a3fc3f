"""Defaults and constants of the library, in a module that imports nothing.

Each default is used by its library home (named beside it) and by the option that sets it
in ``ratioscope/cli/_options.py``; keeping them here, rather than in modules that import
torch or numpy, lets ``ratioscope --help`` show them without loading either. Every layer
may import this module and ``errors`` (docs/architecture.md), the formulas of
``functional/`` included.
Analysis parameters have their defaults in :class:`ratioscope.data.params.AnalysisParams`,
which imports nothing heavy either.
"""

from __future__ import annotations

#: io.loaders.LoadOptions: the key layout (detected) and what NaN/inf on valid tokens do
FORMAT = "auto"
NONFINITE = "error"
#: analysis.analyze (and timeline, sweep, the plots): where chunks are computed; the
#: library and the command line share this default (CUDA when present)
DEVICE = "auto"
#: analysis.analyze: elements of [B, T] per chunk of rows on the CPU (about 16 MB a
#: float32 tensor; 2^20 cost a fifth more time on two cores in per-chunk work,
#: docs/scale.md)
CHUNK_ELEMENTS = 1 << 22
#: analysis.device.chunk_elements_for: on a GPU a chunk is a fixed count of kernel
#: launches whatever its size, so chunks grow, in powers of two up to 2^26 elements, as
#: long as DEVICE_BYTES_PER_ELEMENT x elements stays within DEVICE_MEMORY_SHARE of the
#: device's free memory (the analysis' peak, counted on the emulated device: 110-120
#: bytes a chunk element; docs/performance.md, "The GPU check")
DEVICE_CHUNK_ELEMENTS_MAX = 1 << 26
DEVICE_BYTES_PER_ELEMENT = 128
DEVICE_MEMORY_SHARE = 0.25
#: the fewest tokens a row counts for when a chunk's rows are chosen: the LFR and the
#: periodogram take each row's spectrum on at least 4 x 64 points
#: (functional.token_stats.DEFAULT_N_FREQS), so a chunk of 200,000 two-token rows cost
#: 2 GB when counted as 400,000 elements
CHUNK_ROW_FLOOR = 256


def chunk_rows(chunk_elements: int, width: int) -> int:
    """Rows per chunk of a file of padded length ``width``:
    ``max(1, chunk_elements // max(width, CHUNK_ROW_FLOOR))``.

    >>> chunk_rows(1 << 20, 4096), chunk_rows(1 << 20, 2)
    (256, 4096)
    """
    return max(1, chunk_elements // max(1, width, CHUNK_ROW_FLOOR))


#: analysis.threads and the compiled kernels (functional._kernels): tensors of at most this
#: many elements are analysed on one thread (torch's grain size, ``at::internal::GRAIN_SIZE``)
SERIAL_ELEMENTS = 32768
#: analysis.cache.StepCache: the bound on the step cache's size (2 GiB)
CACHE_MAX_BYTES = 2 << 30
#: ``watch``: seconds between two looks at the run
WATCH_INTERVAL = 1.0
#: ``watch``: seconds a file must go unwritten before it is read
WATCH_SETTLE = 2.0
#: sweep.sweep: the Q/V values of KPO's Sec. 5.4 parameter analysis
QVS = (1e-6, 1e-4, 1e-2)
#: functional.clustering: TF-IDF cosine at or above which correct responses may share a
#: cluster (docs/decisions.md), the linkage, and the token pattern
CLUSTER_THRESHOLD = 0.8
LINKAGE = "single"
TOKEN_PATTERN = r"(?u)\b\w+\b"
#: functional.diversity: pairs per problem for the pairwise similarities, and their seed
MAX_PAIRS = 500
SEED = 0
#: io.samples: the fields that name a sample's method and dataset
METHOD_FIELD = "method"
DATASET_FIELD = "dataset"
