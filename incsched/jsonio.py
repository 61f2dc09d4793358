"""Reading and writing incsched's JSON files: gzip-transparent, written atomically.

Graphs, problems and results all go through here, so that a crash or a full disk never leaves a
half-written file behind and ``.json.gz`` works wherever ``.json`` does.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import FormatError

__all__ = ["read_json", "write_json", "atomic_write_bytes"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; give the file the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = None) -> None:
    """Serialise ``obj`` to ``path`` atomically; gzip when the name ends in ``.gz``.

    Keys are sorted and the gzip header carries no time stamp, so equal objects give equal bytes.
    """
    text = json.dumps(obj, indent=indent, sort_keys=True, allow_nan=False, separators=(",", ":") if indent is None else None)
    data = text.encode("utf-8")
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


def read_json(path: str | os.PathLike) -> Any:
    """Parse the JSON file at ``path`` (gzip detected from its first bytes).

    Raises
    ------
    FormatError
        If the file is not valid (gzipped) JSON; the message names the file and the position.
    FileNotFoundError
        If there is no such file.
    """
    raw = Path(path).read_bytes()
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not a readable JSON or gzipped JSON file ({exc})") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
