"""The Triton kernels of :mod:`ratioscope.functional._triton_kernels`, at module level
(Triton resolves a kernel's names in its module, not in an enclosing function).

Imported on first use only, where Triton is installed: ``triton.jit`` decides between
compiling and interpreting (``TRITON_INTERPRET=1``) as it decorates.
"""

import triton
import triton.language as tl


@triton.jit
def _affine(a_first, b_first, a_second, b_second):
    # x -> a_first x + b_first, then x -> a_second x + b_second
    return a_first * a_second, a_second * b_first + b_second


@triton.jit
def _program_rows(rows, length, BLOCK_ROWS: tl.constexpr):
    """(row [BLOCK_ROWS], which of them exist, each one's first element) of the rows this
    program takes, BLOCK_ROWS from ``program_id(0) * BLOCK_ROWS``."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    return row, row < rows, row.to(tl.int64) * length


@triton.jit
def _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T: tl.constexpr):
    """(column [BLOCK_T], inside, at, valid [rows, BLOCK_T]) of the tile of a program's
    rows from token ``start``: the columns, which positions exist, their offsets and
    which are valid tokens (the mask's bytes, read once)."""
    column = start + tl.arange(0, BLOCK_T)
    inside = row_ok[:, None] & (column < length)[None, :]
    at = row_base[:, None] + column[None, :]
    valid = tl.load(mask_ptr + at, mask=inside, other=0) != 0
    return column, inside, at, valid


@triton.jit
def kalman_scan(
    z_ptr, mask_ptr, keep_ptr, gain_ptr, initial_ptr, start_ptr, offset_ptr, out_ptr,
    end_keep_ptr, end_state_ptr, rows, length, chunk_len, n_chunks,
    SKIP: tl.constexpr, ZERO_MASKED: tl.constexpr, HAS_START: tl.constexpr,
    HAS_OFFSETS: tl.constexpr, WRITE_OUT: tl.constexpr, WRITE_ENDS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """One chunk of BLOCK_ROWS rows: rho_t = keep_t rho_{t-1} + K_t x_t in float64,
    tile by tile, each tile an associative scan of the affine steps. With WRITE_ENDS
    (from state 0) it leaves the chunk's product of keeps and its end state, which
    join the chunks; with WRITE_OUT it writes rho from the chunk's start state
    (``start_ptr`` [rows, n_chunks] with HAS_START, else rho0)."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    chunk = tl.program_id(1)
    row_ok = row < rows
    row_base = row.to(tl.int64) * length
    ends_at = row * n_chunks + chunk
    if HAS_START:
        state = tl.load(start_ptr + ends_at, mask=row_ok, other=0.0)
    else:
        state = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
        if not WRITE_ENDS:  # a chunk's ends are taken from state 0
            state += tl.load(initial_ptr)
    if HAS_OFFSETS:
        count = tl.load(offset_ptr + ends_at, mask=row_ok, other=0)
    else:
        count = tl.zeros([BLOCK_ROWS], dtype=tl.int32)
    product = tl.full([BLOCK_ROWS], 1.0, dtype=tl.float64)
    begin = chunk * chunk_len
    for step in range(0, chunk_len, BLOCK_T):
        column, inside, at, valid = _tile(mask_ptr, row_ok, row_base, begin + step, length, BLOCK_T)
        z = tl.load(z_ptr + at, mask=inside, other=0.0).to(tl.float64)
        # masked (or past the end): no observation, whatever z holds (NaN included)
        observed = tl.where(valid, z, 0.0)
        if SKIP:
            # the n-th valid token of a row takes the n-th gain; a masked one
            # leaves the state as it is
            index = count[:, None] + tl.cumsum(valid.to(tl.int32), 1) - 1
            index = tl.where(valid, index, 0)
            keep = tl.load(keep_ptr + index, mask=valid, other=1.0)
            gain = tl.load(gain_ptr + index, mask=valid, other=0.0)
            count += tl.sum(valid.to(tl.int32), 1)
        else:
            in_row = column < length
            keep_t = tl.load(keep_ptr + column, mask=in_row, other=1.0)
            gain_t = tl.load(gain_ptr + column, mask=in_row, other=0.0)
            keep = tl.broadcast_to(keep_t[None, :], [BLOCK_ROWS, BLOCK_T])
            gain = tl.broadcast_to(gain_t[None, :], [BLOCK_ROWS, BLOCK_T])
        kept, added = tl.associative_scan((keep, gain * observed), 1, _affine)
        rho = kept * state[:, None] + added
        if WRITE_OUT:
            stored = rho
            if ZERO_MASKED:
                stored = tl.where(valid, rho, 0.0)
            tl.store(out_ptr + at, stored.to(out_ptr.dtype.element_ty), mask=inside)
        # past the end the steps are the identity, so the last column is the state
        # after the tile (and its product the tile's)
        last = (tl.arange(0, BLOCK_T) == BLOCK_T - 1)[None, :]
        state = tl.sum(tl.where(last, rho, 0.0), 1)
        product = product * tl.sum(tl.where(last, kept, 0.0), 1)
    if WRITE_ENDS:
        tl.store(end_keep_ptr + ends_at, product, mask=row_ok)
        tl.store(end_state_ptr + ends_at, state, mask=row_ok)


@triton.jit
def chunk_starts(
    end_keep_ptr, end_state_ptr, initial_ptr, start_ptr, rows, n_chunks, BLOCK: tl.constexpr
):
    """The state before each chunk: s_0 = rho0, s_{j+1} = P_j s_j + E_j along a row
    of [rows, n_chunks] (P the chunk's product of keeps, E its end state from 0)."""
    row = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row_ok = row < rows
    state = tl.zeros([BLOCK], dtype=tl.float64) + tl.load(initial_ptr)
    for chunk in range(0, n_chunks):
        at = row * n_chunks + chunk
        tl.store(start_ptr + at, state, mask=row_ok)
        product = tl.load(end_keep_ptr + at, mask=row_ok, other=1.0)
        end = tl.load(end_state_ptr + at, mask=row_ok, other=0.0)
        state = product * state + end


@triton.jit
def ratio_rows(
    signal_ptr, adv_ptr, mask_ptr, bounds_ptr, counts_ptr, partial_ptr, row_sums_ptr,
    clipped_ptr, rows, length,
    HAS_ADV: tl.constexpr, MIN_EXP: tl.constexpr, PER_DECADE: tl.constexpr,
    MAGNITUDE_BINS: tl.constexpr, CENTER: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """BLOCK_ROWS rows of a log-ratio signal, tile by tile: each valid value into the
    fixed bins (atomic adds to ``counts_ptr``), the program's moments (count, mean, sum
    of squared deviations, min, max: each tile's about its own mean, merged by Chan's
    update) into ``partial_ptr`` [programs, 5], and with HAS_ADV each row's PPO sums:
    ``row_sums_ptr`` [rows, 2] (min(r A, clip(r) A), r A) and ``clipped_ptr`` [rows], the
    ratio bounds 1 - eps_low, 1 + eps_high read from ``bounds_ptr`` (float64)."""
    program = tl.program_id(0)
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    low = tl.load(bounds_ptr)
    high = tl.load(bounds_ptr + 1)
    count, mean, spread, smallest, largest = _no_moments()
    clipped_sum = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    plain_sum = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    zeroed = tl.zeros([BLOCK_ROWS], dtype=tl.int32)
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        x = tl.load(signal_ptr + at, mask=valid, other=0.0).to(tl.float64)
        count, mean, spread, smallest, largest = _count_and_add_moments(
            counts_ptr, x, valid, count, mean, spread, smallest, largest,
            MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER,
        )  # fmt: skip
        if HAS_ADV:
            a = tl.load(adv_ptr + at, mask=valid, other=0.0).to(tl.float64)
            ratio = tl.exp(x)
            plain = ratio * a
            clipped_terms = tl.minimum(plain, tl.minimum(tl.maximum(ratio, low), high) * a)
            clipped_sum += tl.sum(tl.where(valid, clipped_terms, 0.0), 1)
            plain_sum += tl.sum(tl.where(valid, plain, 0.0), 1)
            zero = ((a > 0.0) & (ratio > high)) | ((a < 0.0) & (ratio < low))
            zeroed += tl.sum((zero & valid).to(tl.int32), 1)
    _store_moments(partial_ptr + program * 5, count, mean, spread, smallest, largest)
    if HAS_ADV:
        tl.store(row_sums_ptr + row * 2, clipped_sum, mask=row_ok)
        tl.store(row_sums_ptr + row * 2 + 1, plain_sum, mask=row_ok)
        tl.store(clipped_ptr + row, zeroed.to(tl.int64), mask=row_ok)


@triton.jit
def _bin_index(x, MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER):
    """The bin of each x (float64) as histogram.bin_index: floor((log10|x| - MIN_EXP)
    PER_DECADE) within [-1, MAGNITUDE_BINS], + 2, on x's side of CENTER, int32. log10 by
    the natural log: a value within an ulp or two of a bin edge may take the next bin."""
    magnitude = tl.maximum(tl.abs(x), 1e-300)
    k = tl.floor((tl.log(magnitude) * 0.4342944819032518 - MIN_EXP) * PER_DECADE)
    k = tl.minimum(tl.maximum(k, -1.0), MAGNITUDE_BINS * 1.0)
    sign = tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0))
    return ((k + 2.0) * sign + CENTER).to(tl.int32)


@triton.jit
def _no_moments():
    """(count, mean, sum of squared deviations, min, max) of no values, float64."""
    zero = tl.full([], 0.0, dtype=tl.float64)
    return (
        zero, zero, zero, tl.full([], float("inf"), dtype=tl.float64),
        tl.full([], float("-inf"), dtype=tl.float64),
    )  # fmt: skip


@triton.jit
def _add_moments(count, mean, spread, smallest, largest, x, valid):
    """The moments with a tile's valid values of x added: the tile's own count, mean and
    squared deviations about that mean, merged by Chan's update."""
    tile_count = tl.sum(valid.to(tl.float64))
    tile_mean = tl.sum(tl.where(valid, x, 0.0)) / tl.maximum(tile_count, 1.0)
    deviation = tl.where(valid, x - tile_mean, 0.0)
    total = count + tile_count
    delta = tile_mean - mean
    share = tile_count / tl.maximum(total, 1.0)
    spread += tl.sum(deviation * deviation) + delta * delta * count * share
    mean += delta * share
    smallest = tl.minimum(smallest, tl.min(tl.where(valid, x, float("inf"))))
    largest = tl.maximum(largest, tl.max(tl.where(valid, x, float("-inf"))))
    return total, mean, spread, smallest, largest


@triton.jit
def _count_and_add_moments(
    counts_ptr, x, valid, count, mean, spread, smallest, largest,
    MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER,
):  # fmt: skip
    """Each valid x counted in its bin (atomic adds to ``counts_ptr``) and added to the
    moments (:func:`_add_moments`)."""
    index = _bin_index(x, MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER)
    tl.atomic_add(counts_ptr + index, tl.full(index.shape, 1, dtype=tl.int32), mask=valid)
    return _add_moments(count, mean, spread, smallest, largest, x, valid)


@triton.jit
def _store_moments(at, count, mean, spread, smallest, largest):
    tl.store(at, count)
    tl.store(at + 1, mean)
    tl.store(at + 2, spread)
    tl.store(at + 3, smallest)
    tl.store(at + 4, largest)


@triton.jit
def histogram_moments(
    values_ptr, counts_ptr, partial_ptr, sums_ptr, n, span,
    HAS_SUMS: tl.constexpr, MIN_EXP: tl.constexpr, PER_DECADE: tl.constexpr,
    MAGNITUDE_BINS: tl.constexpr, CENTER: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Values [n] (finite), ``span`` of them a program, tile by tile: each into the fixed
    bins (atomic adds to ``counts_ptr``, and with HAS_SUMS its value to ``sums_ptr``,
    float64), and the program's moments into ``partial_ptr`` [programs, 5]."""
    program = tl.program_id(0)
    begin = program.to(tl.int64) * span
    count, mean, spread, smallest, largest = _no_moments()
    for step in range(0, span, BLOCK):
        at = begin + step + tl.arange(0, BLOCK)
        valid = at < n
        x = tl.load(values_ptr + at, mask=valid, other=0.0).to(tl.float64)
        index = _bin_index(x, MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER)
        tl.atomic_add(counts_ptr + index, tl.full(index.shape, 1, dtype=tl.int32), mask=valid)
        if HAS_SUMS:
            tl.atomic_add(sums_ptr + index, x, mask=valid)
        count, mean, spread, smallest, largest = _add_moments(
            count, mean, spread, smallest, largest, x, valid
        )
    _store_moments(partial_ptr + program * 5, count, mean, spread, smallest, largest)


@triton.jit
def _add_pairs(pairs, mean_x, mean_a, mean_pa, comoment_a, comoment_pa, x, a, pa, valid):
    """The co-moments of (x, a) and (x, pa) with a tile's valid pairs added: the tile's
    own count, means and centred co-moments, merged by Chan's pairwise update."""
    tile = tl.sum(valid.to(tl.float64))
    safe = tl.maximum(tile, 1.0)
    tile_x = tl.sum(tl.where(valid, x, 0.0)) / safe
    tile_a = tl.sum(tl.where(valid, a, 0.0)) / safe
    tile_pa = tl.sum(tl.where(valid, pa, 0.0)) / safe
    dx = tl.where(valid, x - tile_x, 0.0)
    total = pairs + tile
    weight = pairs * tile / tl.maximum(total, 1.0)
    share = tile / tl.maximum(total, 1.0)
    delta_x = tile_x - mean_x
    delta_a = tile_a - mean_a
    delta_pa = tile_pa - mean_pa
    comoment_a += tl.sum(dx * (a - tile_a)) + delta_x * delta_a * weight
    comoment_pa += tl.sum(dx * (pa - tile_pa)) + delta_x * delta_pa * weight
    return (
        total, mean_x + delta_x * share, mean_a + delta_a * share, mean_pa + delta_pa * share,
        comoment_a, comoment_pa,
    )  # fmt: skip


@triton.jit
def vitals_rows(
    entropy_ptr, old_ptr, adv_ptr, logp_ptr, mask_ptr, correct_ptr, counts_ptr, slots_ptr,
    row_abs_ptr, row_tokens_ptr, rows, length,
    HAS_ENTROPY: tl.constexpr, HAS_OLD: tl.constexpr, HAS_ADV: tl.constexpr,
    HAS_PAIRS: tl.constexpr, HAS_CORRECT: tl.constexpr, MIN_EXP: tl.constexpr,
    PER_DECADE: tl.constexpr, MAGNITUDE_BINS: tl.constexpr, CENTER: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """BLOCK_ROWS rows of the vitals' inputs, tile by tile (an input a flag says is
    absent is never read): the entropy into the fixed bins (atomic adds) and its
    moments; its sums over correct and incorrect rows (``correct_ptr`` [rows] bytes);
    the old entropy's sum and the change's; the tokens with A == 0; the co-moments of
    (log pi, A) and (log pi, pi A). The program's 20 slots go to ``slots_ptr``
    [programs, 20] in the order of ``_vitals_kernels``' slots; with HAS_ADV each row's
    sum of |A| and valid tokens to ``row_abs_ptr`` and ``row_tokens_ptr`` [rows]."""
    program = tl.program_id(0)
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    count, mean, spread, smallest, largest = _no_moments()
    zero64 = tl.full([], 0.0, dtype=tl.float64)
    right_total = zero64
    right_n = zero64
    wrong_total = zero64
    wrong_n = zero64
    old_total = zero64
    old_n = zero64
    change_total = zero64
    zeros = zero64
    pairs = zero64
    mean_x = zero64
    mean_a = zero64
    mean_pa = zero64
    comoment_a = zero64
    comoment_pa = zero64
    row_abs = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    row_tokens = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    is_right = tl.zeros([BLOCK_ROWS], dtype=tl.int1)
    if HAS_CORRECT:
        is_right = tl.load(correct_ptr + row, mask=row_ok, other=0) != 0
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        if HAS_ENTROPY:
            e = tl.load(entropy_ptr + at, mask=valid, other=0.0).to(tl.float64)
            count, mean, spread, smallest, largest = _count_and_add_moments(
                counts_ptr, e, valid, count, mean, spread, smallest, largest,
                MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER,
            )  # fmt: skip
            if HAS_CORRECT:
                right = valid & is_right[:, None]
                wrong = valid & (is_right == 0)[:, None]
                right_total += tl.sum(tl.where(right, e, 0.0))
                right_n += tl.sum(right.to(tl.float64))
                wrong_total += tl.sum(tl.where(wrong, e, 0.0))
                wrong_n += tl.sum(wrong.to(tl.float64))
        if HAS_OLD:
            old = tl.load(old_ptr + at, mask=valid, other=0.0).to(tl.float64)
            old_total += tl.sum(tl.where(valid, old, 0.0))
            old_n += tl.sum(valid.to(tl.float64))
            if HAS_ENTROPY:
                change_total += tl.sum(tl.where(valid, e - old, 0.0))
        if HAS_ADV:
            a = tl.load(adv_ptr + at, mask=valid, other=0.0).to(tl.float64)
            row_abs += tl.sum(tl.where(valid, tl.abs(a), 0.0), 1)
            row_tokens += tl.sum(valid.to(tl.int64), 1)
            zeros += tl.sum((valid & (a == 0.0)).to(tl.float64))
            if HAS_PAIRS:
                x = tl.load(logp_ptr + at, mask=valid, other=0.0).to(tl.float64)
                pa = tl.exp(x) * a
                pairs, mean_x, mean_a, mean_pa, comoment_a, comoment_pa = _add_pairs(
                    pairs, mean_x, mean_a, mean_pa, comoment_a, comoment_pa, x, a, pa, valid
                )
    slots = slots_ptr + program * 20
    _store_moments(slots, count, mean, spread, smallest, largest)
    tl.store(slots + 5, right_total)
    tl.store(slots + 6, right_n)
    tl.store(slots + 7, wrong_total)
    tl.store(slots + 8, wrong_n)
    tl.store(slots + 9, old_total)
    tl.store(slots + 10, old_n)
    tl.store(slots + 11, change_total)
    change_n = zero64
    if HAS_OLD:
        change_n = count
    tl.store(slots + 12, change_n)
    tl.store(slots + 13, zeros)
    tl.store(slots + 14, pairs)
    tl.store(slots + 15, mean_x)
    tl.store(slots + 16, mean_a)
    tl.store(slots + 17, mean_pa)
    tl.store(slots + 18, comoment_a)
    tl.store(slots + 19, comoment_pa)
    if HAS_ADV:
        tl.store(row_abs_ptr + row, row_abs, mask=row_ok)
        tl.store(row_tokens_ptr + row, row_tokens, mask=row_ok)


@triton.jit
def mismatch_rows(
    z_ptr, mask_ptr, rows_ptr, tops_ptr, rows, length,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """The mismatch sums' first pass: each row's valid tokens, sum z and sum |z| into
    ``rows_ptr`` [rows, 3] float64, and the program's largest valid z into ``tops_ptr``
    [programs] (-inf if none)."""
    program = tl.program_id(0)
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    count = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    total = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    magnitude = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    top = tl.full([], float("-inf"), dtype=tl.float64)
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        x = tl.load(z_ptr + at, mask=valid, other=0.0).to(tl.float64)
        count += tl.sum(valid.to(tl.float64), 1)
        total += tl.sum(tl.where(valid, x, 0.0), 1)
        magnitude += tl.sum(tl.where(valid, tl.abs(x), 0.0), 1)
        top = tl.maximum(top, tl.max(tl.where(valid, x, float("-inf"))))
    tl.store(rows_ptr + row * 3, count, mask=row_ok)
    tl.store(rows_ptr + row * 3 + 1, total, mask=row_ok)
    tl.store(rows_ptr + row * 3 + 2, magnitude, mask=row_ok)
    tl.store(tops_ptr + program, top)


@triton.jit
def _expm1(x):
    """exp(x) - 1 without cancellation for small x (Kahan: (u - 1) x / log u with
    u = exp x, exact where u rounds to 1), inf past exp's range."""
    u = tl.exp(x)
    minus_one = u - 1.0
    ratio = minus_one * x / tl.log(tl.where(minus_one == 0.0, 2.0, u))
    small = tl.where(minus_one == 0.0, x, tl.where(minus_one == -1.0, -1.0, ratio))
    return tl.where(x > 709.0, float("inf"), small)


@triton.jit
def mismatch_terms(
    z_ptr, mask_ptr, tops_ptr, bounds_ptr, terms_ptr, rows, length, programs,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_TOPS: tl.constexpr,
):  # fmt: skip
    """The second pass: the program's [10] token sums into ``terms_ptr`` [programs, 10]:
    sum -z, sum z^2 / 2, sum expm1(z) - z, tokens with |z| > log c (``bounds_ptr``: log c,
    float64), sum expm1(z), sum expm1(2z) = e (e + 2), sum exp(z - top), its square's
    sum, sum |z|, max |z|; top is the largest of the first pass's ``tops_ptr``."""
    program = tl.program_id(0)
    top = tl.full([], float("-inf"), dtype=tl.float64)
    for first in range(0, programs, BLOCK_TOPS):
        index = first + tl.arange(0, BLOCK_TOPS)
        found = tl.load(tops_ptr + index, mask=index < programs, other=float("-inf"))
        top = tl.maximum(top, tl.max(found))
    log_c = tl.load(bounds_ptr)
    _row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    zero = tl.full([], 0.0, dtype=tl.float64)
    k1 = zero
    k2 = zero
    k3 = zero
    outside = zero
    first_sum = zero
    second_sum = zero
    lse = zero
    lse2 = zero
    size = zero
    largest = zero
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        x = tl.load(z_ptr + at, mask=valid, other=0.0).to(tl.float64)
        e = _expm1(x)
        q = tl.exp(x - top)
        k1 -= tl.sum(tl.where(valid, x, 0.0))
        k2 += tl.sum(tl.where(valid, 0.5 * x * x, 0.0))
        k3 += tl.sum(tl.where(valid, e - x, 0.0))
        outside += tl.sum((valid & (tl.abs(x) > log_c)).to(tl.float64))
        first_sum += tl.sum(tl.where(valid, e, 0.0))
        second_sum += tl.sum(tl.where(valid, e * (e + 2.0), 0.0))
        lse += tl.sum(tl.where(valid, q, 0.0))
        lse2 += tl.sum(tl.where(valid, q * q, 0.0))
        size += tl.sum(tl.where(valid, tl.abs(x), 0.0))
        largest = tl.maximum(largest, tl.max(tl.where(valid, tl.abs(x), 0.0)))
    terms = terms_ptr + program * 10
    tl.store(terms, k1)
    tl.store(terms + 1, k2)
    tl.store(terms + 2, k3)
    tl.store(terms + 3, outside)
    tl.store(terms + 4, first_sum)
    tl.store(terms + 5, second_sum)
    tl.store(terms + 6, lse)
    tl.store(terms + 7, lse2)
    tl.store(terms + 8, size)
    tl.store(terms + 9, largest)


@triton.jit
def _scope_values(scope_ptr, table_ptr, row, row_ok):
    """Each row's scope entry of the covariance kernels' table (``table_ptr`` [S, 6]
    float64: mean log pi, mean A, mean c, 2 sigma^2, flat (1.0), N / sum w), [BLOCK_ROWS]
    each; a flat scope's 2 sigma^2 reads 1 (its weights are 1 whatever it holds)."""
    entry = table_ptr + tl.load(scope_ptr + row, mask=row_ok, other=0) * 6
    mean_lp = tl.load(entry, mask=row_ok, other=0.0)
    mean_a = tl.load(entry + 1, mask=row_ok, other=0.0)
    mean_c = tl.load(entry + 2, mask=row_ok, other=0.0)
    flat = tl.load(entry + 4, mask=row_ok, other=1.0) != 0.0
    two_variance = tl.where(flat, 1.0, tl.load(entry + 3, mask=row_ok, other=1.0))
    factor = tl.load(entry + 5, mask=row_ok, other=0.0)
    return mean_lp, mean_a, mean_c, flat, two_variance, factor


@triton.jit
def _kernel_weight(c, flat, two_variance):
    """w = exp(-c^2 / 2 sigma^2) of a tile's c [rows, BLOCK_T], 1 on flat scopes."""
    return tl.where(flat[:, None], 1.0, tl.exp(-(c * c) / two_variance[:, None]))


@triton.jit
def covariance_rows(
    logp_ptr, adv_ptr, mask_ptr, z_ptr, scope_ptr, table_ptr, constants_ptr, row_sums_ptr,
    rows, length,
    PASS: tl.constexpr, NARROW: tl.constexpr, NARROW_Z: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """Passes 0-3 of CW-GRPO's kernel over BLOCK_ROWS rows: three float64 sums a row into
    ``row_sums_ptr`` [rows, 3], c = (log pi - mean log pi) (A - mean A) with the row's
    scope's means (``scope_ptr`` [rows] int64 into ``table_ptr``, :func:`_scope_values`):

    0. valid tokens, sum log pi, sum A;
    1. sum c, sum c^2, and Clip-Cov's eligible tokens: c over the batch (the means
       ``constants_ptr`` [0:2]), stored in the input's precision (NARROW: float32),
       inside (constants[2], constants[3]), and not zeroed by PPO clipping: not A > 0
       with exp(z) > constants[4], nor A < 0 with exp(z) < constants[5], exp(z) rounded
       to z's precision (NARROW_Z) as torch computes it;
    2. sum (c - mean c)^2;
    3. sum w, w = exp(-c^2 / 2 sigma^2), 1 on flat scopes.
    """
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    # pass 0 has no scope's means yet: nothing read
    looked_up = row < 0 if PASS == 0 else row_ok
    # (not `_`: the loop's tiles reuse that name with another type)
    mean_lp, mean_a, mean_c, flat, two_variance, _factor = _scope_values(
        scope_ptr, table_ptr, row, looked_up
    )
    first = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    second = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    third = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        x = tl.load(logp_ptr + at, mask=valid, other=0.0).to(tl.float64)
        a = tl.load(adv_ptr + at, mask=valid, other=0.0).to(tl.float64)
        if PASS == 0:
            first += tl.sum(valid.to(tl.float64), 1)
            second += tl.sum(tl.where(valid, x, 0.0), 1)
            third += tl.sum(tl.where(valid, a, 0.0), 1)
        else:
            c = (x - mean_lp[:, None]) * (a - mean_a[:, None])
            if PASS == 1:
                first += tl.sum(tl.where(valid, c, 0.0), 1)
                second += tl.sum(tl.where(valid, c * c, 0.0), 1)
                c_batch = (x - tl.load(constants_ptr)) * (a - tl.load(constants_ptr + 1))
                if NARROW:
                    c_batch = c_batch.to(tl.float32).to(tl.float64)
                ratio = tl.exp(tl.load(z_ptr + at, mask=valid, other=0.0).to(tl.float64))
                if NARROW_Z:
                    ratio = ratio.to(tl.float32).to(tl.float64)
                band = (c_batch > tl.load(constants_ptr + 2)) & (
                    c_batch < tl.load(constants_ptr + 3)
                )
                clipped = ((a > 0.0) & (ratio > tl.load(constants_ptr + 4))) | (
                    (a < 0.0) & (ratio < tl.load(constants_ptr + 5))
                )
                third += tl.sum((valid & band & (clipped == 0)).to(tl.float64), 1)
            elif PASS == 2:
                deviation = c - mean_c[:, None]
                first += tl.sum(tl.where(valid, deviation * deviation, 0.0), 1)
            else:
                w = _kernel_weight(c, flat, two_variance)
                first += tl.sum(tl.where(valid, w, 0.0), 1)
    tl.store(row_sums_ptr + row * 3, first, mask=row_ok)
    tl.store(row_sums_ptr + row * 3 + 1, second, mask=row_ok)
    tl.store(row_sums_ptr + row * 3 + 2, third, mask=row_ok)


@triton.jit
def _log_or_minus_inf(x):
    """log x of x >= 0, -inf at 0 (a weight that underflowed: the negative over-flow
    bin), without asking log of 0."""
    positive = x > 0.0
    return tl.where(positive, tl.log(tl.where(positive, x, 1.0)), float("-inf"))


@triton.jit
def covariance_statistics(
    logp_ptr, adv_ptr, mask_ptr, scope_ptr, table_ptr, constants_ptr, counts_ptr, sums_ptr,
    slots_ptr, row_sums_ptr, rows, length,
    WEIGHT_BINS: tl.constexpr, NARROW: tl.constexpr, NUM_BINS: tl.constexpr,
    MIN_EXP: tl.constexpr, PER_DECADE: tl.constexpr, MAGNITUDE_BINS: tl.constexpr,
    CENTER: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """Pass 4 over BLOCK_ROWS rows: c, w and w~ = w N / sum w of each valid token, stored
    in the input's precision (NARROW: float32), into what the ``covariance`` section
    reports. Atomic adds to ``counts_ptr`` (int32): [NUM_BINS] the bins of c, then of
    log w, then of log w~, then [WEIGHT_BINS] w in equal bins of [0, 1]; to ``sums_ptr``
    [NUM_BINS] float64 the c of each bin. The program's [20] float64 slots into
    ``slots_ptr``: the moments (count, mean, squared deviations, min, max) of c, w and
    w~, sum |A|, sum w |A|, sum w~ |A|, and the tokens with w under the thresholds
    ``constants_ptr`` [6:8]. Each row's sums of c, w and w~ into ``row_sums_ptr``
    [rows, 3]."""
    program = tl.program_id(0)
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    mean_lp, mean_a, _mean_c, flat, two_variance, factor = _scope_values(
        scope_ptr, table_ptr, row, row_ok
    )
    low_w = tl.load(constants_ptr + 6)
    lower_w = tl.load(constants_ptr + 7)
    count_c, mean_c, spread_c, min_c, max_c = _no_moments()
    count_w, mean_w, spread_w, min_w, max_w = _no_moments()
    count_n, mean_n, spread_n, min_n, max_n = _no_moments()
    zero = tl.full([], 0.0, dtype=tl.float64)
    mass_a = zero
    mass_w = zero
    mass_n = zero
    below = zero
    below_lower = zero
    row_c = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    row_w = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    row_n = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    ones = tl.full([BLOCK_ROWS, BLOCK_T], 1, dtype=tl.int32)
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        x = tl.load(logp_ptr + at, mask=valid, other=0.0).to(tl.float64)
        a = tl.load(adv_ptr + at, mask=valid, other=0.0).to(tl.float64)
        c = (x - mean_lp[:, None]) * (a - mean_a[:, None])
        w = _kernel_weight(c, flat, two_variance)
        n = w * factor[:, None]
        if NARROW:
            c = c.to(tl.float32).to(tl.float64)
            w = w.to(tl.float32).to(tl.float64)
            n = n.to(tl.float32).to(tl.float64)
        # masked positions: values that log and bin without NaN, and are not counted
        w = tl.where(valid, w, 1.0)
        n = tl.where(valid, n, 1.0)
        index = _bin_index(c, MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER)
        tl.atomic_add(counts_ptr + index, ones, mask=valid)
        tl.atomic_add(sums_ptr + index, c, mask=valid)
        index = _bin_index(_log_or_minus_inf(w), MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER)
        tl.atomic_add(counts_ptr + NUM_BINS + index, ones, mask=valid)
        index = _bin_index(_log_or_minus_inf(n), MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER)
        tl.atomic_add(counts_ptr + 2 * NUM_BINS + index, ones, mask=valid)
        slot = tl.minimum((w * WEIGHT_BINS).to(tl.int32), WEIGHT_BINS - 1)
        tl.atomic_add(counts_ptr + 3 * NUM_BINS + slot, ones, mask=valid)
        count_c, mean_c, spread_c, min_c, max_c = _add_moments(
            count_c, mean_c, spread_c, min_c, max_c, c, valid
        )
        count_w, mean_w, spread_w, min_w, max_w = _add_moments(
            count_w, mean_w, spread_w, min_w, max_w, w, valid
        )
        count_n, mean_n, spread_n, min_n, max_n = _add_moments(
            count_n, mean_n, spread_n, min_n, max_n, n, valid
        )
        magnitude = tl.where(valid, tl.abs(a), 0.0)
        mass_a += tl.sum(magnitude)
        mass_w += tl.sum(w * magnitude)
        mass_n += tl.sum(n * magnitude)
        below += tl.sum((valid & (w < low_w)).to(tl.float64))
        below_lower += tl.sum((valid & (w < lower_w)).to(tl.float64))
        row_c += tl.sum(tl.where(valid, c, 0.0), 1)
        row_w += tl.sum(tl.where(valid, w, 0.0), 1)
        row_n += tl.sum(tl.where(valid, n, 0.0), 1)
    slots = slots_ptr + program * 20
    _store_moments(slots, count_c, mean_c, spread_c, min_c, max_c)
    _store_moments(slots + 5, count_w, mean_w, spread_w, min_w, max_w)
    _store_moments(slots + 10, count_n, mean_n, spread_n, min_n, max_n)
    tl.store(slots + 15, mass_a)
    tl.store(slots + 16, mass_w)
    tl.store(slots + 17, mass_n)
    tl.store(slots + 18, below)
    tl.store(slots + 19, below_lower)
    tl.store(row_sums_ptr + row * 3, row_c, mask=row_ok)
    tl.store(row_sums_ptr + row * 3 + 1, row_w, mask=row_ok)
    tl.store(row_sums_ptr + row * 3 + 2, row_n, mask=row_ok)


@triton.jit
def _sin_pi_fraction(j, size):
    """sin(pi j / size) of integers 0 <= j < 2 size (int64): the angle reduced to
    [0, pi / 2] in integers (sin(pi + x) = -sin x, sin(pi - x) = sin x), so that the
    sines near pi keep their digits."""
    upper = j >= size
    k = tl.where(upper, j - size, j)
    k = tl.minimum(k, size - k)
    value = tl.sin(k.to(tl.float64) * 3.141592653589793 / size.to(tl.float64))
    return tl.where(upper, -value, value)


@triton.jit
def lfr_band(
    auto_ptr, lengths_ptr, widths_ptr, band_ptr, energy_ptr, stride, BLOCK_T: tl.constexpr
):
    """The LFR's band energy of one row a program, from its linear autocorrelation
    ``auto_ptr`` [rows, >= L] float64 (row stride ``stride``; lags at or past L never
    read): band = w a(0) + sum_{m=1}^{L-1} a(m) 2 sin(pi m w / L) / sin(pi m / L), with
    w = ``widths_ptr`` [rows] float64 (odd integers, 2 k_c + 1) and L = ``lengths_ptr``
    [rows] int64, m w reduced modulo 2 L in integers; into ``band_ptr`` [rows], and a(0)
    into ``energy_ptr`` [rows]."""
    row = tl.program_id(0)
    base = auto_ptr + row.to(tl.int64) * stride
    size = tl.load(lengths_ptr + row)
    width = tl.load(widths_ptr + row).to(tl.int64)
    safe = tl.maximum(size, 1)
    energy = tl.load(base, mask=size > 0, other=0.0)  # a row without tokens: 0
    total = tl.zeros([BLOCK_T], dtype=tl.float64)
    for start in range(0, size.to(tl.int32), BLOCK_T):
        m = start + tl.arange(0, BLOCK_T).to(tl.int64)
        inside = (m >= 1) & (m < size)
        a = tl.load(base + m, mask=inside, other=0.0)
        numerator = _sin_pi_fraction((m * width) % (2 * safe), safe)
        denominator = tl.where(inside, _sin_pi_fraction(m, safe), 1.0)
        total += tl.where(inside, a * (2.0 * numerator / denominator), 0.0)
    tl.store(band_ptr + row, tl.sum(total) + energy * width.to(tl.float64))
    tl.store(energy_ptr + row, energy)


@triton.jit
def _signal_values(values_ptr, at, inside, RATIO: tl.constexpr):
    """(the stored values, the signal x in float64: the values, or with RATIO their exp)
    at ``at`` where ``inside`` (0 elsewhere)."""
    stored = tl.load(values_ptr + at, mask=inside, other=0.0)
    x = stored.to(tl.float64)
    if RATIO:
        x = tl.exp(x)
    return stored, tl.where(inside, x, 0.0)


@triton.jit
def centre_rows(
    values_ptr, lengths_ptr, centred_ptr, stats_ptr, length, window,
    RATIO: tl.constexpr, BLOCK_T: tl.constexpr, WINDOW_BLOCK: tl.constexpr,
    WINDOWS: tl.constexpr,
):  # fmt: skip
    """One packed row a program (its L = ``lengths_ptr`` [rows] int64 valid tokens
    first, of ``values_ptr`` [rows, length]): the signal x (the values, or with RATIO
    their exp, float64) minus its mean, written to ``centred_ptr`` [rows, length] float64
    (0 past L); into ``stats_ptr`` [rows, 3] float64 its variance (the centred values'
    sum of squares over L; NaN for L = 0), the mean of its windows' variances (windows
    of ``window`` tokens, each about its own mean, over at most WINDOW_BLOCK lanes, a
    trailing single-token window left out unless it is the whole row; NaN where no
    window is used) and whether it has energy (1.0: L >= 2, not every value equal to
    the first)."""
    row = tl.program_id(0)
    base = row.to(tl.int64) * length
    size = tl.load(lengths_ptr + row)
    first = tl.load(values_ptr + base, mask=size > 0, other=0.0)
    total = tl.zeros([BLOCK_T], dtype=tl.float64)
    differs = tl.zeros([BLOCK_T], dtype=tl.int32)
    for start in range(0, size.to(tl.int32), BLOCK_T):
        t = start + tl.arange(0, BLOCK_T)
        inside = t < size
        stored, x = _signal_values(values_ptr, base + t, inside, RATIO)
        total += x
        differs |= (inside & (stored != first)).to(tl.int32)
    safe = tl.maximum(size, 1).to(tl.float64)
    mean = tl.sum(total) / safe
    squares = tl.zeros([BLOCK_T], dtype=tl.float64)
    for start in range(0, length, BLOCK_T):
        t = start + tl.arange(0, BLOCK_T)
        inside = t < size
        _, x = _signal_values(values_ptr, base + t, inside, RATIO)
        centred = tl.where(inside, x - mean, 0.0)
        tl.store(centred_ptr + base + t, centred, mask=t < length)
        squares += centred * centred
    # the windows, WINDOWS at a time, each on a row of lanes of its own
    lane = tl.arange(0, WINDOW_BLOCK)
    variances = tl.zeros([WINDOWS], dtype=tl.float64)
    used = tl.zeros([WINDOWS], dtype=tl.float64)
    n_windows = (size + window - 1) // window
    for first_window in range(0, n_windows.to(tl.int32), WINDOWS):
        index = first_window + tl.arange(0, WINDOWS)
        t = index[:, None] * window + lane[None, :]
        inside = (lane[None, :] < window) & (t < size)
        _, x = _signal_values(values_ptr, base + t, inside, RATIO)
        centred = tl.where(inside, x - mean, 0.0)
        count = tl.sum(inside.to(tl.float64), 1)
        own_mean = tl.sum(centred, 1) / tl.maximum(count, 1.0)
        deviation = tl.where(inside, centred - own_mean[:, None], 0.0)
        variance = tl.sum(deviation * deviation, 1) / tl.maximum(count, 1.0)
        counted = (count >= 2.0) | ((size == 1) & (count == 1.0))
        variances += tl.where(counted, variance, 0.0)
        used += counted.to(tl.float64)
    n_used = tl.sum(used)
    nan = float("nan")
    stats = stats_ptr + row * 3
    tl.store(stats, tl.where(size > 0, tl.sum(squares) / safe, nan))
    tl.store(stats + 1, tl.where(n_used > 0, tl.sum(variances) / tl.maximum(n_used, 1.0), nan))
    tl.store(stats + 2, ((size >= 2) & (tl.max(differs) > 0)).to(tl.float64))


@triton.jit
def advantage_rows(
    adv_ptr, mask_ptr, sums_ptr, sign_counts_ptr, rows, length,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """Each row's sums of its positive and of its negative valid advantages (float64)
    into ``sums_ptr`` [2, rows], and how many there are into ``sign_counts_ptr`` [2, rows]
    int64."""
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    positive = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    negative = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    n_positive = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    n_negative = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        a = tl.load(adv_ptr + at, mask=valid, other=0.0).to(tl.float64)
        above = valid & (a > 0.0)
        below = valid & (a < 0.0)
        positive += tl.sum(tl.where(above, a, 0.0), 1)
        negative += tl.sum(tl.where(below, a, 0.0), 1)
        n_positive += tl.sum(above.to(tl.int64), 1)
        n_negative += tl.sum(below.to(tl.int64), 1)
    tl.store(sums_ptr + row, positive, mask=row_ok)
    tl.store(sums_ptr + rows + row, negative, mask=row_ok)
    tl.store(sign_counts_ptr + row, n_positive, mask=row_ok)
    tl.store(sign_counts_ptr + rows + row, n_negative, mask=row_ok)


@triton.jit
def difference_rows(
    logp_ptr, ref_ptr, mask_ptr, sums_ptr, rows, length,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """Each row's valid tokens, sum log pi and sum (log pi - log pi_ref), float64, into
    ``sums_ptr`` [3, rows]."""
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    count = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    current = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    difference = tl.zeros([BLOCK_ROWS], dtype=tl.float64)
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        x = tl.load(logp_ptr + at, mask=valid, other=0.0).to(tl.float64)
        reference = tl.load(ref_ptr + at, mask=valid, other=0.0).to(tl.float64)
        count += tl.sum(valid.to(tl.float64), 1)
        current += tl.sum(x, 1)
        difference += tl.sum(x - reference, 1)  # both 0 where not valid
    tl.store(sums_ptr + row, count, mask=row_ok)
    tl.store(sums_ptr + rows + row, current, mask=row_ok)
    tl.store(sums_ptr + 2 * rows + row, difference, mask=row_ok)


@triton.jit
def _last_two(last_a, before_a, last_b, before_b):
    """The last two keys (>= 0; -1: none) of a stretch of tokens, from those of its first
    part (a) and its second (b): b's, completed by a's."""
    last = tl.where(last_b >= 0, last_b, last_a)
    before = tl.where(last_b >= 0, tl.where(before_b >= 0, before_b, last_a), before_a)
    return last, before


@triton.jit
def _final(values, BLOCK_T: tl.constexpr):
    """The last column of a [BLOCK_T] int64 tile."""
    return tl.sum(tl.where(tl.arange(0, BLOCK_T) == BLOCK_T - 1, values, 0))


@triton.jit
def state_runs(
    values_ptr, mask_ptr, bounds_ptr, state_counts_ptr, histogram_ptr, changes_ptr,
    off_ptr, length, window, n_changes, n_off, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """One row a program, its valid tokens in order (holes compacted away, a token's
    packed position p): each token's state, 1 above ``bounds_ptr`` [1], -1 below
    ``bounds_ptr`` [0], else 0; into ``state_counts_ptr`` [rows, 6] int64 its tokens and
    its runs (maximal blocks of one state) of each state (down, on, up); into
    ``histogram_ptr`` [3, length + 1] int64 (atomic adds) its runs by state and length;
    into ``changes_ptr`` [rows, n_changes] int64 the adjacent changes of state inside
    each window of ``window`` packed tokens (a pair across two windows in neither); into
    ``off_ptr`` [rows, n_off] int64 the off-band tokens of each window. A token's key,
    4 p + state + 1, carries its position and state through the scans that find, for
    each token, the previous valid token and the start of the previous run."""
    row = tl.program_id(0)
    base = row.to(tl.int64) * length
    lower = tl.load(bounds_ptr)
    upper = tl.load(bounds_ptr + 1)
    none = tl.full([BLOCK_T], -1, dtype=tl.int64)
    count = tl.full([], 0, dtype=tl.int64)
    # the last valid token's key and the last run's start key of the earlier tiles (what
    # came before them is never asked: a token of this tile is the last of the two)
    valid_last = tl.full([], -1, dtype=tl.int64)
    start_last = tl.full([], -1, dtype=tl.int64)
    tokens = tl.zeros([BLOCK_T], dtype=tl.int64)
    down_tokens = tl.zeros([BLOCK_T], dtype=tl.int64)
    up_tokens = tl.zeros([BLOCK_T], dtype=tl.int64)
    runs = tl.zeros([BLOCK_T], dtype=tl.int64)
    down_runs = tl.zeros([BLOCK_T], dtype=tl.int64)
    up_runs = tl.zeros([BLOCK_T], dtype=tl.int64)
    for start in range(0, length, BLOCK_T):
        t = start + tl.arange(0, BLOCK_T)
        inside = t < length
        valid = tl.load(mask_ptr + base + t, mask=inside, other=0) != 0
        z = tl.load(values_ptr + base + t, mask=valid, other=0.0).to(tl.float64)
        state = tl.where(z > upper, 1, tl.where(z < lower, -1, 0)).to(tl.int64)
        p = count + tl.cumsum(valid.to(tl.int64), 0) - 1
        key = tl.where(valid, 4 * p + state + 1, -1)
        last, before = tl.associative_scan((key, none), 0, _last_two)
        # after the earlier tiles: a valid token's ``before`` is the previous valid one
        last, before = _last_two(valid_last, -1, last, before)
        previous = (before & 3) - 1
        is_start = valid & ((before < 0) | (previous != state))
        is_change = valid & (before >= 0) & (previous != state)
        start_key = tl.where(is_start, key, -1)
        run_last, run_before = tl.associative_scan((start_key, none), 0, _last_two)
        run_last, run_before = _last_two(start_last, -1, run_last, run_before)
        # a run's start closes the run before it: its state and length
        closes = is_start & (run_before >= 0)
        closed = (run_before & 3) * (length + 1) + p - (run_before >> 2)
        ones = tl.full([BLOCK_T], 1, dtype=tl.int64)
        tl.atomic_add(histogram_ptr + tl.where(closes, closed, 0), ones, mask=closes)
        inner = is_change & (p % window != 0)
        at_window = row.to(tl.int64) * n_changes + p // window
        tl.atomic_add(changes_ptr + tl.where(inner, at_window, 0), ones, mask=inner)
        off = valid & (state != 0) & (p // window < n_off)
        at_off = row.to(tl.int64) * n_off + p // window
        tl.atomic_add(off_ptr + tl.where(off, at_off, 0), ones, mask=off)
        tokens += valid.to(tl.int64)
        down_tokens += (valid & (state < 0)).to(tl.int64)
        up_tokens += (valid & (state > 0)).to(tl.int64)
        runs += is_start.to(tl.int64)
        down_runs += (is_start & (state < 0)).to(tl.int64)
        up_runs += (is_start & (state > 0)).to(tl.int64)
        count += tl.sum(valid.to(tl.int64))
        valid_last = _final(last, BLOCK_T)
        start_last = _final(run_last, BLOCK_T)
    if start_last >= 0:  # the row's last run ends with its last token
        last_run = (start_last & 3) * (length + 1) + count - (start_last >> 2)
        tl.atomic_add(histogram_ptr + last_run, 1)
    counts = state_counts_ptr + row * 6
    n_down, n_up = tl.sum(down_tokens), tl.sum(up_tokens)
    r_down, r_up = tl.sum(down_runs), tl.sum(up_runs)
    tl.store(counts, n_down)
    tl.store(counts + 1, tl.sum(tokens) - n_down - n_up)
    tl.store(counts + 2, n_up)
    tl.store(counts + 3, r_down)
    tl.store(counts + 4, tl.sum(runs) - r_down - r_up)
    tl.store(counts + 5, r_up)


@triton.jit
def entropy_quadrants(
    adv_ptr, entropy_ptr, old_ptr, mask_ptr, quadrants_ptr, kl_rows_ptr, rows, length,
    BLOCK_ROWS: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    """TEPO's (sign A, sign dH) quadrants of BLOCK_ROWS rows' valid tokens, dH = entropy -
    old entropy in the inputs' precision: atomic adds to ``quadrants_ptr`` [6] int64 (A
    > 0 with dH < 0, the KL mask; A > 0 otherwise; A < 0 with dH > 0; A < 0 otherwise;
    A == 0; all), and each row's KL-mask tokens into ``kl_rows_ptr`` [rows] int64."""
    row, row_ok, row_base = _program_rows(rows, length, BLOCK_ROWS)
    in_mask = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    positive = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    increasing = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    negative = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    zero = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    total = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    for start in range(0, length, BLOCK_T):
        _, _, at, valid = _tile(mask_ptr, row_ok, row_base, start, length, BLOCK_T)
        a = tl.load(adv_ptr + at, mask=valid, other=0.0)
        change = tl.load(entropy_ptr + at, mask=valid, other=0.0) - tl.load(
            old_ptr + at, mask=valid, other=0.0
        )
        above = valid & (a > 0)
        below = valid & (a < 0)
        in_mask += tl.sum((above & (change < 0)).to(tl.int64), 1)
        positive += tl.sum(above.to(tl.int64), 1)
        increasing += tl.sum((below & (change > 0)).to(tl.int64), 1)
        negative += tl.sum(below.to(tl.int64), 1)
        zero += tl.sum((valid & (a == 0)).to(tl.int64), 1)
        total += tl.sum(valid.to(tl.int64), 1)
    tl.store(kl_rows_ptr + row, in_mask, mask=row_ok)
    n_mask, n_increasing = tl.sum(in_mask), tl.sum(increasing)
    tl.atomic_add(quadrants_ptr, n_mask)
    tl.atomic_add(quadrants_ptr + 1, tl.sum(positive) - n_mask)
    tl.atomic_add(quadrants_ptr + 2, n_increasing)
    tl.atomic_add(quadrants_ptr + 3, tl.sum(negative) - n_increasing)
    tl.atomic_add(quadrants_ptr + 4, tl.sum(zero))
    tl.atomic_add(quadrants_ptr + 5, tl.sum(total))


@triton.jit
def aggregation_rows(
    clipped_ptr, first_ptr, second_ptr, lengths_ptr, totals_ptr, rows, first_stride,
    second_stride, BLOCK: tl.constexpr,
):  # fmt: skip
    """One program over a chunk's [rows]: into ``totals_ptr`` [7] float64 the clipped
    tokens (``clipped_ptr``, int64), the valid tokens (``lengths_ptr``, int64), the rows
    with tokens, then for ``first_ptr`` and ``second_ptr`` (float64 row sums, a stride
    apart) their sum and the sum of each row's mean over the rows with tokens."""
    offsets = tl.arange(0, BLOCK)
    clipped = tl.zeros([BLOCK], dtype=tl.int64)
    tokens = tl.zeros([BLOCK], dtype=tl.int64)
    present = tl.zeros([BLOCK], dtype=tl.int64)
    first = tl.zeros([BLOCK], dtype=tl.float64)
    first_means = tl.zeros([BLOCK], dtype=tl.float64)
    second = tl.zeros([BLOCK], dtype=tl.float64)
    second_means = tl.zeros([BLOCK], dtype=tl.float64)
    for start in range(0, rows, BLOCK):
        at = start + offsets
        inside = at < rows
        n = tl.load(lengths_ptr + at, mask=inside, other=0)
        has = n > 0
        divisor = tl.maximum(n, 1).to(tl.float64)
        a = tl.load(first_ptr + at.to(tl.int64) * first_stride, mask=inside, other=0.0)
        b = tl.load(second_ptr + at.to(tl.int64) * second_stride, mask=inside, other=0.0)
        clipped += tl.load(clipped_ptr + at, mask=inside, other=0)
        tokens += n
        present += has.to(tl.int64)
        first += a
        second += b
        first_means += tl.where(has, a / divisor, 0.0)
        second_means += tl.where(has, b / divisor, 0.0)
    tl.store(totals_ptr, tl.sum(clipped, 0).to(tl.float64))
    tl.store(totals_ptr + 1, tl.sum(tokens, 0).to(tl.float64))
    tl.store(totals_ptr + 2, tl.sum(present, 0).to(tl.float64))
    tl.store(totals_ptr + 3, tl.sum(first, 0))
    tl.store(totals_ptr + 4, tl.sum(first_means, 0))
    tl.store(totals_ptr + 5, tl.sum(second, 0))
    tl.store(totals_ptr + 6, tl.sum(second_means, 0))


@triton.jit
def class_cells(
    values_ptr, kept_ptr, cell_counts_ptr, table_ptr, classes, length,
    LOG: tl.constexpr, NUM_BINS: tl.constexpr, MIN_EXP: tl.constexpr,
    PER_DECADE: tl.constexpr, MAGNITUDE_BINS: tl.constexpr, CENTER: tl.constexpr,
    BLOCK: tl.constexpr,
):  # fmt: skip
    """One program a cell (k, c): the values of row k ([K, length] float) that its mask
    (``kept_ptr`` [K, C, length] bytes) keeps, counted in the fixed bins of x (of log x
    with LOG; a negative x there is left uncounted, its cell's minimum tells) into
    ``cell_counts_ptr`` [K * C, NUM_BINS] int64, and (count, mean, sum of squared deviations
    about the mean, min, max) into ``table_ptr`` [K * C, 5] float64: the mean first, the
    deviations in a second pass, as ``moments.masked_moment_table``."""
    cell = tl.program_id(0)
    row_at = (cell // classes).to(tl.int64) * length
    keep_at = cell.to(tl.int64) * length
    offsets = tl.arange(0, BLOCK)
    count = tl.zeros([BLOCK], dtype=tl.int64)
    total = tl.zeros([BLOCK], dtype=tl.float64)
    smallest = tl.full([BLOCK], float("inf"), dtype=tl.float64)
    largest = tl.full([BLOCK], float("-inf"), dtype=tl.float64)
    for start in range(0, length, BLOCK):
        at = start + offsets
        kept = tl.load(kept_ptr + keep_at + at, mask=at < length, other=0) != 0
        x = tl.load(values_ptr + row_at + at, mask=kept, other=1.0).to(tl.float64)
        count += kept.to(tl.int64)
        total += tl.where(kept, x, 0.0)
        smallest = tl.minimum(smallest, tl.where(kept, x, float("inf")))
        largest = tl.maximum(largest, tl.where(kept, x, float("-inf")))
        if LOG:
            counted = kept & (x >= 0.0)
            coordinate = tl.log(tl.where(counted, x, 1.0))
        else:
            counted = kept
            coordinate = x
        index = _bin_index(coordinate, MIN_EXP, PER_DECADE, MAGNITUDE_BINS, CENTER)
        ones = tl.full(index.shape, 1, dtype=tl.int64)
        tl.atomic_add(cell_counts_ptr + cell.to(tl.int64) * NUM_BINS + index, ones, mask=counted)
    n = tl.sum(count, 0)
    mean = tl.sum(total, 0) / tl.maximum(n, 1).to(tl.float64)
    spread = tl.zeros([BLOCK], dtype=tl.float64)
    for start in range(0, length, BLOCK):
        at = start + offsets
        kept = tl.load(kept_ptr + keep_at + at, mask=at < length, other=0) != 0
        x = tl.load(values_ptr + row_at + at, mask=kept, other=0.0).to(tl.float64)
        deviation = tl.where(kept, x - mean, 0.0)
        spread += deviation * deviation
    _store_moments(
        table_ptr + cell * 5, n.to(tl.float64), mean, tl.sum(spread, 0), tl.min(smallest, 0),
        tl.max(largest, 0),
    )  # fmt: skip
