"""Clips to the cloud: each clip file streamed with Analytics.UploadClip, resumable.

The clips folder is the spool (device/clips/spool.py). One thread takes its clips oldest
first; for each it opens an UploadClip stream and first sends an empty chunk at offset 0,
so the cloud's ack says how much of the clip it already holds (`committed_bytes`: after a
restart of either side the upload resumes there, nothing is sent twice). Then chunks of
`chunk_kib` follow, one in flight (each acked before the next is read from the file): an
open clip's bytes as the file grows (a fragmented MP4 is only ever appended to), and when
the clip is final, its rest and a chunk with `last` and the final ClipInfo. An ack that
says `complete` deletes the clip's file and sidecar. The one exception to appending: a
clip the cutter cut back to a fragment boundary (its track's end heard late) may end
before what the cloud holds; its last chunk then says `cut_back`, and the cloud keeps
that prefix.

Acks: STORED moves the offset to `committed_bytes`. RETRY with a `committed_bytes` behind
the chunk sent (a gap: the cloud lost what it had not committed) goes back there at once;
RETRY with `retry_after_ms` waits that long. INVALID is final: the clip is not resent in
this run (counted, logged; the folder's bound deletes it in time). A broken stream, an
unreachable cloud or an ack later than `ack_timeout_s` fails the pass; the next waits an
exponential backoff with jitter (tenacity), at least what the cloud asked for. Every
failure is counted by reason (strata_device_clip_upload_failures_total).

Without a target, clips stay on the device: the thread only keeps the folder under its
bound. Plaintext to a target off loopback is refused unless `allow_insecure` (as the edge
refuses plaintext sockets off loopback); TLS, mTLS and the bearer token are configured as
the edge's uplink's.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from strata.shared.config.device import ClipUploadConfig
from strata.shared.contracts import clips_pb2, current_version
from strata.shared.metrics_web import is_loopback
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from ..metrics import DeviceMetrics
from .spool import ClipSpool, SpooledClip

log = logging.getLogger(__name__)

_CLOSE = object()
# Consecutive RETRY answers without progress before the pass fails.
MAX_STALLS = 8


class UploadSetupError(ValueError):
    """The upload target cannot be used as configured (plaintext off loopback, a TLS or
    token file that cannot be read)."""


class UploadError(Exception):
    """An upload pass failed; `reason` is the metric label, `wait_s` what the cloud asked."""

    def __init__(self, reason: str, detail: str, wait_s: float = 0.0) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.wait_s = wait_s


def target_host(target: str) -> str:
    """The host of a gRPC target: HOST:PORT, [V6]:PORT, dns:///NAME:PORT, ipv4:IP:PORT."""
    rest = target.split("///", 1)[-1] if "///" in target else target
    for scheme in ("ipv4:", "ipv6:"):
        rest = rest.removeprefix(scheme)
    rest = rest.split(",", 1)[0]
    host = rest.rpartition(":")[0] if ":" in rest else rest
    return host.strip("[]")


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UploadSetupError(f"cannot read clips.upload's {what} {path}: {exc.strerror}") from exc


def channel_setup(cfg: ClipUploadConfig) -> tuple[grpc.ChannelCredentials | None, tuple[Any, ...]]:
    """TLS credentials (None: plaintext) and call metadata (the bearer token) of the
    upload target; UploadSetupError for plaintext off loopback without allow_insecure."""
    tls = cfg.tls
    creds = None
    if tls.on:
        ca = _read(tls.ca_file, "CA file") if tls.ca_file else None
        key = _read(tls.key_file, "client key") if tls.key_file else None
        cert = _read(tls.cert_file, "client certificate") if tls.cert_file else None
        creds = grpc.ssl_channel_credentials(ca, key, cert)
    elif not is_loopback(target_host(cfg.target)) and not cfg.allow_insecure:
        raise UploadSetupError(
            f"refusing to upload clips in plaintext to {cfg.target}: set clips.upload.tls "
            "(ca_file or enabled), use a loopback target, or set clips.upload.allow_insecure"
        )
    metadata: tuple[Any, ...] = ()
    if cfg.token_file:
        token = _read(cfg.token_file, "token file").decode().strip()
        if not token:
            raise UploadSetupError(f"clips.upload's token file {cfg.token_file} is empty")
        metadata = (("authorization", f"Bearer {token}"),)
    return creds, metadata


@dataclass(slots=True)
class _Upload:
    """One clip's stream: its requests, its acks, and where the cloud stands."""

    clip: SpooledClip
    requests: queue.SimpleQueue[Any]
    acks: Iterator[clips_pb2.ClipChunkAck]
    committed: int = 0
    complete: bool = False


class ClipUploader:
    """Uploads the clips folder's clips (see the module docstring); a thread."""

    def __init__(self, cfg: ClipUploadConfig, spool: ClipSpool, metrics: DeviceMetrics) -> None:
        self.cfg = cfg
        self.spool = spool
        self.metrics = metrics
        self.chunk = cfg.chunk_kib * 1024
        self._creds, self._metadata = channel_setup(cfg) if cfg.target else (None, ())
        self._channel: grpc.Channel | None = None
        self._refused: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clip-upload", daemon=True)
        self._retrying = Retrying(
            wait=self._wait,
            retry=retry_if_exception_type(UploadError),
            sleep=self._sleep,
            before_sleep=self._failed,
            stop=lambda _state: self._stop.is_set(),
            reraise=True,
        )
        self._backoff = wait_exponential_jitter(
            multiplier=cfg.backoff_initial_s, max=cfg.backoff_max_s
        )

    def start(self) -> None:
        self._thread.start()

    def drain(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for every finished clip to reach the cloud (the agent's
        stop: the cameras have ended their clips); True when none is left. Without a
        target there is nothing to wait for."""
        if not self.cfg.target or not self._thread.is_alive():
            return not self.cfg.target
        deadline = time.monotonic() + timeout_s
        while True:
            left = [
                c for c in self.spool.pending() if c.info.final and c.clip_id not in self._refused
            ]
            if not left:
                return True
            if time.monotonic() >= deadline:
                log.warning(
                    "%d clip(s) not uploaded within %.1fs: they wait on the device for its "
                    "next run",
                    len(left),
                    timeout_s,
                )
                return False
            time.sleep(0.05)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the chunk in flight (what is not acked is sent again next run)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._channel is not None:
            self._channel.close()

    # ---- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._retrying(self.run_pass)
            except UploadError:
                pass  # stopping
            except Exception:  # the uploader must outlive a bug in one pass
                log.exception("clip upload pass failed")
                self.metrics.clip_upload_failures.labels("error").inc()
            self._stop.wait(self.cfg.poll_s)

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = exc.wait_s if isinstance(exc, UploadError) else 0.0
        return max(float(self._backoff(state)), asked)

    def _failed(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        reason = exc.reason if isinstance(exc, UploadError) else "error"
        self.metrics.clip_upload_failures.labels(reason).inc()
        log.warning(
            "clip upload to %s failed (%s); try %d again in %.1fs",
            self.cfg.target,
            exc,
            state.attempt_number,
            state.upcoming_sleep,
        )

    def run_pass(self) -> None:
        """Keep the folder under its bound, then send what each clip has new, oldest
        first; UploadError when the cloud cannot be reached or fails a clip."""
        self.spool.enforce()
        if not self.cfg.target:
            return
        for clip in self.spool.pending():
            if self._stop.is_set():
                return
            if clip.clip_id not in self._refused:
                self._upload(clip)
        self.spool.enforce()

    # ---- one clip -------------------------------------------------------------------------

    def _upload(self, clip: SpooledClip) -> None:
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call = self._stub().UploadClip(
            iter(requests.get, _CLOSE),
            metadata=self._metadata,
            timeout=self._deadline(clip),
        )
        up = _Upload(clip, requests, call)
        try:
            self._send(up, 0, b"", False)  # how much does the cloud hold already?
            while not up.complete and not self._stop.is_set() and self._next(up):
                pass
        except _RefusedError:
            return
        except grpc.RpcError as exc:
            raise _rpc_failure(exc) from None
        finally:
            requests.put(_CLOSE)
            call.cancel()
        if up.complete:
            self.spool.remove(clip)
            self.metrics.clips_uploaded.inc()
            log.info("clip %s uploaded (%d bytes)", clip.clip_id, up.committed)

    def _next(self, up: _Upload) -> bool:
        """Send the clip's next chunk; False when nothing is left to send now."""
        final = up.clip.info.final  # read before the size: a final clip's file is whole
        size = up.clip.size()
        start = up.committed
        if start > size:
            # The cutter cut the clip back to a byte prefix (its track's end heard late,
            # device/clips/cutter.py): once final, the cloud is told to keep that prefix.
            if not final:
                return False  # being cut back: its final info follows
            self._send(up, size, b"", True, cut_back=True)
            if up.committed != size:
                raise UploadError(
                    "io",
                    f"clip {up.clip.clip_id}: cut back to {size} bytes but the cloud holds "
                    f"{up.committed}",
                )
            return True
        if start == size and not final:
            return False  # an open clip's bytes are all in
        try:
            with open(up.clip.path, "rb") as f:
                f.seek(start)
                data = f.read(self.chunk)
        except FileNotFoundError:
            data = b""  # a clip with nothing written: its final info only
        except OSError as exc:
            raise UploadError("io", f"clip {up.clip.clip_id}: {exc}") from None
        last = final and start + len(data) >= size
        self._send(up, start, data, last)
        return True

    def _send(
        self, up: _Upload, offset: int, data: bytes, last: bool, cut_back: bool = False
    ) -> None:
        """One chunk and its ack: STORED moves on, RETRY goes back or waits, INVALID
        refuses the clip."""
        info = up.clip.info
        if not last:
            info = clips_pb2.ClipInfo(
                clip_id=info.clip_id,
                camera_id=info.camera_id,
                agent_id=info.agent_id,
                track_uids=info.track_uids,
                start_ns=info.start_ns,
                codec=info.codec,
                width=info.width,
                height=info.height,
            )
        chunk = clips_pb2.ClipChunk(
            version=current_version(),
            info=info,
            offset=offset,
            data=data,
            last=last,
            cut_back=cut_back,
        )
        for _ in range(MAX_STALLS):
            up.requests.put(chunk)
            ack = next(up.acks, None)
            if ack is None:
                raise UploadError("unavailable", "the cloud closed the stream")
            if self._acked(up, ack, offset + len(data)):
                return
            if ack.committed_bytes != offset:
                return  # a gap: the caller goes on from what the cloud holds
        raise UploadError("retry", f"clip {up.clip.clip_id}: no progress after {MAX_STALLS}")

    def _acked(self, up: _Upload, ack: clips_pb2.ClipChunkAck, end: int) -> bool:
        """Take one ack in; True when the chunk is done with (stored or refused)."""
        status = ack.status
        if status == clips_pb2.CLIP_CHUNK_STATUS_INVALID:
            self._refused.add(up.clip.clip_id)
            up.complete = False
            self.metrics.clip_upload_failures.labels("refused").inc()
            log.error("clip %s refused by the cloud (not resent): %s", up.clip.clip_id, ack.reason)
            raise _RefusedError
        gained = max(0, min(ack.committed_bytes, end) - up.committed)
        if gained:
            self.metrics.clip_upload_bytes.inc(gained)
        up.committed = ack.committed_bytes
        if status == clips_pb2.CLIP_CHUNK_STATUS_STORED:
            up.complete = ack.complete
            return True
        if ack.retry_after_ms:
            raise UploadError(
                "retry", ack.reason or "the cloud asked to wait", ack.retry_after_ms / 1e3
            )
        return False

    def _deadline(self, clip: SpooledClip) -> float:
        """The stream's deadline: ack_timeout_s per chunk it may carry."""
        chunks = 2 + max(0, clip.size()) // self.chunk
        return self.cfg.ack_timeout_s * chunks

    def _stub(self) -> Any:
        from strata.shared.contracts import analytics_pb2_grpc

        if self._channel is None:
            options: list[tuple[str, Any]] = [
                ("grpc.max_send_message_length", self.chunk + 64 * 1024)
            ]
            if self.cfg.tls.server_name:
                options.append(("grpc.ssl_target_name_override", self.cfg.tls.server_name))
            if self._creds is not None:
                self._channel = grpc.secure_channel(self.cfg.target, self._creds, options)
            else:
                self._channel = grpc.insecure_channel(self.cfg.target, options)
        return analytics_pb2_grpc.AnalyticsStub(self._channel)  # type: ignore[no-untyped-call]


class _RefusedError(Exception):
    """The cloud refused the clip (INVALID)."""


def _rpc_failure(exc: grpc.RpcError) -> UploadError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return UploadError("timeout", f"no ack within the deadline: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        return UploadError("unavailable", str(details))
    return UploadError("error", f"{code.name if code else 'rpc'}: {details}")
