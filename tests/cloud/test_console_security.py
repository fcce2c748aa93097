"""Who may use the console: refused off loopback without TLS and a token; 401 on every page
and endpoint without the token or a session; the login's session cookie; TLS on the wire."""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_helpers import Running, cloud_config, get, put_track, start_console
from strata.cloud.console.security import Gate, console_security
from strata.cloud.security import SecurityError
from tls_certs import make_pki

TOKEN = "s3cret-console-token"
PAGES = [
    "/",
    "/?camera=door",
    "/track?camera=door&uid=1000-7",
    "/crop?id=1",
    "/cameras",
    "/counts",
    "/editor?camera=door",
    "/api/events",
    "/api/events/stream",
    "/api/track?camera=door&uid=1000-7",
    "/api/crop?id=1",
    "/api/cameras",
    "/api/counts",
    "/api/snapshot?camera=door&uid=1000-7&kind=crop",
    "/api/rules?camera=door",
    "/api/clip?camera=door&uid=1000-7",
    "/logout",
    "/no-such-page",
]


def test_off_loopback_without_tls_or_token_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "e.sqlite"
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with pytest.raises(SecurityError, match="without TLS and a token"):
        console_security(cloud_config(db, listen="0.0.0.0:0"))
    with pytest.raises(SecurityError, match="tls"):  # a token alone is not enough
        console_security(cloud_config(db, listen="0.0.0.0:0", token_file=str(token)))
    pki = make_pki(tmp_path)
    tls = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}
    with pytest.raises(SecurityError, match="token"):  # TLS alone is not enough
        console_security(cloud_config(db, listen="0.0.0.0:0", tls=tls))
    ok = console_security(cloud_config(db, listen="0.0.0.0:0", tls=tls, token_file=str(token)))
    assert ok is not None and ok.tls and ok.token == TOKEN
    assert console_security(cloud_config(db, listen="0.0.0.0:0", allow_insecure=True))
    assert console_security(cloud_config(db, enabled=False)) is None
    with pytest.raises(SecurityError, match="empty"):
        (tmp_path / "empty").write_text("\n")
        console_security(cloud_config(db, token_file=str(tmp_path / "empty")))


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Running]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    run = start_console(cloud_config(tmp_path / "e.sqlite", token_file=str(token)))
    put_track(run, 1)
    yield run
    run.stop()


@pytest.mark.parametrize("path", PAGES)
def test_every_page_and_endpoint_needs_the_token(guarded: Running, path: str) -> None:
    r = get(guarded.port, path)
    assert r.status == 401, path
    if path.startswith("/api/"):
        assert r.headers["www-authenticate"].startswith("Bearer")
    else:
        assert 'name="token"' in r.text  # the login form
    for bad in ("Bearer wrong", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"):
        assert get(guarded.port, path, {"Authorization": bad}).status == 401, (path, bad)
    forged = {"Cookie": "strata_session=99999999999.deadbeef"}
    assert get(guarded.port, path, forged).status == 401


def test_the_bearer_token_opens_everything(guarded: Running) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/", "/cameras", "/counts", "/api/events", "/track?camera=door&uid=1000-7"):
        assert get(guarded.port, path, auth).status == 200, path


def test_login_sets_a_session_cookie(guarded: Running) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert get(guarded.port, "/login").status == 200
    wrong = get(guarded.port, "/login", form, "POST", b"token=nope&next=%2Fcameras")
    assert wrong.status == 401 and "set-cookie" not in wrong.headers
    r = get(guarded.port, "/login", form, "POST", f"token={TOKEN}&next=%2Fcameras".encode())
    assert r.status == 303 and r.headers["location"] == "/cameras"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    value = cookie.split(";")[0]
    assert get(guarded.port, "/api/events", {"Cookie": value}).status == 200
    # A session signed with another token, or expired, is refused.
    other = Gate("another-token", 3600).session()
    assert get(guarded.port, "/", {"Cookie": f"strata_session={other}"}).status == 401
    old = Gate(TOKEN, 3600).session(now=0)
    assert get(guarded.port, "/", {"Cookie": f"strata_session={old}"}).status == 401
    # No open redirect: a login only ever sends the browser to a path of the console.
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        body = f"token={TOKEN}&next={target}".encode()
        assert get(guarded.port, "/login", form, "POST", body).headers["location"] == "/"


def test_tls_console(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    cfg = cloud_config(
        tmp_path / "e.sqlite",
        token_file=str(token),
        tls={"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
    )
    run = start_console(cfg)
    try:
        assert run.server.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        conn = http.client.HTTPSConnection("127.0.0.1", run.port, context=ctx, timeout=10)
        conn.request("GET", "/api/events", headers={"Authorization": f"Bearer {TOKEN}"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read().startswith(b'{"events"')
        conn.close()
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            get(run.port, "/api/events", {"Authorization": f"Bearer {TOKEN}"})  # plaintext
    finally:
        run.stop()
