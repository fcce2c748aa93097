"""The webhook signature: `X-Strata-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
"<t>.<body>">` (Stripe's scheme), so a receiver checks who sent the body and when, and
refuses a replay older than its tolerance (docs/sinks.md has a receiver's few lines)."""

from __future__ import annotations

import hashlib
import hmac

HEADER = "X-Strata-Signature"


def sign(secret: bytes, body: bytes, t: int) -> str:
    """The header value for `body` sent at unix time `t`."""
    mac = hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(secret: bytes, body: bytes, header: str, now: int, tolerance_s: int = 300) -> bool:
    """Whether `header` signs `body` with `secret`, made within `tolerance_s` of `now`."""
    try:
        parts = dict(p.split("=", 1) for p in header.split(","))
        t = int(parts["t"])
    except (ValueError, KeyError):
        return False
    if abs(now - t) > tolerance_s:
        return False
    want = hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts.get("v1", ""))
