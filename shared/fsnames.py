"""Names from the wire (camera ids) made safe as one file-system path component.

Reversible escaping, so no two names share a file and none leaves its directory: every
character outside [A-Za-z0-9._-] becomes %XX per UTF-8 byte (`%` itself included), and a
name made only of dots ("." and "..") has its dots escaped too. A name whose escaped form is
too long for a file name keeps a readable prefix and a SHA-256 of the whole name, marked
by `~`, a character escaping never produces.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(rb"[^A-Za-z0-9._-]")
_MAX = 200  # bytes; file systems allow 255 per component, suffixes need a little room


def path_component(name: str) -> str:
    """`name` as a single, safe, collision-free directory or file name."""
    raw = name.encode("utf-8", "surrogatepass")
    if raw.strip(b".") == b"":  # "", ".", "..", "...": escape every byte
        out = "".join(f"%{b:02X}" for b in raw) or "%"
    else:
        out = _UNSAFE.sub(lambda m: f"%{m.group()[0]:02X}".encode(), raw).decode("ascii")
    if len(out) > _MAX:
        out = out[:100] + "~" + hashlib.sha256(raw).hexdigest()
    return out


__all__ = ["path_component"]
