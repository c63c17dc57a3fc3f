"""Load dumps into :class:`~ratioscope.data.batch.TokenBatch`: paths, profiles, ragged padding.

``load(path)`` reads one file (or concatenates the files of a directory or glob);
``load_file(path)`` reads exactly one, which is how analyses of many files stream them
with memory bounded by the largest file.
"""

from __future__ import annotations

import glob
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path, PosixPath, WindowsPath
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from ratioscope import defaults
from ratioscope.data.batch import REWARD_FUNCTION_PREFIX, SEQUENCE_KEYS, TokenBatch
from ratioscope.data.raw import as_ragged, is_rows
from ratioscope.errors import (
    InputError,
    NotADumpError,
    ParameterError,
    ShapeMismatchError,
    SkippedFileError,
    UnreadablePathError,
)
from ratioscope.io.jsontext import loads
from ratioscope.io.paths import refuse_empty_path
from ratioscope.io.profiles import Profile, detect_profile, get_profile, resolve_keys
from ratioscope.io.readers import SUFFIXES, RawDump, read_raw

if TYPE_CHECKING:
    from ratioscope.data.trainer_settings import TrainerSettings

_GLOB_CHARS = re.compile(r"[*?\[]")
T = TypeVar("T")
P = TypeVar("P", bound=Path)


@dataclass(frozen=True)
class LoadOptions:
    """How to read dumps.

    Attributes:
        format: profile name or "auto" (detect from the keys).
        mapping: canonical -> key in the file, patching single keys (``--map``).
        nonfinite: "error" or "mask" (NaN/inf on valid tokens).
        unsafe_pickle: allow arbitrary unpickling (``.pkl``, non-weights-only ``.pt``).
        group_size: when a file has no group ids, consecutive rows in blocks of this
            many form the GRPO groups (TRL orders the completions of a prompt so).
        stream_bytes: files of at least this many bytes are analysed chunk by chunk
            straight from the file (:mod:`ratioscope.io.streaming`); None reads
            ``RATIOSCOPE_STREAM_BYTES`` from the environment, else 128 MiB. The numbers do
            not depend on it, only the memory does.
        correct_field: the key whose value decides ``correct`` (a file key, e.g. one
            reward function's column, or ``"rewards"``); None: the file's own ``correct``
            where it has one, else ``rewards > 0``.
        correct_threshold: a sequence is correct when that value is >= this (default
            0.5 with ``correct_field``; alone, it applies to ``rewards``).
        trainer: whose settings give the defaults of the analysis
            (:mod:`ratioscope.data.trainer_settings`): "auto" those a capture recorded in the
            files, "trl", "verl" or "openrlhf" those recorded or else that framework's
            documented defaults, "none" neither.
        trainer_settings: the settings in force, given instead of those recorded in the
            first file (each step of a timeline: the run's; the capture's report mode:
            the trainer's own); ``trainer="none"`` still ignores them.
    """

    format: str = defaults.FORMAT
    mapping: Mapping[str, str] = field(default_factory=dict)
    nonfinite: str = defaults.NONFINITE
    unsafe_pickle: bool = False
    group_size: int | None = None
    stream_bytes: int | None = None
    correct_field: str | None = None
    correct_threshold: float | None = None
    trainer: str = "auto"
    trainer_settings: TrainerSettings | None = None

    def correct_rule(self) -> tuple[str, float] | None:
        """(field, threshold) of the user's correctness rule, or None for the default
        (the file's ``correct``, else ``rewards > 0``).

        Raises:
            ParameterError: the threshold is not a finite number, or the field is empty.
        """
        return correct_rule(self.correct_field, self.correct_threshold)


#: the threshold of ``correct_field`` when none is given (as for training logs in eval-*)
DEFAULT_CORRECT_THRESHOLD = 0.5


def load_params(options: LoadOptions) -> dict[str, Any]:
    """The ``params.load`` block: the load options that change the numbers."""
    return {
        "format": options.format,
        "mapping": dict(options.mapping),
        "nonfinite": options.nonfinite,
        "group_size": options.group_size,
        # only when set: reports made before these options merge with today's
        **{
            key: value
            for key in ("correct_field", "correct_threshold")
            if (value := getattr(options, key)) is not None
        },
    }


def stored_correct_rule(params: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """``(correct_field, correct_threshold)`` of a report's ``params`` block as
    :func:`load_params` wrote it; (None, None) for the default rule."""
    load = params.get("load") or {}
    return load.get("correct_field"), load.get("correct_threshold")


def correct_rule(field: str | None, threshold: float | None) -> tuple[str, float] | None:
    """See :meth:`LoadOptions.correct_rule`."""
    import math

    if field is None and threshold is None:
        return None
    if threshold is not None and not math.isfinite(threshold):
        raise ParameterError("correct_threshold", f"must be a finite number, got {threshold}")
    if field is not None and not field.strip():
        raise ParameterError("correct_field", "must name a key, got an empty string")
    return (field or "rewards", DEFAULT_CORRECT_THRESHOLD if threshold is None else threshold)


def correct_rule_text(field: str | None, threshold: float | None) -> str:
    """How ``correct`` was decided, in words, for reports (from ``params.load``)."""
    rule = correct_rule(field, threshold)
    if rule is None:
        return (
            "the file's 'correct' where it has one, else rewards > 0 or the 0/1 function (default)"
        )
    return f"{rule[0]} >= {rule[1]:g}"


def bind_correct_field(
    path: Path,
    profile: Profile,
    keys: Sequence[str],
    key_map: dict[str, str],
    options: LoadOptions,
) -> dict[str, str]:
    """``key_map`` with ``correct`` read from the key of the user's correctness rule.

    Raises:
        ParameterError: the file has no such key (its keys listed).
    """
    rule = options.correct_rule()
    if rule is None:
        return key_map
    name = rule[0]
    if name in keys:
        key = name
    elif name in key_map and key_map[name] in keys:
        key = key_map[name]  # a canonical name: "rewards" is verl's token_level_scores
    else:
        raise ParameterError(
            "correct_field",
            f"names '{name}', which this {profile.name} file does not hold; its keys are "
            + ", ".join(sorted(keys)),
            path=path,
        )
    return {**key_map, "correct": key}


def bind_default_correct(
    keys: Sequence[str],
    key_map: dict[str, str],
    options: LoadOptions,
    read_functions: Callable[[list[str]], Mapping[str, Any]],
) -> tuple[dict[str, str], float | None, str | None]:
    """``correct`` of a whole file whose correctness no rule names: with several reward
    functions (``reward:NAME`` keys) beside ``rewards`` and no ``correct``, the one that
    scores 0 or 1 over the whole file (:func:`ratioscope.data.batch.correctness_function`),
    decided once per file so that a file read in chunks gives the correctness it gives
    read whole.

    Args:
        keys: the file's keys; key_map: canonical -> file key.
        read_functions: the file's values of the given function keys, all rows.

    Returns:
        (key_map, with ``correct`` bound to the chosen function's key where one is
        chosen; the threshold that makes its 1 correct, or the rule's; the warning, or
        None where the file needs no choice).
    """
    rule = options.correct_rule()
    if rule is not None:
        return key_map, rule[1], None
    names = [k for k in keys if k.startswith(REWARD_FUNCTION_PREFIX)]
    if "correct" in key_map or "rewards" not in key_map or len(names) < 2:
        return key_map, None, None
    import torch

    from ratioscope.data.batch import correctness_function

    columns = read_functions(names)
    functions = {}
    for key in names:
        try:
            values = torch.as_tensor(columns[key]).double()
        except (TypeError, ValueError, RuntimeError):
            values = None
        if values is None or values.dim() != 1:
            # not one number a sequence: the validation says so in its own sentence
            return key_map, None, None
        functions[key[len(REWARD_FUNCTION_PREFIX) :]] = values
    chosen, note = correctness_function(functions)
    if chosen is None:
        return key_map, None, note
    return {**key_map, "correct": REWARD_FUNCTION_PREFIX + chosen}, 0.5, note


def _natural_key(path: Path) -> list[Any]:
    """Sort step_2 before step_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


# Path itself cannot be subclassed before Python 3.12: the platform's concrete class can
if sys.platform == "win32":  # pragma: no cover

    class _ConcretePath(WindowsPath):
        pass

else:

    class _ConcretePath(PosixPath):
        pass


class FoundPath(_ConcretePath):
    """A file found by walking a directory or matching a glob, not named by the user.

    A run skips such a file with a note when it is of another kind (a samples file, a
    text log: :class:`NotADumpError`) rather than failing on it, since the user asked for
    the dumps of the directory; a file named on its own still fails with the sentence
    that says what it is. A path, so every caller of :func:`expand_paths` takes it as one.
    """


#: the capture's shard report of a step (mode "report"), as a directory walk finds it
SHARD_REPORT = re.compile(r"(?:^|/)step_\d+/rank_\d+\.json$")


def walk_files(directory: Path) -> list[Path]:
    """The files under ``directory``, at any depth, through symbolic links to folders too
    (users arrange a run's step folders as links), each real folder entered once: a link
    back to a folder above is a loop, and the files it leads to are already listed (the
    first walk of :class:`FolderListings`, which lists every folder)."""
    return [Path(root) / name for root, name in FolderListings().names(directory)]


def expand_paths(
    paths: Sequence[str | Path], allow_empty: bool = False, shard_reports: bool = False
) -> list[Path]:
    """Files named by ``paths``: files as given, directories searched recursively for
    known suffixes (through symbolic links to folders; hidden files, such as a writer's
    temporary files, left out), glob patterns expanded; each in natural order, duplicates
    dropped. The files found by a walk or a glob are :class:`FoundPath`; a file both
    named and found counts as named. ``allow_empty``: a directory without a dump, or a
    pattern without a match, adds nothing instead of failing (a run being watched that
    has not written its first step). ``shard_reports``: a walk finds the capture's shard
    reports too (``step_N/rank_R.json``, mode "report"), for the commands that read a run
    step by step.
    """
    if not paths:
        raise UnreadablePathError(None, "no input path given")
    files: list[Path] = []
    for raw in paths:
        text = str(raw)
        refuse_empty_path(text)
        if _GLOB_CHARS.search(text) and not Path(text).exists():
            matches = sorted((Path(m) for m in glob.glob(text, recursive=True)), key=_natural_key)
            matches = [m for m in matches if m.is_file()]
            if not matches and not allow_empty:
                raise UnreadablePathError(text, "the pattern matches no file")
            files.extend(FoundPath(m) for m in matches)
            continue
        path = Path(text)
        if path.is_dir():
            found = sorted(
                (
                    p
                    for p in walk_files(path)
                    if (
                        p.suffix.lower() in SUFFIXES
                        or (shard_reports and SHARD_REPORT.search(p.as_posix()))
                    )
                    and not p.name.startswith(".")
                    and p.is_file()
                ),
                key=_natural_key,
            )
            found = [p for p in found if p.suffix.lower() not in (".pkl", ".pickle")] or found
            if not found and not allow_empty:
                raise UnreadablePathError(path, "the directory holds no dump file")
            files.extend(FoundPath(p) for p in found)
        elif path.exists():
            files.append(path)
        else:
            raise UnreadablePathError(path, "no such file or directory")
    named = {file for file in files if not isinstance(file, FoundPath)}
    unique: dict[Path, Path] = {}
    for file in files:
        unique.setdefault(file, Path(file) if file in named else file)
    return list(unique.values())


class RepeatedListing:
    """:func:`expand_paths` of the same ``paths`` (``allow_empty``) again and again, with
    each file's ``os.stat`` (a watch looking at its run): where ``paths`` is one
    directory, the work on a file's name (whether it is a dump, its place in the natural
    order, its path object) is done the first time the name is seen, and a folder is
    listed again only when its status changed (:class:`FolderListings`), so a look
    costs a stat per folder and per file: about a quarter of :func:`expand_paths` and a
    stat per file, in one folder or with a folder a step (``bench_watch.py
    --only-listing``).
    Other paths take :func:`expand_paths` each time. The files and their order are
    :func:`expand_paths`' (``tests/test_loaders.py`` compares them)."""

    def __init__(
        self, paths: Sequence[str | Path], shard_reports: bool = False, found: bool = True
    ) -> None:
        self.paths = list(paths)
        self.shard_reports = shard_reports
        #: whether the files are :class:`FoundPath` (as :func:`expand_paths` gives them)
        #: or plain paths
        self.found = found
        #: (folder, name) -> its path when it names a dump (or a shard report), else None
        self._names: dict[tuple[str, str], Path | None] = {}
        self._keys: dict[Path, list[Any]] = {}  # each dump's natural sort key
        self._order: list[Path] = []  # the previous look's dumps, in order
        self._pickles: set[Path] = set()  # those in pickle files (left out beside others)
        self._folders = FolderListings()

    def look(self) -> list[tuple[Path, os.stat_result]]:
        """The files, in :func:`expand_paths`' order, each with its status now (a file
        gone since the walk is left out)."""
        directory = self._directory()
        if directory is None:
            found = expand_paths(self.paths, allow_empty=True, shard_reports=self.shard_reports)
            return list(_statuses(found if self.found else [Path(p) for p in found]))
        found = self._walk(directory)
        self._pickles.intersection_update(found)  # those gone since are forgotten
        statuses = dict(_statuses(found))
        order = self._ordered(statuses)
        pickles = self._pickles
        kept = [path for path in order if path not in pickles] if pickles else order
        return [(path, statuses[path]) for path in (kept or order)]

    def _directory(self) -> Path | None:
        if len(self.paths) != 1:
            return None
        text = str(self.paths[0])
        path = Path(text)
        if _GLOB_CHARS.search(text) and not path.exists():
            return None
        return path if path.is_dir() else None

    def _walk(self, directory: Path) -> list[Path]:
        """The dump files under ``directory`` as :func:`walk_files` finds them (a name
        of an earlier look reused), regular files or not."""
        names: dict[tuple[str, str], Path | None] = {}
        found: list[Path] = []
        for root, name in self._folders.names(directory):
            key = (root, name)
            path = self._names[key] if key in self._names else self._dump_path(root, name)
            names[key] = path
            if path is not None:
                found.append(path)
        self._names = names  # names gone since are forgotten
        return found

    def _dump_path(self, root: str, name: str) -> Path | None:
        path = Path(root) / name
        if name.startswith("."):
            return None
        suffix = path.suffix.lower()
        if suffix in SUFFIXES or (self.shard_reports and SHARD_REPORT.search(path.as_posix())):
            found = FoundPath(path) if self.found else path
            if suffix in (".pkl", ".pickle"):
                self._pickles.add(found)
            return found
        return None

    def _ordered(self, statuses: Mapping[Path, os.stat_result]) -> list[Path]:
        """The regular files of ``statuses`` in natural order: the previous order with
        the new files after it, sorted (a sort that finds one long run, new files aside)."""
        files = [path for path, status in statuses.items() if stat.S_ISREG(status.st_mode)]
        current = set(files)
        previous = [path for path in self._order if path in current]
        if len(previous) != len(files):
            known = set(previous)
            previous.extend(path for path in files if path not in known)
            for path in previous:
                if path not in self._keys:
                    self._keys[path] = _natural_key(path)
            previous.sort(key=self._keys.__getitem__)
        self._order = previous
        self._keys = {path: self._keys[path] for path in previous}
        return previous


class FolderListings:
    """The files under one directory, walked again and again as :func:`os.walk` walks
    it (``followlinks``, each real folder entered once: a link back to a folder above is
    a loop), each folder below it listed again only when its status changed: a look at
    a run of a folder a step costs a stat of each folder instead of a listing (about 6
    us a folder against 17 us here). The first walk lists every folder.

    A folder's listing is kept under its device, inode, mtime and ctime, and only when
    its ctime (which no one can set back) is more than ``margin_s`` older than this
    machine's clock at the walk: a change within the tick of the kept times would leave
    them as they were, and file systems tick in up to a second (NFS, FAT); a change
    after the walk is a new tick once the times are older than the margin, where the
    file system's clock is within ``margin_s`` of this machine's. For a file system
    whose clock is further off (or an NFS client holding a folder's attributes), every
    ``full_s`` seconds the walk lists every folder again: a change is seen then at the
    latest, as is a link in a kept folder whose target changed kind (a file become a
    folder) while the link stayed. The directory itself is listed at every walk (the
    new steps of a run). ``clock`` (nanoseconds) is for tests."""

    def __init__(
        self,
        margin_s: float = 2.0,
        full_s: float = 60.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.margin_ns = int(margin_s * 1e9)
        self.full_ns = int(full_s * 1e9)
        self.clock = clock
        #: folder -> (its device, inode, mtime, ctime; its file names; its folder names)
        self._kept: dict[str, tuple[tuple[int, int, int, int], list[str], list[str]]] = {}
        self._full_at: int | None = None  # when the last walk listing every folder began

    def names(self, directory: Path) -> Iterator[tuple[str, str]]:
        """(folder, name) of every file under ``directory``, in :func:`os.walk`'s order
        (top-down, each folder's names as the system lists them)."""
        now = self.clock()
        full = self._full_at is None or now - self._full_at >= self.full_ns
        if full:
            self._full_at = now
        old = {} if full else self._kept
        kept: dict[str, tuple[tuple[int, int, int, int], list[str], list[str]]] = {}
        entered: set[tuple[int, int]] = set()
        top = os.fspath(directory)
        pending = [top]  # a stack: os.walk's order, each folder's subfolders in turn
        while pending:
            root = pending.pop()
            try:
                status = os.stat(root)
            except OSError:  # gone while walking
                continue
            identity = (status.st_dev, status.st_ino)
            if identity in entered:  # a loop, or a folder reached twice through links
                continue
            times = (*identity, status.st_mtime_ns, status.st_ctime_ns)
            known = old.get(root)
            if known is not None and known[0] == times:
                files, folders = known[1], known[2]
            else:
                files, folders, listed = _list_folder(root)
                if not listed:  # as os.walk: a folder that fails to list is not entered
                    continue
                settled = max(status.st_mtime_ns, status.st_ctime_ns) < now - self.margin_ns
                known = (times, files, folders) if settled and root != top else None
            entered.add(identity)
            if known is not None:
                kept[root] = known
            for name in files:
                yield root, name
            pending.extend(os.path.join(root, name) for name in reversed(folders))
        self._kept = kept  # folders gone since are forgotten


def _list_folder(root: str) -> tuple[list[str], list[str], bool]:
    """The names of ``root``'s files and of its folders (links to folders followed), in
    the order the system lists them, and whether the listing was read whole (as
    :func:`os.walk`: a folder that fails to list adds nothing)."""
    files: list[str] = []
    folders: list[str] = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                try:
                    is_folder = entry.is_dir()
                except OSError:
                    is_folder = False
                (folders if is_folder else files).append(entry.name)
    except OSError:
        return [], [], False
    return files, folders, True


def _statuses(paths: Iterable[P]) -> Iterator[tuple[P, os.stat_result]]:
    """Each path with its ``os.stat`` (following links), those gone left out."""
    for path in paths:
        try:
            yield path, os.stat(path)
        except OSError:
            continue


def load_file(path: str | Path, options: LoadOptions | None = None) -> TokenBatch:
    """Read one dump file into a validated :class:`TokenBatch`."""
    options = options or LoadOptions()
    path = path if isinstance(path, Path) else Path(path)
    refuse_json(path)
    return batch_from_raw(path, read_raw(path, unsafe_pickle=options.unsafe_pickle), options)


def _refuse_values_that_are_not_arrays(
    path: Path, raw: RawDump, profile: Any, options: LoadOptions
) -> None:
    """A key that names per-token or per-sequence data (``log_probs``, ``mask``, ...) but
    holds a string, a number or another object is an error, not a key left out: read as
    absent, the analysis would go on without it (a section "needs log_probs") and the
    user would never learn the file is wrong."""
    from ratioscope.data.batch import CANONICAL_KEYS

    passed_over = {note.key for note in raw.notes if note.kind == "ignored" and note.key}
    stray = [key for key in (*raw.meta, *passed_over) if key not in raw.columns]
    if not stray:
        return
    would = resolve_keys(profile, [*raw.columns, *stray], options.mapping)
    for canonical, key in would.items():
        # policy_version may be one number for the file (the trainer's version)
        if canonical in CANONICAL_KEYS and canonical != "policy_version" and key in stray:
            held = raw.meta.get(key)
            shown = f"a {type(held).__name__} ({str(held)[:40]!r})"
            what = shown if key in raw.meta else "no numeric data"
            raise InputError(
                path,
                f"'{key}' holds {what}, not an array of {canonical} values: fix the dump, "
                "or map another key to it with --map",
            )


def batch_from_raw(path: Path, raw: RawDump, options: LoadOptions) -> TokenBatch:
    """Map raw columns to canonical names (profile, ``--map``) and validate them."""
    profile = (
        detect_profile(raw.columns, raw.meta.get("ratioscope_profile"))
        if options.format == "auto"
        else get_profile(options.format)
    )
    if options.format == "auto" and profile.name == "canonical":
        _refuse_text_log(path, raw)
    if profile.native:
        raw = import_module(f"ratioscope.io.frameworks.{profile.native}").prepare(path, raw)
    key_map = resolve_keys(profile, raw.columns, options.mapping)
    _refuse_values_that_are_not_arrays(path, raw, profile, options)
    key_map = bind_correct_field(path, profile, list(raw.columns), key_map, options)
    key_map, threshold, correct_note = bind_default_correct(
        list(raw.columns), key_map, options, lambda names: {k: raw.columns[k] for k in names}
    )
    factors = apply_mask_factors(path, raw, profile, key_map)
    canonical = _canonical_columns(path, raw, profile, key_map, correct_threshold=threshold)
    if options.group_size and not profile.consecutive_rows:
        raise ParameterError(
            "group_size",
            f"assumes consecutive groups, but this is a {profile.name} file: {profile.groups}",
            path=path,
        )
    if (
        options.group_size
        and "group" not in canonical
        and isinstance(canonical.get("mask"), Tensor)
    ):
        canonical["group"] = _consecutive_groups(
            path, canonical["mask"].shape[0], options.group_size
        )
    used = set(key_map.values()) | set(factors)
    ignored = sorted(k for k in raw.columns if k not in used)
    batch = TokenBatch.from_tensors(
        canonical,
        source=str(path),
        profile=profile.name,
        file_format=raw.file_format,
        key_map=key_map,
        ignored_keys=ignored,
        nonfinite=options.nonfinite,
        expected_names={c: names[0] for c, names in profile.keys.items()},
        file_keys=list(raw.columns),
        default_correct=correct_note is None,
    )
    notes = [f"{path}: {text}" for text in raw.texts("warning")]
    batch.warnings[:0] = [*notes, *([correct_note] if correct_note else [])]
    batch.content_key = raw.meta.get("content_key")
    return batch


def load(
    path: str | Path | Sequence[str | Path],
    format: str = "auto",
    mapping: Mapping[str, str] | None = None,
    *,
    nonfinite: str = "error",
    unsafe_pickle: bool = False,
) -> TokenBatch:
    """Load a dump.

    A single file gives its batch; a directory, a glob or a list of paths gives the
    concatenation of their batches (rows appended, padded to the longest sequence).
    For analyses of many or large files prefer :func:`ratioscope.analyze`, which
    streams them.
    """
    options = LoadOptions(
        format=format, mapping=dict(mapping or {}), nonfinite=nonfinite, unsafe_pickle=unsafe_pickle
    )
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    files = expand_paths(paths)
    run = RunFiles(len(files), options)
    batches = [batch for file in files if (batch := run.load(file)) is not None]
    run.check_any(bool(batches))
    return batches[0] if len(batches) == 1 else concatenate(batches)


class RunFiles:
    """The files of one run, loaded one after another: a framework's side tables
    (:class:`SkippedFileError`) and rank copies of the same samples (equal content keys)
    are skipped with a note in ``notes``, and so are files of another kind (samples, text
    logs: :class:`NotADumpError`) that a directory walk or a glob found
    (:class:`FoundPath`); a single file that is a side table is an error, and so is a
    file of another kind named on its own. When every file is skipped, the first reason
    is the error.
    """

    def __init__(self, count: int, options: LoadOptions, notes: list[str] | None = None):
        self.single = count == 1
        self.options = options
        self.notes = notes if notes is not None else []
        self._seen: dict[str, str] = {}  # content key -> the file taken for it
        self._skipped: list[NotADumpError] = []

    def load(self, path: Path) -> TokenBatch | None:
        """The batch of ``path``, or None when it is skipped."""
        batch = self.open(path, load_file)
        return batch if isinstance(batch, TokenBatch) else None

    def open(self, path: Path, read: Callable[[Path, LoadOptions], T]) -> T | None:
        """``read(path, options)`` (a batch, or another way of reading the file), or None
        when the file is skipped (a batch whose samples an earlier file held included)."""
        try:
            opened = read(path, self.options)
        except NotADumpError as error:
            side_table = isinstance(error, SkippedFileError)
            if (self.single and side_table) or not (side_table or isinstance(path, FoundPath)):
                raise
            self._skipped.append(error)
            self.notes.append(f"skipped {error}".rstrip("."))
            return None
        if isinstance(opened, TokenBatch) and not self.take(opened, str(path)):
            return None
        return opened

    def take(self, batch: TokenBatch, name: str) -> bool:
        """False (with a note) when an earlier file held the same samples."""
        key = batch.content_key
        if key is None:
            return True
        if key in self._seen:
            self.notes.append(
                f"skipped {name}: the same samples as {self._seen[key]} (a copy written by "
                "another rank of the same data-parallel shard)"
            )
            return False
        self._seen[key] = name
        return True

    def check_any(self, loaded: bool) -> None:
        """Nothing was loaded because every file was skipped: say why."""
        if not loaded and self._skipped:
            raise InputError(None, f"no input holds token data to analyse: {self._skipped[0]}")


def concatenate(batches: Sequence[TokenBatch]) -> TokenBatch:
    """Append the rows of several batches (groups stay distinct per batch)."""
    from dataclasses import replace

    from ratioscope.data.batch import CANONICAL_KEYS

    width = max(b.max_length for b in batches)
    merged: dict[str, Tensor] = {}
    dropped: list[str] = []
    for name in CANONICAL_KEYS:
        values = [getattr(b, name) for b in batches]
        if any(v is None for v in values):
            if any(v is not None for v in values):
                dropped.append(name)
            continue
        if name in SEQUENCE_KEYS and name != "group":
            merged[name] = torch.cat(values)
        elif name == "group":
            offsets, parts = 0, []
            for value in values:
                parts.append(value + offsets)
                offsets += int(value.max()) + 1 if value.numel() else 0
            merged[name] = torch.cat(parts)
        else:
            merged[name] = torch.cat([_pad_to(v, width) for v in values])
    names = [set(b.reward_functions) for b in batches]
    shared = set.intersection(*names)
    functions = {
        name: torch.cat([b.reward_functions[name] for b in batches])
        for name in batches[0].reward_functions
        if name in shared
    }
    dropped += [f"reward:{name}" for name in sorted(set.union(*names) - shared)]
    labels = None
    if "group" in merged:
        labels = [(b.source, label) for b in batches for label in (b.group_labels or [])]
    first = batches[0]
    # Any: mypy cannot match the canonical names to TokenBatch's fields
    optional: dict[str, Any] = {
        n: merged.get(n) for n in CANONICAL_KEYS if n != "mask" and n != "log_ratio"
    }
    return replace(
        first,
        **optional,
        mask=merged["mask"],
        log_ratio=merged["log_ratio"],
        reward_functions=functions,
        group_labels=labels,
        source=", ".join(b.source for b in batches),
        padding="left" if any(b.padding == "left" for b in batches) else "right",
        warnings=[w for b in batches for w in b.warnings]
        + [
            f"'{name}' is not in every file, so the concatenation has none "
            "(analyse the files with ratioscope.analyze to keep it where it exists)"
            for name in dropped
        ],
    )


def _pad_to(tensor: Tensor, width: int) -> Tensor:
    if tensor.shape[1] == width:
        return tensor
    pad = torch.zeros(
        (tensor.shape[0], width - tensor.shape[1], *tensor.shape[2:]),
        dtype=tensor.dtype,
        device=tensor.device,
    )
    return torch.cat([tensor, pad], dim=1)


# ----------------------------------------------------------------------------- helpers
def refuse_json(path: Path) -> None:
    """A ``.json`` file is one of ratioscope's own outputs or no input at all: say which,
    and the command that takes it (dumps are never .json).

    Raises:
        NotADumpError: always, for a path ending in .json (of any case).
    """
    from ratioscope.io.paths import is_report_path

    if not is_report_path(path):
        return
    try:
        with path.open(encoding="utf-8") as handle:
            document = loads(handle.read())
    except (OSError, UnicodeDecodeError, ValueError):
        document = None
    keys = set(document) if isinstance(document, dict) else set()
    if isinstance(document, dict) and document.get("kind") == "timeline":
        what = (
            "a timeline (ratioscope timeline --json): check its series with "
            "'ratioscope check' and a rules file"
        )
    elif "ratios" in keys and "schema_version" in keys:
        what = (
            "an analyze report: check it with 'ratioscope check', merge shards with "
            "'ratioscope merge', or draw it with 'ratioscope plot'"
        )
    elif "schema_version" in keys and keys & {"by_method", "ucc", "methods"}:
        what = (
            "an evaluation report: check it with 'ratioscope check' or draw it with "
            "'ratioscope plot passk' or 'ratioscope plot ucc'"
        )
    else:
        known = ", ".join(sorted(s for s in SUFFIXES if s not in (".pkl", ".pickle")))
        what = f"a JSON file, not a dump; dumps are {known}"
    raise NotADumpError(path, f"this is {what}")


#: what to call a text log of each framework layout (ratioscope.io.textlogs) in messages
_TEXT_LOG_NAMES = {
    "verl": "a verl rollout log (trainer.rollout_data_dir)",
    "trl": "a TRL completions log (GRPOConfig(log_completions=True))",
    "areal": "an AReaL rollout log (rollout.dump_to_file)",
    "roll": "a ROLL rollout dump (rollout_dump_dir)",
}
#: NeMo-RL's validation log, beside its train_data_step{N}.jsonl
_NEMO_RL_VALIDATION = re.compile(r"val_data_step\d+\.jsonl")
#: ratioscope's own samples files
_SAMPLE_KEYS = ({"problem_id", "response"}, {"idx", "code", "score"})


def refuse_other_kinds(path: Path, raw: RawDump) -> None:
    """Refuse a file of another kind read as a dump of no framework's layout: a text log,
    a samples file, NeMo-RL's validation log (:class:`NotADumpError`, which a directory
    walk turns into a note); a dump passes."""
    profile = detect_profile(raw.columns, raw.meta.get("ratioscope_profile"))
    if profile.name == "canonical":
        _refuse_text_log(path, raw)


def _refuse_text_log(path: Path, raw: RawDump) -> None:
    """A file laid out like samples (and without a mask) is named as such."""
    from ratioscope.io import textlogs

    # fields the reader passed over (text, lists of text) count as present too
    keys = set(raw.columns) | raw.passed_over
    if "mask" in keys:
        return
    layout = textlogs.detect_jsonl_layout({key: [] for key in keys})
    if layout is None and textlogs.TRL.signature <= keys:
        layout = textlogs.TRL
    if layout is not None:
        what = _TEXT_LOG_NAMES[layout.name]
    elif any(sample <= keys for sample in _SAMPLE_KEYS):
        what = "a samples file"
    elif _NEMO_RL_VALIDATION.fullmatch(path.name):
        # beside the train_data_step*.jsonl a NeMo-RL log directory holds: a folder given
        # whole is read without it (a note), instead of stopping at its missing mask
        raise NotADumpError(
            path,
            "this is a NeMo-RL validation log (val_data_step*.jsonl): no per-token data; "
            "the train_data_step*.jsonl files beside it are the dumps",
        )
    else:
        return
    raise NotADumpError(
        path,
        f"this is {what}: responses as text, no per-token log-probs; evaluate it with "
        "'ratioscope eval-passk' or 'ratioscope eval-ucc'",
    )


def apply_mask_factors(
    path: Path, raw: RawDump, profile: Profile, key_map: Mapping[str, str]
) -> list[str]:
    """Multiply the file's mask column by the profile's ``mask_factors`` it holds (TRL's
    ``tool_mask``), in place; returns the keys applied.

    Raises:
        ShapeMismatchError: a factor is not shaped like the mask.
    """
    mask_key = key_map.get("mask")
    if mask_key is None or mask_key not in raw.columns:
        return []
    applied = []
    for key in profile.mask_factors:
        if key not in raw.columns or key == mask_key:
            continue
        mask, factor = raw.columns[mask_key], raw.columns[key]
        if isinstance(mask, Tensor) and isinstance(factor, Tensor):
            if factor.shape != mask.shape:
                raise ShapeMismatchError(
                    path, key, factor.shape, mask_key, mask.shape, "the shape of the mask"
                )
            raw.columns[mask_key] = (mask != 0) & (factor != 0)
        elif is_rows(mask) and is_rows(factor) and len(mask) == len(factor):
            mask, factor = as_ragged(mask), as_ragged(factor)
            differ = (mask.lengths() != factor.lengths()).nonzero()
            if differ.numel():
                row = int(differ[0, 0])
                raise ShapeMismatchError(
                    path, f"{key}[{row}]", factor[row].shape, f"{mask_key}[{row}]",
                    mask[row].shape, "the shape of the mask",
                )  # fmt: skip
            raw.columns[mask_key] = mask.with_values((mask.values != 0) & (factor.values != 0))
        else:
            raise InputError(path, f"'{key}' must be stored like '{mask_key}' (per token)")
        applied.append(key)
    return applied


def _canonical_columns(
    path: Path,
    raw: RawDump,
    profile: Profile,
    key_map: Mapping[str, str],
    width: int | None = None,
    correct_threshold: float | None = None,
) -> dict[str, Any]:
    """Canonical name -> tensor: ragged columns padded (to ``width``, default the longest
    row), per-token rewards reduced; with ``correct_threshold``, ``correct`` is the
    (reduced) value of its key >= the threshold."""
    columns = {c: raw.columns[key] for c, key in key_map.items() if key in raw.columns}
    columns.update(_scalar_columns(raw, profile, key_map, columns))
    ragged = {c for c, key in key_map.items() if key in raw.ragged and c in columns}
    present = None
    if ragged:
        columns, present = _pad_ragged(path, columns, ragged, key_map, width)
    mask = columns.get("mask")
    for canonical in ("rewards", "correct"):
        value = columns.get(canonical)
        if (
            isinstance(value, Tensor)
            and value.dim() == 2
            and isinstance(mask, Tensor)
            and value.shape == mask.shape  # else validation names the mismatch
        ):
            how = profile.reducers.get(canonical, "sum")
            columns[canonical] = _reduce_per_token(value, _as_bool(mask), how)
    if correct_threshold is not None and "correct" in columns:
        columns["correct"] = _thresholded(
            path, key_map["correct"], columns["correct"], correct_threshold
        )
    if present is not None and isinstance(mask, Tensor) and mask.shape == present.shape:
        # (a mask of another shape is named by validation, beside the ragged columns)
        columns["mask"] = mask.to(torch.bool) & present if _is_bool_like(mask) else mask
    return columns


def _scalar_columns(
    raw: RawDump, profile: Profile, key_map: Mapping[str, str], columns: Mapping[str, Any]
) -> dict[str, Any]:
    """The scalar canonical keys (``trainer_version``) that a file holds as plain numbers
    beside its tensors (a ``.pt`` dict's ``{"trainer_version": 12}``), by the ``--map``
    name, the profile's names or the canonical name."""
    from ratioscope.data.batch import SCALAR_KEYS

    found: dict[str, Any] = {}
    for name in SCALAR_KEYS:
        if name in columns:
            continue
        candidates = (key_map.get(name), *profile.keys.get(name, ()), name)
        for key in candidates:
            if key is not None and key in raw.meta:
                found[name] = raw.meta[key]
                break
    return found


def _pad_ragged(
    path: Path,
    columns: dict[str, Any],
    ragged: set[str],
    key_map: Mapping[str, str],
    width: int | None = None,
) -> tuple[dict[str, Any], Tensor]:
    """Right-pad per-sequence rows to [B, T]; every ragged column of a row must agree.

    Each column is first one flat :class:`~ratioscope.data.raw.Ragged` (a list of row
    tensors is joined), then padded in one vectorised step, once the padded size is
    known to fit the memory budget (:func:`ratioscope.io.limits.check_budget`): a file of
    short rows and one long one pads to B x the longest.

    ``width``: T, when the rows are a chunk of a file padded to the file's longest row.
    """
    from ratioscope.data.raw import as_ragged, padded_dtype
    from ratioscope.io.limits import check_budget

    flat = {name: as_ragged(columns[name]) for name in sorted(ragged)}
    lengths: Tensor | None = None
    reference = ""
    for name, rows in flat.items():
        row_lengths = rows.lengths()
        if lengths is None:
            lengths, reference = row_lengths, name
            continue
        if row_lengths.shape != lengths.shape:
            raise ShapeMismatchError(
                path,
                key_map[name],
                (len(rows),),
                key_map[reference],
                (len(lengths),),
                "the same number of sequences",
            )
        differ = (row_lengths != lengths).nonzero()
        if differ.numel():
            row = int(differ[0, 0])
            raise ShapeMismatchError(
                path,
                f"{key_map[name]}[{row}]",
                (int(row_lengths[row]),),
                f"{key_map[reference]}[{row}]",
                (int(lengths[row]),),
                "per-token lists of equal length in each sequence",
            )
    assert lengths is not None
    longest = int(lengths.max()) if lengths.numel() else 0
    width = max(longest, 1) if width is None else max(width, longest, 1)
    dtypes = {name: padded_dtype(rows) for name, rows in flat.items()}
    check_budget(
        path,
        f"padding its per-token lists to {len(lengths)} x {width}",
        sum(len(lengths) * width * _itemsize(dtype) for dtype in dtypes.values()),
    )
    present = torch.arange(width)[None, :] < lengths[:, None]
    out = dict(columns)
    for name, rows in flat.items():
        out[name] = rows.padded(width, dtypes[name], present)
    if not isinstance(out.get("mask"), Tensor):
        raise InputError(path, "the mask must be stored per token like the other columns")
    return out, present


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _thresholded(path: Path, key: str, value: Any, threshold: float) -> Tensor:
    """[B] bool: ``value`` >= ``threshold`` (NaN: not correct)."""
    if not isinstance(value, Tensor) or value.dim() != 1:
        raise InputError(path, f"'{key}' must hold one number per sequence to decide correctness")
    return value.double() >= threshold


def _consecutive_groups(path: Path, rows: int, size: int) -> Tensor:
    """Group ids for files without them: rows 0..size-1 are group 0, and so on."""
    if size < 1 or rows % size:
        raise ParameterError(
            "group_size", f"{size} does not divide the {rows} sequences of the file", path=path
        )
    return torch.arange(rows) // size


def _is_bool_like(mask: Tensor) -> bool:
    return bool(((mask == 0) | (mask == 1)).all())


def _as_bool(mask: Tensor) -> Tensor:
    return mask != 0


def _reduce_per_token(values: Tensor, mask: Tensor, how: str) -> Tensor:
    """[B, T] -> [B]: the sum over valid tokens, or the value at the last valid token."""
    values = torch.where(mask, values, torch.zeros((), dtype=values.dtype))
    if how == "sum":
        return values.sum(dim=1)
    last = (mask.long().cumsum(dim=1) == mask.sum(dim=1, keepdim=True)) & mask
    index = last.long().argmax(dim=1)
    return values.gather(1, index[:, None]).squeeze(1)
