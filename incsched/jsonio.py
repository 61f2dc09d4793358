"""Reading and writing incsched's JSON files: gzip-transparent, written atomically.

Graphs, problems and results all go through here, so that a crash or a full disk never leaves a
half-written file behind and ``.json.gz`` works wherever ``.json`` does.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .errors import FormatError, LimitError
from .limits import ENV_VARS, InputLimits, input_limits

__all__ = ["read_json", "write_json", "json_bytes", "atomic_write_bytes", "read_limited", "json_depth"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    if path.is_dir():  # else the rename below fails naming the temporary file, not this one
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
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


def json_bytes(obj: Any, *, indent: int | None = None) -> bytes:
    """``obj`` as the UTF-8 JSON bytes `write_json` writes (sorted keys, no NaN or infinity)."""
    text = json.dumps(obj, indent=indent, sort_keys=True, allow_nan=False, separators=(",", ":") if indent is None else None)
    return text.encode("utf-8")


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = None) -> None:
    """Serialise ``obj`` to ``path`` atomically; gzip when the name ends in ``.gz``.

    Keys are sorted and the gzip header carries no time stamp, so equal objects give equal bytes.
    """
    data = json_bytes(obj, indent=indent)
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


def read_json(path: str | os.PathLike, *, limits: InputLimits | None = None) -> Any:
    """Parse the JSON file at ``path`` (gzip detected from its first bytes).

    Parameters
    ----------
    path : path-like
    limits : InputLimits, optional
        Largest decompressed size and nesting accepted (default `incsched.limits.input_limits()`,
        which reads the ``INCSCHED_MAX_*`` environment variables).

    Raises
    ------
    FormatError
        If the file is not valid (gzipped) UTF-8 JSON, holds an integer of more than 4,300 digits
        or a string with a lone surrogate; the message names the file and the position.
    LimitError
        If the file is larger than ``limits.max_file_bytes`` once decompressed, or nested deeper
        than ``limits.max_json_depth``; refused before it is parsed.
    OSError
        If the file cannot be read (missing, a folder, no permission).
    """
    lim = input_limits(limits)
    raw = read_limited(path, lim.max_file_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not a UTF-8 JSON file ({exc.reason} at byte {exc.start})") from None
    depth = json_depth(raw, lim.max_json_depth)
    if depth > lim.max_json_depth:
        raise LimitError(
            f"{path}: JSON nested {depth} levels deep, more than the limit of {lim.max_json_depth} "
            f"(set {ENV_VARS['max_json_depth']} to raise it)"
        )
    del raw
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # int() refuses numbers of more than sys.get_int_max_str_digits() digits
        raise FormatError(f"{path}: a number in the file is too long ({str(exc).split(';')[0]})") from None
    except RecursionError:
        raise LimitError(f"{path}: JSON nested too deeply to parse") from None
    if _SURROGATE_ESCAPE.search(text):
        _check_no_lone_surrogates(data, str(path))
    return data


def read_limited(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of ``path``, gunzipped if they start with the gzip magic, refused beyond ``max_bytes``.

    Decompression runs in bounded chunks, so a small gzip that expands to gigabytes is refused after
    ``max_bytes`` of output, with about that much memory.

    Raises
    ------
    LimitError
        If the (decompressed) content is larger than ``max_bytes``.
    FormatError
        If the gzip stream is corrupt or truncated.
    OSError
        If the file cannot be opened or read.
    """
    with open(path, "rb") as fh:
        head = fh.read(2)
        if head != _GZIP_MAGIC:
            data = head + fh.read(max_bytes + 1 - len(head))
            if len(data) > max_bytes:
                raise _too_big(path, max_bytes, "")
            return data
        fh.seek(0)
        return _gunzip_limited(fh, path, max_bytes)


def json_depth(raw: bytes, stop: int) -> int:
    """Nesting depth of the JSON text ``raw`` (brackets inside strings do not count).

    Exact up to ``stop``; any depth above ``stop`` may be reported as a smaller number above it.
    Linear in C: strings are cut out by a regular expression and the brackets counted with numpy.
    """
    if raw.count(b"[") + raw.count(b"{") <= stop:
        return 0  # too few brackets to nest deeper than stop
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    depth, level = 0, 0
    for k in range(0, len(brackets), 1 << 22):
        step = np.frombuffer(brackets, dtype=np.uint8, count=min(1 << 22, len(brackets) - k), offset=k)
        levels = np.cumsum(np.where((step == 91) | (step == 123), 1, -1).astype(np.int64)) + level
        depth = max(depth, int(levels.max()))
        level = int(levels[-1])
        if depth > stop:
            break
    return depth


_GZIP_MAGIC = b"\x1f\x8b"
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _gunzip_limited(fh, path, max_bytes: int) -> bytes:
    pieces: list[bytes] = []  # joined once at the end: growing one buffer would copy it as it grows
    size = 0
    stream = zlib.decompressobj(wbits=31)
    started = False  # the current gzip member has had input
    try:
        while chunk := fh.read(1 << 20):
            data = chunk
            while data:
                if not started and not data.strip(b"\0"):
                    break  # zero padding after the last member, as gzip(1) allows
                started = True
                piece = stream.decompress(data, min(max_bytes + 1 - size, 1 << 22))
                size += len(piece)
                if size > max_bytes:
                    raise _too_big(path, max_bytes, " once decompressed")
                pieces.append(piece)
                if stream.eof:
                    data = stream.unused_data  # a following gzip member, if any
                    stream, started = zlib.decompressobj(wbits=31), False
                else:
                    data = stream.unconsumed_tail
    except zlib.error as exc:
        raise FormatError(f"{path}: not a readable gzip file ({exc})") from None
    if started:
        raise FormatError(f"{path}: not a readable gzip file (it ends before the end of its compressed data)")
    return b"".join(pieces)


def _too_big(path, max_bytes: int, how: str) -> LimitError:
    return LimitError(
        f"{path}: larger than the limit of {max_bytes:,} bytes{how} (set {ENV_VARS['max_file_bytes']} to raise it)"
    )


def _check_no_lone_surrogates(obj: Any, source: str) -> None:
    # A lone surrogate (\ud800 unpaired) decodes to a str that can never be written as UTF-8.
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            _check_text(x, source)
        elif isinstance(x, dict):
            for k, v in x.items():
                _check_text(k, source)
                stack.append(v)
        elif isinstance(x, list):
            stack.extend(x)


def _check_text(s: str, source: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FormatError(
            f"{source}: the string {s[:40]!r} holds a lone surrogate {s[exc.start]!r}, which is not text"
        ) from None
