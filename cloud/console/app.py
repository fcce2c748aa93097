"""The console's routes: pages (server-rendered, autoescaped), the JSON API, the live stream,
snapshot images, and the gate in front of all of them."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode

import jinja2
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strata.shared.config.cloud import CloudClipsConfig, CloudHttpConfig
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import analytics_pb2

from ..clip_rows import ClipQuery
from ..event_store import EventQuery, EventStore, StoreError
from ..track_filter import TYPES, TrackQuery, parse_track_uid, type_name
from ..verdicts import event_verdict
from ..watch import WatchHub, WatchUnavailableError
from . import editor, views
from .clip_http import ClipSource, clip_response
from .clip_view import ClipView, clip_view
from .live import Item, LiveFeed
from .queries import SNAPSHOT_KINDS, TRACK, ConsoleQueries, Cursor, EventFilter, Row, StoreReader
from .scrape import Scraper
from .security import COOKIE, Gate

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
T = TypeVar("T")
MAX_VALUE = 256  # longest filter value accepted
# Scripts, styles and images from the console itself only: a value that slipped past the
# escaping still could not run.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "media-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
OPEN_PATHS = ("/login", "/static/")


class BadRequestError(ValueError):
    """A parameter the console cannot use; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ConsoleParts:
    """What the console reads and where: the store, its commit feed, the threads for
    blocking reads, its config section, the rules (drawn on detail pages), the registry
    its metrics go to and the clips' section (how clips are served)."""

    store: EventStore
    hub: WatchHub
    executor: Executor
    http: CloudHttpConfig
    rules: RulesConfig | None = None
    registry: CollectorRegistry | None = None
    clips: CloudClipsConfig = field(default_factory=CloudClipsConfig)


def _text(request: Request, name: str) -> str:
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
            camera=_text(request, "camera"),
            label=_text(request, "label"),
            zone=_text(request, "zone"),
            line=_text(request, "line"),
            rule=_text(request, "rule"),
            kind=_text(request, "type"),
            start_ns=parse_time(_text(request, "since"), "since"),
            end_ns=parse_time(_text(request, "until"), "until"),
        )
    except ValueError as exc:
        raise BadRequestError(str(exc)) from None


class Console:
    """The Starlette application of the console over one store."""

    def __init__(self, parts: ConsoleParts, gate: Gate, tls: bool) -> None:
        self.parts = parts
        self.gate = gate
        self.tls = tls
        self.queries = ConsoleQueries(StoreReader(parts.store))
        self.scraper = Scraper(parts.http.scrape, parts.http.scrape_timeout_s)
        self.closing = asyncio.Event()
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.refused = Counter(
            "strata_cloud_console_refused",
            "Console requests refused, by reason (unauthenticated, bad_request).",
            ["reason"],
            registry=parts.registry,
        )
        routes = [
            Route("/", self.events_page),
            Route("/track", self.track_page),
            Route("/crop", self.crop_page),
            Route("/cameras", self.cameras_page),
            Route("/counts", self.counts_page),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout),
            Route("/editor", self.editor_page),
            Route("/api/events", self.api_events),
            Route("/api/events/stream", self.api_stream),
            Route("/api/track", self.api_track),
            Route("/api/crop", self.api_crop),
            Route("/api/cameras", self.api_cameras),
            Route("/api/rules", self.api_rules),
            Route("/api/counts", self.api_counts),
            Route("/api/snapshot", self.api_snapshot),
            Route("/api/clip", self.api_clip),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
        self.app = Starlette(routes=routes, exception_handlers={BadRequestError: self._bad})
        self.asgi: ASGIApp = GateMiddleware(self.app, self)

    # plumbing

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Blocking work (store reads) on the executor, never on the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.parts.executor, fn, *args)

    def render(self, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        """A page from its template, every value escaped."""
        html = self.env.get_template(name).render(logout=not self.gate.open, **ctx)
        return HTMLResponse(html, status_code=status)

    async def _bad(self, request: Request, exc: Exception) -> Response:
        self.refused.labels("bad_request").inc()
        log.info("console: bad request %s: %s", request.url.path, exc)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=400)
        return self.render("error.html", 400, title="Bad request", message=str(exc))

    def unauthorized(self, path: str, reason: str) -> Response:
        """401: JSON for the API, the login form for pages."""
        self.refused.labels("unauthenticated").inc()
        log.info("console: refused %s: %s", path, reason)
        if path.startswith("/api/"):
            return JSONResponse(
                {"error": "unauthenticated"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="strata console"'},
            )
        return self.render("login.html", 401, title="Sign in", next=path, failed=False)

    async def _guard(self, work: Awaitable[Response]) -> Response:
        try:
            return await work
        except StoreError as exc:
            log.warning("console: store read failed: %s", exc)
            return JSONResponse({"error": "event store unavailable"}, status_code=503)

    # the list

    def _limit(self, request: Request) -> int:
        text = _text(request, "limit")
        if not text:
            return self.parts.http.page_size
        if not text.isdigit() or not 1 <= int(text) <= self.parts.http.max_page_size:
            raise BadRequestError(f"limit must be 1..{self.parts.http.max_page_size}")
        return int(text)

    @staticmethod
    def _cursor(request: Request) -> Cursor | None:
        text = _text(request, "before")
        if not text:
            return None
        try:
            return Cursor.parse(text)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None

    def _views(self, rows: list[Row]) -> list[views.EventView]:
        keys = {(r.camera, r.track_uid) for r in rows if r.track_uid}
        snaps = self.queries.snapshot_kinds(keys) if keys else {}
        return [views.row_view(r, snaps) for r in rows]

    def _page(
        self, f: EventFilter, cursor: Cursor | None, limit: int
    ) -> tuple[list[views.EventView], Cursor | None]:
        rows, nxt = self.queries.page(f, cursor, limit)
        return self._views(rows), nxt

    async def _list(self, request: Request) -> tuple[list[views.EventView], str, EventFilter]:
        f = list_filter(request)
        events, nxt = await self._run(self._page, f, self._cursor(request), self._limit(request))
        return events, nxt.token() if nxt else "", f

    async def events_page(self, request: Request) -> Response:
        """Events, newest first, filtered; live on the first page."""

        async def work() -> Response:
            events, nxt, _ = await self._list(request)
            params = {k: v for k, v in request.query_params.items() if k != "before" and v}
            return self.render(
                "events.html",
                title="Events",
                events=events,
                filters=params,
                types=["crop", *TYPES],
                older="/?" + urlencode({**params, "before": nxt}) if nxt else "",
                live=""
                if request.query_params.get("before")
                else "/api/events/stream?" + urlencode(params),
            )

        return await self._guard(work())

    async def api_events(self, request: Request) -> Response:
        """JSON: {events: [...], next: cursor or null}."""

        async def work() -> Response:
            events, nxt, _ = await self._list(request)
            return JSONResponse({"events": [e.as_json() for e in events], "next": nxt or None})

        return await self._guard(work())

    async def _render_live(self, items: list[Item]) -> list[dict[str, Any]]:
        def build() -> list[dict[str, Any]]:
            rows: list[Row] = []
            for it in items:
                if isinstance(it, analytics_pb2.Event):
                    row = self.queries.crop(it.event_id)
                    if row is not None:
                        rows.append(row)
                else:
                    uid = it.event.track_uid
                    rows.append(
                        Row(TRACK, it.event.capture_ns, it.stored_id, track=it, track_uid=uid)
                    )
            return [v.as_json() for v in self._views(rows)]

        return await self._run(build)

    async def api_stream(self, request: Request) -> Response:
        """Server-sent events: each new stored crop or track event that passes the filter."""
        feed = LiveFeed(self.parts.hub, list_filter(request), self.closing)
        try:
            if not feed.open():
                return JSONResponse({"error": "too many watchers"}, status_code=503)
        except WatchUnavailableError as exc:
            return JSONResponse({"error": f"event feed down: {exc}"}, status_code=503)
        return StreamingResponse(
            feed.stream(self._render_live),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # detail

    def _camera_rules(self, camera: str) -> Any:
        rules = self.parts.rules
        return rules.cameras.get(camera) if rules is not None else None

    def _track(self, camera: str, uid: str, at_ns: int = 0) -> dict[str, Any] | None:
        store = self.parts.store
        events, _ = store.query_tracks(TrackQuery(camera_id=camera, track_uid=uid), None, 1000)
        crops, _ = store.query(EventQuery(camera_id=camera, track_uid=uid), None, 500)
        if not events:
            return None
        kinds = self.queries.snapshot_kinds({(camera, uid)}).get((camera, uid), set())
        frame = views.snapshot_url(camera, uid, "frame") if SNAPSHOT_KINDS["frame"] in kinds else ""
        crop = views.snapshot_url(camera, uid, "crop") if SNAPSHOT_KINDS["crop"] in kinds else ""
        last = events[-1].event
        verdict, verdict_score = views.verdict_text(last)
        found = store.find_clip(ClipQuery(camera_id=camera, track_uid=uid))
        clip = clip_view(found, camera, uid, at_ns) if found is not None else None
        return {
            "camera": camera,
            "track_uid": uid,
            "at_ns": at_ns,
            "clip": clip.url if clip else "",
            "clip_state": clip,
            "label": last.after.label,
            "verdict": verdict,
            "verdict_score": verdict_score,
            "crop_snapshot": crop,
            "drawing": views.drawing(events, self._camera_rules(camera), frame),
            "events": [views.track_view(e, kinds) for e in events],
            "crops": [_crop_record(c) for c in crops],
            "timings": [
                views.timing(
                    f"{type_name(e.event.type)} #{e.event.track_sequence}",
                    e.event.capture_ns,
                    e.stored_ns,
                )
                for e in events
            ]
            + [views.timing(f"crop {c.event_id}", c.capture_ns, c.stored_ns) for c in crops],
        }

    def _track_args(self, request: Request) -> tuple[str, str]:
        camera, uid = _text(request, "camera"), _text(request, "uid")
        try:
            parse_track_uid(uid)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
        if not camera:
            raise BadRequestError("camera is required")
        return camera, uid

    @staticmethod
    def _at(request: Request) -> int:
        """The event's capture time (`at`, Unix ns) a detail page is opened for; 0: none."""
        text = _text(request, "at")
        if not text:
            return 0
        if not text.isdigit() or len(text) > 19:
            raise BadRequestError("at must be a capture time in Unix nanoseconds (digits)")
        return int(text)

    async def track_page(self, request: Request) -> Response:
        """A track: its path over the snapshot, its clip (from the event at `at`), its
        events, crops and timings."""
        camera, uid = self._track_args(request)
        at_ns = self._at(request)

        async def work() -> Response:
            track = await self._run(self._track, camera, uid, at_ns)
            if track is None:
                return self.render("error.html", 404, title="Not found", message="no such track")
            return self.render("track.html", title=f"Track {uid}", **track)

        return await self._guard(work())

    async def api_track(self, request: Request) -> Response:
        """JSON of a track's detail (the clip's seek from the event at `at`)."""
        camera, uid = self._track_args(request)
        at_ns = self._at(request)

        async def work() -> Response:
            track = await self._run(self._track, camera, uid, at_ns)
            if track is None:
                return JSONResponse({"error": "no such track"}, status_code=404)
            return JSONResponse(_jsonable(track))

        return await self._guard(work())

    def _crop(self, event_id: int) -> dict[str, Any] | None:
        row = self.queries.crop(event_id)
        if row is None or row.crop is None:
            return None
        c = row.crop
        b = c.edge_detection.box
        w, h = max(640, int(b.x2 * 1.1)), max(480, int(b.y2 * 1.1))
        box = views.Box(b.x1, b.y1, b.x2 - b.x1, b.y2 - b.y1) if b.x2 > b.x1 else None
        zones, lines = views.rule_shapes(self._camera_rules(c.camera_id), w, h)
        return {
            "crop": _crop_record(c),
            "track_url": views.track_url(c.camera_id, row.track_uid) if row.track_uid else "",
            "drawing": views.Drawing(w, h, "", "", 0, box, zones, lines),
            "timings": [views.timing(f"crop {c.event_id}", c.capture_ns, c.stored_ns)],
        }

    def _crop_id(self, request: Request) -> int:
        text = _text(request, "id")
        if not text.isdigit() or len(text) > 18:
            raise BadRequestError("id must be an event id (digits)")
        return int(text)

    async def crop_page(self, request: Request) -> Response:
        """A classified crop without a stored track: its box, labels and timing."""
        event_id = self._crop_id(request)

        async def work() -> Response:
            crop = await self._run(self._crop, event_id)
            if crop is None:
                return self.render("error.html", 404, title="Not found", message="no such event")
            return self.render("crop.html", title=f"Event {event_id}", **crop)

        return await self._guard(work())

    async def api_crop(self, request: Request) -> Response:
        """JSON of a classified crop."""
        event_id = self._crop_id(request)

        async def work() -> Response:
            crop = await self._run(self._crop, event_id)
            if crop is None:
                return JSONResponse({"error": "no such event"}, status_code=404)
            return JSONResponse(_jsonable(crop))

        return await self._guard(work())

    async def api_snapshot(self, request: Request) -> Response:
        """A track's snapshot JPEG (kind crop or frame), with caching headers."""
        camera, uid = self._track_args(request)
        kind = SNAPSHOT_KINDS.get(_text(request, "kind") or "crop")
        if kind is None:
            raise BadRequestError("kind must be crop or frame")

        async def work() -> Response:
            found = await self._run(self.queries.snapshot, camera, uid, kind)
            if found is None:
                return JSONResponse({"error": "no such snapshot"}, status_code=404)
            jpeg, stored_ns = found
            etag = f'"{stored_ns:x}-{len(jpeg):x}"'
            headers = {
                "Cache-Control": f"private, max-age={self.parts.http.thumbnail_max_age_s}",
                "ETag": etag,
            }
            if request.headers.get("if-none-match") == etag:
                return Response(status_code=304, headers=headers)
            return Response(jpeg, media_type="image/jpeg", headers=headers)

        return await self._guard(work())

    async def api_clip(self, request: Request) -> Response:
        """A track's event clip as video/mp4, with Range requests and caching headers."""
        camera, uid = self._track_args(request)
        q = ClipQuery(camera_id=camera, track_uid=uid)

        async def work() -> Response:
            found = await self._run(self.parts.store.find_clip, q)
            if found is None or found.committed_bytes == 0:
                return JSONResponse({"error": "no clip with bytes"}, status_code=404)
            src = ClipSource(self.parts.store, self.parts.executor, self.parts.clips)
            return clip_response(request, found, src)

        return await self._guard(work())

    # cameras and counts

    def _cameras(self) -> list[dict[str, Any]]:
        seen = self.queries.cameras()
        configured = set(self.parts.rules.cameras) if self.parts.rules is not None else set()
        live = self.scraper.scrape() if self.scraper.urls else None
        names = sorted(set(seen) | configured | (set(live.cameras) if live else set()))
        out = []
        for cam in names:
            s = seen.get(cam, {})
            last = max(s.get("last_crop_ns", 0), s.get("last_track_ns", 0))
            uid = self.queries.latest_frame_snapshot(cam)
            state = live.cameras.get(cam) if live else None
            out.append(
                {
                    "camera": cam,
                    "crops": s.get("crops", 0),
                    "tracks": s.get("tracks", 0),
                    "track_events": s.get("track_events", 0),
                    "last_event_ns": last,
                    "last_event": views.iso(last),
                    "snapshot": views.snapshot_url(cam, uid, "frame") if uid else "",
                    "state": state.state if state else "",
                    "error": state.error if state else "",
                    "rates": dict(state.rates) if state else {},
                }
            )
        return out

    async def cameras_page(self, request: Request) -> Response:
        """Every camera seen in the store (or configured, or scraped)."""

        async def work() -> Response:
            cams = await self._run(self._cameras)
            return self.render(
                "cameras.html", title="Cameras", cameras=cams, scraping=bool(self.scraper.urls)
            )

        return await self._guard(work())

    async def api_cameras(self, request: Request) -> Response:
        """JSON: {cameras: [...]}."""

        async def work() -> Response:
            return JSONResponse({"cameras": await self._run(self._cameras)})

        return await self._guard(work())

    def _counts(self, period: str, camera: str) -> dict[str, Any]:
        start, end, bucket = views.window(period, time.time_ns())
        rows = self.queries.counts(start, end, bucket, camera)
        n = (end - start) // bucket
        return {
            "period": period,
            "start": views.iso(start),
            "end": views.iso(end),
            "bucket_s": bucket // 10**9,
            "buckets": [views.iso(start + i * bucket) for i in range(n)],
            "series": views.series(rows, start, bucket, n),
            "truncated": rows.truncated,
        }

    def _counts_args(self, request: Request) -> tuple[str, str]:
        period = _text(request, "period") or "today"
        if period not in views.PERIODS:
            raise BadRequestError("period must be " + ", ".join(views.PERIODS))
        return period, _text(request, "camera")

    async def counts_page(self, request: Request) -> Response:
        """Counts per camera, zone, line, direction and label, with a chart each."""
        period, camera = self._counts_args(request)

        async def work() -> Response:
            counts = await self._run(self._counts, period, camera)
            return self.render(
                "counts.html",
                title="Counts",
                camera=camera,
                periods=views.PERIODS,
                chart_w=views.CHART_W,
                chart_h=views.CHART_H,
                **counts,
            )

        return await self._guard(work())

    async def api_counts(self, request: Request) -> Response:
        """JSON of the counts."""
        period, camera = self._counts_args(request)

        async def work() -> Response:
            counts = await self._run(self._counts, period, camera)
            counts["series"] = [s.as_json() for s in counts["series"]]
            return JSONResponse(counts)

        return await self._guard(work())

    # the rule editor

    def _editor(self, camera: str) -> editor.Editor:
        uid = self.queries.latest_frame_snapshot(camera)
        event = None
        if uid:
            events, _ = self.parts.store.query_tracks(
                TrackQuery(camera_id=camera, track_uid=uid), None, 1
            )
            event = events[0].event if events else None
        background = views.snapshot_url(camera, uid, "frame") if uid else ""
        return editor.editor(camera, event, self._camera_rules(camera), background)

    def _camera_arg(self, request: Request) -> str:
        camera = _text(request, "camera")
        if not camera:
            raise BadRequestError("camera is required")
        return camera

    async def editor_page(self, request: Request) -> Response:
        """Draw zones and lines on a camera's latest snapshot; get the YAML to paste."""
        camera = self._camera_arg(request)

        async def work() -> Response:
            ed = await self._run(self._editor, camera)
            return self.render("editor.html", title=f"Rules of {camera}", ed=ed)

        return await self._guard(work())

    async def api_rules(self, request: Request) -> Response:
        """JSON: a camera's frame size, latest snapshot and rules in that frame's pixels."""
        camera = self._camera_arg(request)

        async def work() -> Response:
            return JSONResponse((await self._run(self._editor, camera)).as_json())

        return await self._guard(work())

    # sessions

    async def login(self, request: Request) -> Response:
        """GET: the form; POST: check the token, set the session cookie, go where asked."""
        if request.method == "GET":
            return self.render("login.html", title="Sign in", next="/", failed=False)
        body = await request.body()
        if len(body) > 8192:
            raise BadRequestError("login form too large")
        form = parse_qs(body.decode("utf-8", "replace"))
        token = form.get("token", [""])[0]
        target = form.get("next", ["/"])[0]
        # Only a path of this site (no scheme, no //host): no open redirect.
        if not target.startswith("/") or target.startswith("//") or "\\" in target:
            target = "/"
        if not self.gate.check_login(token):
            self.refused.labels("unauthenticated").inc()
            log.info("console: failed login")
            return self.render("login.html", 401, title="Sign in", next=target, failed=True)
        resp = RedirectResponse(target, status_code=303)
        resp.set_cookie(
            COOKIE,
            self.gate.session(),
            max_age=int(self.gate.session_s),
            httponly=True,
            samesite="strict",
            secure=self.tls,
        )
        return resp

    async def logout(self, request: Request) -> Response:
        """Forget the session cookie."""
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(COOKIE, httponly=True, samesite="strict", secure=self.tls)
        return resp


def _crop_record(c: Any) -> dict[str, Any]:
    d = c.edge_detection
    return {
        "event_id": c.event_id,
        "camera": c.camera_id,
        "time": views.iso(c.capture_ns),
        "edge_id": c.edge_id,
        "edge_label": d.label,
        "edge_score": round(d.score, 4),
        "box": [round(d.box.x1, 1), round(d.box.y1, 1), round(d.box.x2, 1), round(d.box.y2, 1)],
        # The classifier's evidence and its verdict on edge_label (None: stored before).
        "cloud_label": c.label,
        "cloud_score": round(c.score, 4),
        "verdict": None if (info := event_verdict(c)) is None else info.as_json(),
        "model_version": c.model_version if c.HasField("model_version") else None,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, views.EventView | views.Series | ClipView):
        return value.as_json()
    if hasattr(value, "__slots__") and hasattr(value, "__dataclass_fields__"):
        return {f: _jsonable(getattr(value, f)) for f in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


class GateMiddleware:
    """Every request but the login form and static assets needs the token or a session;
    every response gets the security headers (CSP, no sniffing, no framing, no caching of
    pages and data)."""

    def __init__(self, app: ASGIApp, console: Console) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                extra = [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                if b"cache-control" not in names and not path.startswith("/static/"):
                    extra.append((b"cache-control", b"no-store"))
                message["headers"] = headers + extra
            await send(message)

        if not path.startswith(OPEN_PATHS):
            request = Request(scope)
            reason = self.console.gate.refusal(
                request.headers.get("authorization", ""), request.cookies.get(COOKIE, "")
            )
            if reason is not None:
                await self.console.unauthorized(path, reason)(scope, receive, send_with_headers)
                return
        await self.app(scope, receive, send_with_headers)
