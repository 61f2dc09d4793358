"""The one place `incsched.show` and the experiment figures meet matplotlib.

matplotlib is an extra (``incsched[experiments]``), imported only when a picture is drawn. Figures
are plain ``matplotlib.figure.Figure`` objects, rendered by the Agg (PNG) and SVG canvases when
saved: pyplot is never imported, so no display is needed, a caller's backend (a notebook's inline
one) is left alone, and nothing stays open after a figure is written. The same figure gives the same
bytes (no dates, a fixed SVG hash salt), written atomically.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from ..errors import IncschedError
from ..jsonio import atomic_write_bytes

__all__ = ["MATPLOTLIB_HINT", "FORMATS", "style", "new_figure", "add_bars", "time_scale", "byte_scale", "format_seconds", "picture_format", "save"]

#: What a missing matplotlib says: it is an extra, not a dependency.
MATPLOTLIB_HINT = "pictures need matplotlib: pip install 'incsched[experiments]'"

#: The formats a picture is written in, named by the file's suffix.
FORMATS = ("png", "svg")

#: Sizes readable where the figures are shown (a report page): the first figures' 6-point legends
#: were not. No offset on any axis: an axis reading "+2.43e-10" above its ticks says nothing.
_STYLE = {
    "svg.hashsalt": "incsched",
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "font.size": 8,
    "legend.fontsize": 8,
    "axes.titlesize": 9,
    "axes.formatter.useoffset": False,
}


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise IncschedError(MATPLOTLIB_HINT) from None
    return matplotlib


@contextlib.contextmanager
def style():
    """incsched's figure style, for drawing and saving inside the ``with`` block only.

    Raises
    ------
    IncschedError
        matplotlib is not installed (the message says how to install it).
    """
    with _matplotlib().rc_context(_STYLE):
        yield


def new_figure(**kwargs):
    """A ``matplotlib.figure.Figure`` (``kwargs`` as its constructor takes them), outside pyplot."""
    _matplotlib()
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def add_bars(ax, bars, facecolors, *, edgecolor="black", linewidth=0.25, hatch=None, zorder=2) -> None:
    """Horizontal bars ``(left, width, bottom, height)`` in data units as one collection.

    One artist for a whole Gantt chart: an artist per bar (``broken_barh``, ``barh``) made a
    chart of 700 operations take tens of seconds to lay out. Does not rescale the axes.
    """
    from matplotlib.collections import PolyCollection

    verts = [[(x, y), (x + w, y), (x + w, y + h), (x, y + h)] for x, w, y, h in bars]
    ax.add_collection(PolyCollection(verts, facecolors=facecolors, edgecolors=edgecolor, linewidths=linewidth, hatch=hatch, zorder=zorder),
                      autolim=False)


def time_scale(seconds: float) -> tuple[float, str]:
    """A unit that keeps a time axis's tick labels short: (seconds per unit, its name)."""
    if seconds >= 1.0:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e-3, "ms"
    return 1e-6, "µs"


def byte_scale(n_bytes: float) -> tuple[float, str]:
    """A unit that keeps a byte axis's tick labels short: (bytes per unit, its name)."""
    for power, name in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if n_bytes >= 1024**power:
            return float(1024**power), name
    return 1.0, "bytes"


def format_seconds(seconds: float) -> str:
    """``0.02666`` as ``26.66 ms``: four significant digits in the unit `time_scale` picks."""
    unit, name = time_scale(seconds)
    return f"{seconds / unit:.4g} {name}"


def picture_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """``fmt``, or else the format ``path``'s suffix names; one of `FORMATS`.

    Raises
    ------
    IncschedError
        Neither names PNG or SVG.
    """
    chosen = (fmt or Path(path).suffix.lstrip(".")).lower()
    if chosen not in FORMATS:
        got = f"format {fmt!r}" if fmt else f"suffix {Path(path).suffix or '(none)'!r}"
        raise IncschedError(f"{path}: pictures are written as .png or .svg, got {got}")
    return chosen


def save(fig, path: str | os.PathLike, fmt: str | None = None) -> Path:
    """Write ``fig`` to ``path`` atomically as PNG or SVG (``fmt``, else the suffix); return the path.

    Raises
    ------
    IncschedError
        Not a PNG or SVG name.
    OSError
        The file cannot be written.
    """
    chosen = picture_format(path, fmt)
    buf = io.BytesIO()
    # No creation date (SVG), no software version (PNG): a figure redrawn from the same data is
    # the same file.
    metadata = {"Date": None} if chosen == "svg" else {"Software": None}
    with style():
        fig.savefig(buf, format=chosen, metadata=metadata, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)
