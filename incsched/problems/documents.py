"""The one check every problem and answer file passes on the way in: the right format, the right
version, every field (a file that is not the document it should be is a `FormatError`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import FormatError

__all__ = ["check_document"]


def check_document(data: Any, *, format: str, version: int, fields: Iterable[str], noun: str, source: str) -> None:
    """Raise `FormatError` unless ``data`` is a ``format`` document of ``version`` with ``fields``.

    Every problem and answer reads its JSON form through this, so the three refusals (another
    format, another version, a missing field) read alike and name ``source``.

    Examples
    --------
    >>> check_document({"format": "x", "version": 2}, format="x", version=1, fields=(), noun="x file", source="f.json")
    Traceback (most recent call last):
    ...
    incsched.errors.FormatError: f.json: x file version 2 is not supported (expected 1)
    """
    if not isinstance(data, dict) or data.get("format") != format:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        article = "an" if noun[0] in "aeiou" else "a"
        raise FormatError(f"{source}: not {article} {noun} (format is {found!r}, expected {format!r})")
    if data.get("version") != version:
        raise FormatError(f"{source}: {noun} version {data.get('version')!r} is not supported (expected {version})")
    for key in fields:
        if key not in data:
            raise FormatError(f"{source}: missing field {key!r}")
