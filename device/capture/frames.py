"""A decoded frame that converts to BGR only when asked.

The motion gate needs only a small grey image, and most frames die there. A PyAV frame is
scaled straight to that size by FFmpeg's scaler from its luma plane (`GreyScaler`: area
averaging, one thread, no colour conversion), so a frame the motion gate drops is never
converted to BGR; the conversion to BGR (as costly as decoding itself) runs only for frames
that pass.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

_AREA = cv2.INTER_AREA
_LINEAR = cv2.INTER_LINEAR

# Pixel formats whose first plane is 8-bit luma.
_LUMA_FIRST = frozenset(
    {"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12", "nv21", "gray"}
)
# Planar 4:2:0, the layout a JPEG's YCbCr takes as it is (`Yuv420Scaler`).
_YUV420 = frozenset({"yuv420p", "yuvj420p"})

# A frame's Y, U and V planes (2-D uint8 views, rows possibly padded).
YuvPlanes = tuple[np.ndarray, np.ndarray, np.ndarray]


def packed(image: np.ndarray) -> np.ndarray:
    """`image` with rows packed (C-contiguous), copied only when they are not: PyAV 18.1.1
    returns a view of FFmpeg's buffer whose rows keep its line padding (a 160-pixel BGR row
    576 bytes apart), which JPEG encoders and shared memory cannot take."""
    return image if image.flags.c_contiguous else np.ascontiguousarray(image)


class GreyScaler:
    """Scales decoded frames to a small 8-bit grey image: one per camera (it keeps its
    buffers, and FFmpeg's scaler context, from frame to frame; not thread-safe).

    The grey is the frame's luma as the decoder gave it (limited-range video stays limited,
    as the luma plane the motion gate read before; BT.601 luma is what cv2's BGR2GRAY
    computes, so a full-range source gives what the gate gets from BGR), averaged by area.
    Where the decoder gives an 8-bit luma plane, it is halved by exact 2x2 averages (cv2's
    integer area path) while the result stays at least the grey size, then scaled the
    rest of the way as `_Halver` says: the same averages as one area scale where the
    factor is a power of two (vtest 768x576 to 192x144: scores equal to 0.01); motion
    scores within 1% of FFmpeg's area scale on average at 720p and 1080p (2% at most).
    At 720p 0.27 ms a frame against 0.49 with cv2's area path for the last step, at
    1080p 0.53 against 0.79 (this machine, frames cold from the decoder).
    Other pixel formats go through FFmpeg's area scale.
    """

    def __init__(self, width: int, height: int) -> None:
        from av.video.reformatter import ColorRange, Interpolation, VideoReformatter

        self.size = (width, height)
        self._reformatter = VideoReformatter()
        self._area = Interpolation.AREA
        self._full = ColorRange.JPEG
        self._halver = _Halver()

    def scale(self, av_frame: Any) -> np.ndarray:
        """A (height, width) uint8 view of `av_frame` scaled to the grey size."""
        if av_frame.format.name in _LUMA_FIRST:
            return self._halve(av_frame)
        w, h = self.size
        small: Any = self._reformatter.reformat(
            av_frame,
            w,
            h,
            "gray",
            interpolation=self._area,
            src_color_range=self._full,
            dst_color_range=self._full,
            threads=1,  # a 192x144 output is not worth waking threads the decoder needs
        )
        return _plane(small.planes[0], w, h)

    def _halve(self, av_frame: Any) -> np.ndarray:
        fw, fh = int(av_frame.width), int(av_frame.height)
        return self._halver.scale(_plane(av_frame.planes[0], fw, fh), self.size, None)


class CoarseLuma:
    """A decoded frame's luma as a coarse grey (about 48 x 36) from one row in every
    coarse row's band, area-averaged along it: one camera's (buffers kept; not thread-safe).

    What `MotionGate.quiet` compares a frame the cascade holds back with: it reads a
    twentieth of a 720p luma plane (36 rows), 55 us a frame cold from the decoder against
    the grey's 260 (this machine). Both sides of a comparison are made here, the same way,
    so the rows it skips cost no bias, only noise; None for a frame without a luma plane.
    """

    def __init__(self, width: int = 48, height: int = 36) -> None:
        self.target = (width, height)
        self._key = (0, 0)
        self._out = np.empty((0, 0), np.uint8)
        self._steps = (1, 1)

    def scale(self, av_frame: Any) -> np.ndarray | None:
        """The coarse grey of `av_frame` (a buffer reused by the next call), or None."""
        if av_frame.format.name not in _LUMA_FIRST:
            return None
        fw, fh = int(av_frame.width), int(av_frame.height)
        if (fw, fh) != self._key:
            self._key = (fw, fh)
            # Integer factors: cv2's area scale takes its fast path.
            kx, ky = max(1, fw // self.target[0]), max(1, fh // self.target[1])
            self._steps = (kx, ky)
            self._out = np.empty((fh // ky, fw // kx), np.uint8)
        kx, ky = self._steps
        ch, cw = self._out.shape
        rows = _plane(av_frame.planes[0], fw, fh)[ky // 2 : ch * ky : ky, : cw * kx]
        cv2.resize(rows, (cw, ch), dst=self._out, interpolation=_AREA)
        return self._out


class BgrScaler:
    """Scales decoded frames and converts them to BGR through FFmpeg scaler contexts kept
    from frame to frame: one per camera, on the gate worker's thread (not thread-safe).

    PyAV's `VideoFrame.reformat` builds a new context on every call, a quarter of a kept
    frame's conversion at 768x576 to 320x240 (0.29 -> 0.21 ms) and a fifth at 1080p; the
    pixels are the same (the same scaler, flags and order).
    """

    def __init__(self) -> None:
        from av.video.reformatter import Interpolation, VideoReformatter

        self._scale = VideoReformatter()
        self._convert = VideoReformatter()
        self._area = Interpolation.AREA

    def bgr(self, av_frame: Any, size: tuple[int, int]) -> np.ndarray:
        """`av_frame` scaled to `size` (w, h) by area averaging in its own pixel format,
        then converted: H x W x 3 BGR."""
        small: Any = self._scale.reformat(
            av_frame, size[0], size[1], interpolation=self._area, threads=1
        )
        return packed(self._convert.reformat(small, format="bgr24", threads=1).to_ndarray())


class Yuv420Scaler:
    """Scales decoded 4:2:0 frames to JPEG's own YCbCr (full-range yuvj420p) through one
    FFmpeg scaler context kept from frame to frame: one per camera (not thread-safe).

    What a kept frame's JPEG is encoded from, with no BGR between: libjpeg would convert
    BGR back to YCbCr 4:2:0 anyway. Same area scale as `BgrScaler`; a limited-range source
    is stretched to full range here, as the BGR conversion does, and the BT.601 matrix is
    what both the old path (FFmpeg's default for an unspecified colorspace) and every JPEG
    decoder use. vtest 768x576 to 320x240: 0.32 ms with the encode against 0.38 ms through
    BGR and cv2 (docs/device.md, "Kept frames"). Where BGR is wanted too (the canary of
    a new gate version), the small frame converts for 0.03 ms.
    """

    def __init__(self) -> None:
        from av.video.reformatter import Interpolation, VideoReformatter

        self._reformatter = VideoReformatter()
        self._convert = VideoReformatter()
        self._area = Interpolation.AREA
        self._halves = (_Halver(), _Halver(), _Halver())

    def jpeg_planes(self, av_frame: Any, size: tuple[int, int]) -> YuvPlanes | None:
        """`av_frame`'s planes scaled to `size` (even w, h) in full-range YCbCr, by exact
        2x2 halvings then one bilinear step of less than 2x (cv2, one thread): the planes
        `scale` gives within a grey level or two where the factor is a power of two, at
        about half its CPU at 720p (0.33 against 0.58 ms with the encode). None where
        `scale` must do it (another format, an odd size)."""
        w, h = size
        name = av_frame.format.name
        if name not in _YUV420 or w % 2 or h % 2:
            return None
        fw, fh = int(av_frame.width), int(av_frame.height)
        cw, ch = (fw + 1) // 2, (fh + 1) // 2
        y_in, u_in, v_in = av_frame.planes
        full = name == "yuvj420p" or int(getattr(av_frame, "color_range", 0)) == _JPEG_RANGE
        hy, hu, hv = self._halves
        return (
            hy.scale(_plane(y_in, fw, fh), (w, h), None if full else _LUMA_TO_FULL),
            hu.scale(_plane(u_in, cw, ch), (w // 2, h // 2), None if full else _CHROMA_TO_FULL),
            hv.scale(_plane(v_in, cw, ch), (w // 2, h // 2), None if full else _CHROMA_TO_FULL),
        )

    def scale(self, av_frame: Any, size: tuple[int, int]) -> Any:
        """`av_frame` scaled to `size` (w, h) by area averaging: a yuvj420p PyAV frame."""
        return self._reformatter.reformat(
            av_frame, size[0], size[1], "yuvj420p", interpolation=self._area, threads=1
        )

    @staticmethod
    def planes(small: Any) -> YuvPlanes:
        """A `scale`d frame's Y, U, V planes (views)."""
        w, h = int(small.width), int(small.height)
        y, u, v = small.planes
        cw, ch = (w + 1) // 2, (h + 1) // 2
        return _plane(y, w, h), _plane(u, cw, ch), _plane(v, cw, ch)

    def bgr(self, small: Any) -> np.ndarray:
        """A `scale`d frame as H x W x 3 BGR."""
        return packed(self._convert.reformat(small, format="bgr24", threads=1).to_ndarray())


class _Halver:
    """One plane to a smaller size: exact 2x2 halvings (cv2's integer area path) while the
    result stays at least the size, then one bilinear step of less than 2x (FFmpeg's area
    scale at such factors is bilinear-like; cv2's area path there costs 3-5x more: 219
    against 46 us at 320x180 to 192x144), then a range table where given. A plane that
    cannot halve down to within 2x (an odd size; 1080p to 192x144 stops at 480x270) is
    scaled bilinearly to the size times 2^k and halved k more times, so every pixel still
    counts. Buffers are kept for the last source size."""

    def __init__(self) -> None:
        self._key: tuple[int, int, int, int] = (0, 0, 0, 0)
        self._before: list[np.ndarray] = []
        self._step: np.ndarray | None = None
        self._after: list[np.ndarray] = []
        self._out = np.empty((0, 0), np.uint8)

    def _plan(self, w: int, h: int, size: tuple[int, int]) -> None:
        self._before, self._after, self._step = [], [], None
        while w % 2 == 0 and h % 2 == 0 and w // 2 >= size[0] and h // 2 >= size[1]:
            w, h = w // 2, h // 2
            self._before.append(np.empty((h, w), np.uint8))
        if (w, h) != size:
            k = 0
            while w >= 2 * (size[0] << k) or h >= 2 * (size[1] << k):
                k += 1
            self._step = np.empty((size[1] << k, size[0] << k), np.uint8)
            for i in range(k - 1, -1, -1):
                self._after.append(np.empty((size[1] << i, size[0] << i), np.uint8))
        self._out = np.empty((size[1], size[0]), np.uint8)

    def scale(self, img: np.ndarray, size: tuple[int, int], lut: np.ndarray | None) -> np.ndarray:
        h, w = img.shape
        key = (w, h, *size)
        if key != self._key:
            self._key = key
            self._plan(w, h, size)
        for level in self._before:
            img = _into(img, level, _AREA)
        if self._step is not None:
            img = _into(img, self._step, _LINEAR)
            for level in self._after:
                img = _into(img, level, _AREA)
        if lut is not None:
            img = cv2.LUT(img, lut, dst=self._out)
        return img


def _into(img: np.ndarray, out: np.ndarray, interpolation: int) -> np.ndarray:
    """`img` resized into the buffer `out` (its size)."""
    cv2.resize(img, (out.shape[1], out.shape[0]), dst=out, interpolation=interpolation)
    return out


def _range_table(stretch: float, centre: float, low: float) -> np.ndarray:
    """A table from limited to full range, as FFmpeg's scaler stretches it:
    (x - centre) * stretch + centre - low, rounded and clipped."""
    x = np.arange(256, dtype=np.float64)
    return np.clip(np.rint((x - centre) * stretch + centre - low), 0, 255).astype(np.uint8)


# Luma 16..235 to 0..255; chroma 16..240 to 0..255 about 128.
_LUMA_TO_FULL = _range_table(255 / 219, 16.0, 16.0)
_CHROMA_TO_FULL = _range_table(255 / 224, 128.0, 0.0)
# AVColorRange's JPEG (full range).
_JPEG_RANGE = 2


def _plane(plane: Any, width: int, height: int) -> np.ndarray:
    rows = np.frombuffer(plane, np.uint8, count=plane.line_size * height)
    return rows.reshape(height, plane.line_size)[:, :width]


class Frame:
    """One decoded frame: its place in the stream and lazy views of its pixels; or, made
    by `undecoded`, a frame the source did not decode (one the camera holds back anyway):
    its place and size, no pixels."""

    __slots__ = ("_av", "_bgr", "capture_ns", "height", "index", "ts", "width")

    def __init__(
        self,
        index: int,
        ts: float,
        capture_ns: int,
        av_frame: Any = None,
        bgr: np.ndarray | None = None,
    ) -> None:
        if (av_frame is None) == (bgr is None):
            raise ValueError("a Frame wraps either a PyAV frame or a BGR array")
        self.index = index
        self.ts = ts
        self.capture_ns = capture_ns
        self._av = av_frame
        self._bgr = bgr
        if bgr is not None:
            self.height, self.width = int(bgr.shape[0]), int(bgr.shape[1])
        else:
            self.height, self.width = int(av_frame.height), int(av_frame.width)

    @classmethod
    def undecoded(cls, index: int, ts: float, capture_ns: int, size: tuple[int, int]) -> Frame:
        """A frame without pixels, of `size` (w, h): nothing may ask for its pixels."""
        frame = cls.__new__(cls)
        frame.index, frame.ts, frame.capture_ns = index, ts, capture_ns
        frame._av = frame._bgr = None
        frame.width, frame.height = size
        return frame

    @property
    def has_pixels(self) -> bool:
        """False for a frame the source did not decode (`undecoded`)."""
        return self._av is not None or self._bgr is not None

    @property
    def decoded(self) -> bool:
        """Still in the decoder's format (not yet converted to BGR)."""
        return self._av is not None

    def motion_input(self, scaler: GreyScaler | None = None) -> np.ndarray:
        """What the motion gate scores: with a `scaler`, a decoded frame scaled to its grey
        size; without, a 2-D grey view (luma, no copy) when the decoder gives one; else the
        BGR image."""
        if self._av is not None:
            if scaler is not None:
                return scaler.scale(self._av)
            if self._av.format.name in _LUMA_FIRST:
                plane = self._av.planes[0]
                rows = np.frombuffer(plane, np.uint8, count=plane.line_size * self.height)
                return rows.reshape(self.height, plane.line_size)[:, : self.width]
        return self.bgr()

    def coarse(self, scaler: CoarseLuma) -> np.ndarray | None:
        """The frame's coarse grey (`CoarseLuma`); None for a frame not from a decoder."""
        return None if self._av is None else scaler.scale(self._av)

    def yuv420(self, size: tuple[int, int], scaler: Yuv420Scaler) -> Any:
        """The frame scaled to `size` (w, h) in full-range YUV 4:2:0 (a PyAV frame, see
        `Yuv420Scaler`), for a JPEG made with no BGR conversion; None when the decoder gave
        another pixel format (or the frame is BGR already): the caller takes `bgr`."""
        frame = self._av
        if frame is None or frame.format.name not in _YUV420:
            return None
        return scaler.scale(frame, size)

    def jpeg_planes(self, size: tuple[int, int], scaler: Yuv420Scaler) -> YuvPlanes | None:
        """The frame's full-range YCbCr planes at `size` for its JPEG (`Yuv420Scaler.
        jpeg_planes`); None when that route cannot take it (the caller takes `yuv420`)."""
        if self._av is None:
            return None
        return scaler.jpeg_planes(self._av, size)

    def bgr(
        self, size: tuple[int, int] | None = None, scaler: BgrScaler | None = None
    ) -> np.ndarray:
        """The frame as contiguous H x W x 3 BGR, scaled to `size` (w, h) when given
        (through the camera's `scaler` when given: the same pixels, cheaper).

        Converted once, then cached (the first call's size wins). A decoded frame is scaled
        by FFmpeg's scaler in its own pixel format first (area averaging), then converted:
        never full-resolution BGR first (vtest 768x576 to 320x240: about 0.9 ms against
        3.8 ms for the full-size conversion alone). One scaler thread: the conversion runs
        in the gate worker's thread, beside the decoders, not on every core.
        """
        if self._bgr is None:
            frame = self._av
            if frame is None:
                raise ValueError(f"frame {self.index} was not decoded: it has no pixels")
            if size is None or size == (self.width, self.height):
                self._bgr = packed(frame.to_ndarray(format="bgr24", threads=1))
            elif scaler is not None:
                self._bgr = scaler.bgr(frame, size)
            else:
                small = frame.reformat(
                    width=size[0], height=size[1], interpolation="AREA", threads=1
                )
                self._bgr = packed(small.to_ndarray(format="bgr24", threads=1))
            self._av = None  # the decoder's buffer can go back to its pool
        elif size is not None and size != (self._bgr.shape[1], self._bgr.shape[0]):
            import cv2

            self._bgr = cv2.resize(self._bgr, size, interpolation=cv2.INTER_AREA)
        return self._bgr
