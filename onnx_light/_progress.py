"""A progress bar for long copies: tqdm when installed, else one line of text."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress", "human", "rate"]


MIB = 2**20
BAR_FORMAT = (
    "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} MiB [{elapsed}<{remaining}, {rate_fmt}]"
)


def human(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def rate(nbytes: int, seconds: float) -> str:
    """Throughput: ``"412.3 MiB/s"`` (``"-"`` for no time)."""
    if seconds <= 0:
        return "-"
    return f"{human(int(nbytes / seconds))}/s"


def duration(seconds: float) -> str:
    """``75`` -> ``"1 min 15 s"``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """A ``progress(done, total)`` callback drawing a bar on stderr.

    Uses tqdm when it is installed, else a one-line text bar redrawn in place,
    which shows the bytes done and, once the copy has run for a second, its
    throughput and the time left.

    Args:
        label: shown before the bar.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar = None
        self.last = 0
        self.drawn = -1.0
        self.start: float | None = None
        try:
            import tqdm
        except ImportError:
            self.tqdm = None
        else:
            self.tqdm = tqdm.tqdm

    def __call__(self, done: int, total: int) -> None:
        if self.tqdm is not None:
            if self.bar is None:  # in MiB, as the summaries: no SI "MB" beside a "MiB/s"
                self.bar = self.tqdm(
                    total=total / MIB,
                    desc=self.label,
                    unit="MiB",
                    bar_format=BAR_FORMAT,
                    file=sys.stderr,
                    leave=False,
                )
            if total / MIB != self.bar.total:  # a total that changed (dedup: once compared)
                self.bar.total = total / MIB
                self.bar.refresh()
            self.bar.update((done - self.last) / MIB)
            self.last = done
            return
        now = time.monotonic()
        if self.start is None:
            self.start = now
        if done < total and now - self.drawn < 0.1:
            return
        self.drawn = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        line = f"\r{self.label} [{bar:<30}] {frac:4.0%} {human(done)}/{human(total)}"
        elapsed = now - self.start
        if elapsed >= 1.0 and done:
            left = (total - done) * elapsed / done
            line += f", {rate(done, elapsed)}, {duration(left)} left"
        sys.stderr.write(line + "\x1b[K")  # the end of a longer line drawn before cleared
        sys.stderr.flush()
        self.last = done

    def close(self) -> None:
        """Remove the tqdm bar, or end the text bar's line."""
        if self.bar is not None:
            self.bar.close()
        elif self.tqdm is None and self.drawn >= 0:
            sys.stderr.write("\n")
            sys.stderr.flush()
