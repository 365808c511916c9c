"""Reading a TOML file a user names (a preset), bounded: never more than a preset can be.

`--preset /dev/zero` once read until the kernel killed the process (20 GB), a preset nested
100,000 levels deep ended in "internal error: RecursionError", and a file saved with a UTF-8
byte-order mark (Windows editors) was "Invalid statement (line 1, column 1)". Here: only a
regular file is read, at most MAX_BYTES of it; a BOM is dropped (said nowhere else, it only
confuses); nesting deeper than MAX_DEPTH is refused before the parser recurses. Each refusal is
a TomlFileError, one line naming the file and what is allowed.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

MAX_BYTES = 1 << 20  # a preset is a few hundred bytes; 1 MiB is generous
MAX_DEPTH = 64  # nested arrays or inline tables; a config is flat
BOM = "\ufeff"


class TomlFileError(ValueError):
    """A file that cannot be a preset: one line."""


def _shown(path: Path) -> str:
    text = str(path)
    return repr(text if len(text) <= 120 else f"{text[:59]}…{text[-59:]}")


def read_text(path: Path, max_bytes: int = MAX_BYTES) -> str:
    """The text of a small regular UTF-8 file (a BOM dropped); OSError and UnicodeDecodeError
    pass through for the caller's words, anything that is not a small regular file is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, os.strerror(21), str(path))
        if not stat.S_ISREG(mode):
            kind = (
                "a character device"
                if stat.S_ISCHR(mode)
                else "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a block device"
                if stat.S_ISBLK(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "not a regular file"
            )
            raise TomlFileError(f"preset file {_shown(path)} is {kind}, not a TOML file")
        data = b""
        while len(data) <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > max_bytes:
            raise TomlFileError(
                f"preset file {_shown(path)} is larger than {max_bytes // 1024} KiB: a preset is a few lines of TOML"
            )
    finally:
        os.close(fd)
    return data.decode("utf-8").removeprefix(BOM)


def nesting_depth(text: str) -> int:
    """The deepest nesting of brackets and braces outside strings and comments (a cheap bound
    checked before tomllib, which recurses once per level)."""
    depth = deepest = 0
    quote = ""
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\" and quote in ('"', '"""'):
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif char == "#":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        elif char in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else char
            i += len(quote)
            continue
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def loads(text: str, where: str) -> dict[str, Any]:
    """tomllib.loads, with nesting bounded first; TOMLDecodeError passes through."""
    if nesting_depth(text) > MAX_DEPTH:
        raise TomlFileError(
            f"{where} is nested more than {MAX_DEPTH} levels deep (arrays or inline tables): a config is flat"
        )
    try:
        return tomllib.loads(text)
    except RecursionError:  # (a bound the scan above missed)
        raise TomlFileError(f"{where} is nested too deeply to read") from None


def literal(value: Any) -> str:
    """A value read from TOML written back as TOML (`1979-05-27`, `07:32:00`, `"text"`, `[1, 2]`),
    so that a message echoes what the user wrote, not Python's `datetime.date(1979, 5, 27)`."""
    import json
    from datetime import date, time

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (date, time)):  # (datetime is a date: `1979-05-27T07:32:00+00:00`)
        return value.isoformat()
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)
