"""Arrow binary/string arrays from (start, length) spans of one buffer, built in numpy.

Why: the decoder knows where every key, value and header lies in the records bytes; a
zero-copy `binary_view` array over those bytes (16 bytes per element, computed with numpy)
lets Arrow's C++ cast copy them into a contiguous `binary` array, with no per-record Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import as_strided

_INLINE = 12  # binary_view stores values of up to 12 bytes inline


def binary_from_spans(
    arr: np.ndarray,
    buffer: pa.Buffer,
    starts: np.ndarray,
    lengths: np.ndarray,
    *,
    string: bool = False,
) -> pa.Array:
    """Arrow binary (or string) array of arr[starts[i] : starts[i] + lengths[i]] (-1 = null).

    Builds a zero-copy binary_view over `buffer` (16 bytes per element, computed with numpy)
    and lets Arrow's C++ cast compact it into a contiguous `binary` array.
    """
    n = starts.shape[0]
    valid = lengths >= 0
    lens = np.where(valid, lengths, 0)
    total = arr.shape[0]
    views = np.zeros((n, 16), np.uint8)
    if n:
        safe = starts + _INLINE <= total
        if total >= _INLINE:
            window = as_strided(
                arr, shape=(total - _INLINE + 1, _INLINE), strides=(1, 1), writeable=False
            )
            head = window[np.where(safe, starts, 0)]
        else:
            head = np.zeros((n, _INLINE), np.uint8)
        if not safe.all():  # the last few bytes of the buffer: fill byte by byte
            for row in np.flatnonzero(~safe):
                s = int(starts[row])
                chunk = arr[s : min(total, s + _INLINE)]
                head[row] = 0
                head[row, : chunk.shape[0]] = chunk
        short = lens < _INLINE
        if short.any():  # inline values are zero-padded
            head[short] *= np.arange(_INLINE) < lens[short, None]
        views[:, 4:16] = head
        words = views.view(np.int32)
        words[:, 0] = lens
        big = lens > _INLINE
        if big.any():
            words[big, 2] = 0
            words[big, 3] = starts[big]
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_type = pa.string_view() if string else pa.binary_view()
    viewed = pa.Array.from_buffers(view_type, n, [validity, pa.py_buffer(views), buffer])
    return viewed.cast(pa.string() if string else pa.binary())
