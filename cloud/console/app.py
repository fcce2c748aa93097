"""The console's routes: pages (server-rendered, autoescaped), the JSON API, the live stream,
snapshot images, and the gate in front of all of them. A request's arguments are read in
args.py, what the pages show in reads.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode

import jinja2
from prometheus_client import Counter
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
from strata.shared.contracts import analytics_pb2

from ..api.watch import WatchUnavailableError
from ..store.clip_rows import ClipQuery
from ..store.event_store import StoreError
from ..store.track_filter import TYPES
from . import views
from .args import (
    BadRequestError,
    camera_arg,
    capture_at,
    counts_args,
    crop_id,
    cursor,
    limit,
    list_filter,
    query_value,
    track_args,
)
from .clip_http import ClipSource, clip_response
from .live import Item, LiveFeed
from .queries import SNAPSHOT_KINDS, TRACK, ConsoleQueries, EventFilter, Row, StoreReader
from .reads import ConsoleParts, ConsoleReads, jsonable
from .scrape import Scraper
from .security import COOKIE, Gate

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
T = TypeVar("T")
# Scripts, styles and images from the console itself only: a value that slipped past the
# escaping still could not run.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "media-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
OPEN_PATHS = ("/login", "/static/")


class Console:
    """The Starlette application of the console over one store."""

    def __init__(self, parts: ConsoleParts, gate: Gate, tls: bool) -> None:
        self.parts = parts
        self.gate = gate
        self.tls = tls
        self.queries = ConsoleQueries(StoreReader(parts.store))
        self.scraper = Scraper(parts.http.scrape, parts.http.scrape_timeout_s)
        self.reads = ConsoleReads(parts, self.queries, self.scraper)
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
            Route("/similar", self.similar_page),
            Route("/cameras", self.cameras_page),
            Route("/counts", self.counts_page),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout),
            Route("/editor", self.editor_page),
            Route("/api/events", self.api_events),
            Route("/api/events/stream", self.api_stream),
            Route("/api/track", self.api_track),
            Route("/api/crop", self.api_crop),
            Route("/api/similar", self.api_similar),
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

    async def _list(self, request: Request) -> tuple[list[views.EventView], str, EventFilter]:
        f = list_filter(request)
        events, nxt = await self._run(
            self.reads.page, f, cursor(request), limit(request, self.parts.http)
        )
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
            return [v.as_json() for v in self.reads.event_views(rows)]

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

    async def track_page(self, request: Request) -> Response:
        """A track: its path over the snapshot, its clip (from the event at `at`), its
        events, crops and timings."""
        camera, uid = track_args(request)
        at_ns = capture_at(request)

        async def work() -> Response:
            track = await self._run(self.reads.track, camera, uid, at_ns)
            if track is None:
                return self.render("error.html", 404, title="Not found", message="no such track")
            return self.render("track.html", title=f"Track {uid}", **track)

        return await self._guard(work())

    async def api_track(self, request: Request) -> Response:
        """JSON of a track's detail (the clip's seek from the event at `at`)."""
        camera, uid = track_args(request)
        at_ns = capture_at(request)

        async def work() -> Response:
            track = await self._run(self.reads.track, camera, uid, at_ns)
            if track is None:
                return JSONResponse({"error": "no such track"}, status_code=404)
            return JSONResponse(jsonable(track))

        return await self._guard(work())

    async def similar_page(self, request: Request) -> Response:
        """The tracks most like one track (search by example from its snapshot)."""
        return await self._similar(request, as_json=False)

    async def api_similar(self, request: Request) -> Response:
        """JSON of /similar."""
        return await self._similar(request, as_json=True)

    async def _similar(self, request: Request, as_json: bool) -> Response:
        camera, uid = track_args(request)
        others = query_value(request, "other") in ("1", "true")
        k = self.parts.http.page_size

        async def work() -> Response:
            found = await self._run(self.reads.identities.similar, camera, uid, k, others)
            if found is None:
                why = "the track has no stored appearance (its camera needs appearance.enabled)"
                if as_json:
                    return JSONResponse({"error": why}, status_code=404)
                return self.render("error.html", 404, title="Not found", message=why)
            if as_json:
                return JSONResponse(jsonable(found))
            return self.render("similar.html", title=f"Like {uid}", **found)

        return await self._guard(work())

    async def crop_page(self, request: Request) -> Response:
        """A classified crop without a stored track: its box, labels and timing."""
        event_id = crop_id(request)

        async def work() -> Response:
            crop = await self._run(self.reads.crop, event_id)
            if crop is None:
                return self.render("error.html", 404, title="Not found", message="no such event")
            return self.render("crop.html", title=f"Event {event_id}", **crop)

        return await self._guard(work())

    async def api_crop(self, request: Request) -> Response:
        """JSON of a classified crop."""
        event_id = crop_id(request)

        async def work() -> Response:
            crop = await self._run(self.reads.crop, event_id)
            if crop is None:
                return JSONResponse({"error": "no such event"}, status_code=404)
            return JSONResponse(jsonable(crop))

        return await self._guard(work())

    async def api_snapshot(self, request: Request) -> Response:
        """A track's snapshot JPEG (kind crop or frame), with caching headers."""
        camera, uid = track_args(request)
        kind = SNAPSHOT_KINDS.get(query_value(request, "kind") or "crop")
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
        camera, uid = track_args(request)
        q = ClipQuery(camera_id=camera, track_uid=uid)

        async def work() -> Response:
            found = await self._run(self.parts.store.find_clip, q)
            if found is None or found.committed_bytes == 0:
                return JSONResponse({"error": "no clip with bytes"}, status_code=404)
            src = ClipSource(self.parts.store, self.parts.executor, self.parts.clips)
            return clip_response(request, found, src)

        return await self._guard(work())

    # cameras and counts

    async def cameras_page(self, request: Request) -> Response:
        """Every camera seen in the store (or configured, or scraped)."""

        async def work() -> Response:
            cams = await self._run(self.reads.cameras)
            return self.render(
                "cameras.html", title="Cameras", cameras=cams, scraping=bool(self.scraper.urls)
            )

        return await self._guard(work())

    async def api_cameras(self, request: Request) -> Response:
        """JSON: {cameras: [...]}."""

        async def work() -> Response:
            return JSONResponse({"cameras": await self._run(self.reads.cameras)})

        return await self._guard(work())

    async def counts_page(self, request: Request) -> Response:
        """Counts per camera, zone, line, direction and label, with a chart each."""
        period, camera = counts_args(request)

        async def work() -> Response:
            counts = await self._run(self.reads.counts, period, camera)
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
        period, camera = counts_args(request)

        async def work() -> Response:
            counts = await self._run(self.reads.counts, period, camera)
            counts["series"] = [s.as_json() for s in counts["series"]]
            return JSONResponse(counts)

        return await self._guard(work())

    # the rule editor

    async def editor_page(self, request: Request) -> Response:
        """Draw zones and lines on a camera's latest snapshot; get the YAML to paste."""
        camera = camera_arg(request)

        async def work() -> Response:
            ed = await self._run(self.reads.editor, camera)
            return self.render("editor.html", title=f"Rules of {camera}", ed=ed)

        return await self._guard(work())

    async def api_rules(self, request: Request) -> Response:
        """JSON: a camera's frame size, latest snapshot and rules in that frame's pixels."""
        camera = camera_arg(request)

        async def work() -> Response:
            return JSONResponse((await self._run(self.reads.editor, camera)).as_json())

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
