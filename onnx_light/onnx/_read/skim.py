"""Skim metadata fast: skip what cannot hold a tensor's raw_data, and runs of small fields.

The scanner (``_read/wire.py``) decodes fields in Python, about a microsecond each.
A tree ensemble has millions of fields (one per node id, threshold, mode...),
none of which can hold weights. Two shortcuts keep its scan near protobuf's
speed, without ever reading weights:

- :class:`RawDataFilter`: a raw_data field of ``n >= 1024`` bytes is
  encoded as its tag ``0x4a`` (or an overlong form of it) followed by a
  length varint whose second byte is at least 8. A sub-message whose bytes
  contain no such pair cannot hold one, at any depth: it is kept verbatim
  without being decoded. The search runs in C (:mod:`re`), one 1 MiB window
  at a time, only over the windows asked about, each searched once.
- :func:`run_end`: a field is often followed by many fields with the same
  tag (unpacked ``ints``, ``floats``, ``strings`` of an attribute). Such a
  run is skipped in one step: fixed-size and varint fields with numpy, short
  length-delimited fields in a tight loop over the bytes.

Both are only shortcuts: what they skip is copied verbatim, as the scanner
would have, and protobuf parses the result.
"""

from __future__ import annotations

import bisect
import re

import numpy as np

__all__ = ["RawDataFilter", "run_end"]


WINDOW = 1 << 20
_OVERLAP = 8  # the longest encoding of the pattern, minus one
# raw_data (field 9, wire type 2): its one-byte tag, then a length of 1024 or
# more (a varint whose second byte is >= 8); or an overlong form of the tag,
# matched loosely (a false match only costs time)
_PATTERNS_1024 = (re.compile(rb"\x4a[\x80-\xff][\x08-\xff]"), re.compile(rb"\xca[\x80\x00]"))
_PATTERNS_128 = (re.compile(rb"\x4a[\x80-\xff]"), re.compile(rb"\xca[\x80\x00]"))


class RawDataFilter:
    """Answers "may these bytes hold a raw_data of ``threshold`` bytes or more?".

    Searches run in C (:mod:`re`) in chunks that start small (4 KiB: a
    tensor's raw_data tag comes right after its name) and double up to
    1 MiB, and stop at the first candidate. What was searched is remembered
    (intervals known clean, candidates found), so nested messages asking
    about the same bytes cost one search, and weights are barely read.

    Args:
        buf: the serialized model (bytes, or the scanner's file buffer).
        threshold: the scanner's raw_data threshold.
    """

    FIRST_CHUNK = 4096

    def __init__(self, buf, threshold: int) -> None:
        self.buf = buf
        self.size = len(buf)
        self.patterns = (
            _PATTERNS_1024 if threshold >= 1024 else _PATTERNS_128 if threshold >= 128 else None
        )
        # intervals known clean (no candidate starts there): sorted, disjoint
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._hits: list[int] = []  # sorted candidate positions

    def may_hold(self, spans) -> bool:
        """False when no raw_data of the threshold or more can start in the spans."""
        if self.patterns is None:
            return True  # a smaller raw_data fits a one-byte length: no shortcut
        return any(self._any(start, stop) for start, stop in spans)

    def _any(self, start: int, stop: int) -> bool:
        pos, chunk = start, self.FIRST_CHUNK
        while pos < stop:
            i = bisect.bisect_left(self._hits, pos)
            if i < len(self._hits) and self._hits[i] < stop:
                return True
            j = bisect.bisect_right(self._starts, pos) - 1
            if j >= 0 and pos < self._ends[j]:
                pos = self._ends[j]
                continue
            end = min(stop, pos + chunk)
            chunk = min(2 * chunk, WINDOW)
            hit = self._search(pos, end)
            if hit is not None:
                self._add_clean(pos, hit)
                bisect.insort(self._hits, hit)
                return True
            self._add_clean(pos, end)
            pos = end
        return False

    def _search(self, start: int, end: int) -> int | None:
        """The first candidate starting in ``[start, end)``, if any."""
        data = self.buf[start : min(self.size, end + _OVERLAP)]
        first = None
        for pattern in self.patterns:
            m = pattern.search(data, 0)
            if m is not None and m.start() < end - start:
                first = m.start() if first is None else min(first, m.start())
        return None if first is None else start + first

    def _add_clean(self, start: int, end: int) -> None:
        """Record ``[start, end)`` as clean, merged with the intervals it touches."""
        if start >= end:
            return
        starts, ends = self._starts, self._ends
        i = bisect.bisect_left(starts, start)
        if i > 0 and ends[i - 1] >= start:
            i -= 1
            start, end = starts[i], max(end, ends[i])
            del starts[i], ends[i]
        while i < len(starts) and starts[i] <= end:
            end = max(end, ends[i])
            del starts[i], ends[i]
        starts.insert(i, start)
        ends.insert(i, end)


def run_end(buf, pos: int, stop: int, end: int) -> int:
    """The end of the run of fields that repeat the tag of the field ``[pos, stop)``.

    Only one-byte tags are considered. Returns ``stop`` when the next field
    has another tag (or the run cannot be skipped in one step).

    Args:
        buf: the serialized model.
        pos: where the field starts (its tag).
        stop: where it ends.
        end: the end of the enclosing message.
    """
    if stop + 1 >= end or buf[stop] != buf[pos] or buf[pos] >= 0x80:
        return stop
    tag = buf[pos]
    wire = tag & 7
    if wire == 2 and buf[stop + 1] >= 0x80:
        return stop  # a long field (a tensor, a node): no run of short ones to skip
    if wire == 0:
        return _varints(buf, stop, end, tag)
    if wire in (1, 5):
        return _fixed(buf, stop, end, tag, 9 if wire == 1 else 5)
    if wire == 2:
        return _short(buf, stop, end, tag)
    return stop


def _windows():
    """Window sizes: small first (a short run costs a small read), then doubling."""
    size = 4096
    while True:
        yield min(size, WINDOW)
        size *= 2


def _varints(buf, pos: int, end: int, tag: int) -> int:
    """Skip ``tag varint`` fields: each ends with the one byte below 0x80 after its tag."""
    for window in _windows():
        stop = min(end, pos + window)
        w = np.frombuffer(buf[pos:stop], np.uint8)
        last = np.flatnonzero(w < 0x80)  # the last byte of every varint
        n = len(last) // 2
        if n == 0:
            return pos
        tags, values = last[0 : 2 * n : 2], last[1 : 2 * n : 2]
        ok = (w[tags] == tag) & (values - tags <= 10)
        ok[0] &= tags[0] == 0
        ok[1:] &= tags[1:] == values[:-1] + 1
        bad = np.flatnonzero(~ok)
        k = int(bad[0]) if len(bad) else n
        if k == 0:
            return pos
        new = pos + int(values[k - 1]) + 1
        if k < n or stop == end:
            return new
        pos = new


def _fixed(buf, pos: int, end: int, tag: int, size: int) -> int:
    """Skip ``tag`` + fixed-size fields (``size`` bytes each, tag included)."""
    for window in _windows():
        stop = min(end, pos + window - window % size)
        w = np.frombuffer(buf[pos:stop], np.uint8)
        n = len(w) // size
        if n == 0:
            return pos
        bad = np.flatnonzero(w[0 : n * size : size] != tag)
        k = int(bad[0]) if len(bad) else n
        new = pos + k * size
        if k < n or stop == end or n * size < len(w):
            return new
        pos = new


def _short(buf, pos: int, end: int, tag: int) -> int:
    """Skip ``tag length payload`` fields with one-byte lengths."""
    for window in _windows():
        stop = min(end, pos + window)
        w = buf[pos:stop]
        n = len(w)
        p = 0
        while p + 1 < n and w[p] == tag:
            length = w[p + 1]
            if length >= 0x80 or p + 2 + length > n:
                break
            p += 2 + length
        new = pos + p
        # the window cut a field short: go on from there
        if p == 0 or stop == end or not (p + 1 >= n or (w[p] == tag and w[p + 1] < 0x80)):
            return new
        pos = new
