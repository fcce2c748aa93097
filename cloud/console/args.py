"""The console's request arguments: each read from the query string, checked, and refused
with a BadRequestError that says which and why (the app answers 400)."""

from __future__ import annotations

import datetime as dt

from starlette.requests import Request
from strata.shared.config.cloud import CloudHttpConfig

from ..store.track_filter import parse_track_uid
from . import views
from .queries import Cursor, EventFilter

MAX_VALUE = 256  # longest filter value accepted


class BadRequestError(ValueError):
    """A parameter the console cannot use; the message says which and why."""


def query_value(request: Request, name: str) -> str:
    value = request.query_params.get(name, "")
    if len(value) > MAX_VALUE:
        raise BadRequestError(f"{name} is longer than {MAX_VALUE} characters")
    return value.strip()


def parse_time(text: str, name: str) -> int:
    """A filter time (ISO 8601, `datetime-local`, UTC unless it says) in Unix ns; 0 for ''."""
    if not text:
        return 0
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequestError(f"{name} is not a date and time (2024-05-01T12:00)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return max(0, int(t.timestamp() * 1e9))


def list_filter(request: Request) -> EventFilter:
    """The events list's filter from the query string. Raises BadRequestError."""
    try:
        return EventFilter(
            camera=query_value(request, "camera"),
            label=query_value(request, "label"),
            zone=query_value(request, "zone"),
            line=query_value(request, "line"),
            rule=query_value(request, "rule"),
            kind=query_value(request, "type"),
            start_ns=parse_time(query_value(request, "since"), "since"),
            end_ns=parse_time(query_value(request, "until"), "until"),
        )
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


def limit(request: Request, http: CloudHttpConfig) -> int:
    text = query_value(request, "limit")
    if not text:
        return http.page_size
    if not text.isdigit() or not 1 <= int(text) <= http.max_page_size:
        raise BadRequestError(f"limit must be 1..{http.max_page_size}")
    return int(text)


def cursor(request: Request) -> Cursor | None:
    text = query_value(request, "before")
    if not text:
        return None
    try:
        return Cursor.parse(text)
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


def track_args(request: Request) -> tuple[str, str]:
    camera, uid = query_value(request, "camera"), query_value(request, "uid")
    try:
        parse_track_uid(uid)
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None
    if not camera:
        raise BadRequestError("camera is required")
    return camera, uid


def capture_at(request: Request) -> int:
    """The event's capture time (`at`, Unix ns) a detail page is opened for; 0: none."""
    text = query_value(request, "at")
    if not text:
        return 0
    if not text.isdigit() or len(text) > 19:
        raise BadRequestError("at must be a capture time in Unix nanoseconds (digits)")
    return int(text)


def crop_id(request: Request) -> int:
    text = query_value(request, "id")
    if not text.isdigit() or len(text) > 18:
        raise BadRequestError("id must be an event id (digits)")
    return int(text)


def counts_args(request: Request) -> tuple[str, str]:
    period = query_value(request, "period") or "today"
    if period not in views.PERIODS:
        raise BadRequestError("period must be " + ", ".join(views.PERIODS))
    return period, query_value(request, "camera")


def camera_arg(request: Request) -> str:
    camera = query_value(request, "camera")
    if not camera:
        raise BadRequestError("camera is required")
    return camera
