"""`edge.appearance`: appearance embeddings (OSNet) in the tracker, opt-in per camera (issue 42).

Off unless asked for: a person's embedding describes them, so a site turns it on camera by
camera (`enabled` for every camera, `cameras` to say otherwise for some). Embeddings travel
with the track's lifecycle events on the durable uplink only, never to MQTT or webhooks.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import StrictModel

# The starter repository's person re-identification model (shared/starter_models).
DEFAULT_APPEARANCE_MODEL = "osnet_x0_25_msmt17"


class AppearanceConfig(StrictModel):
    """Appearance in the tracker (BoT-SORT style): embeddings of people's crops where ids are
    at risk, in the association's cost and to re-link a lost track when it reappears."""

    enabled: bool = Field(
        False, description="Embed tracks' appearance on every camera (opt-in: off by default)."
    )
    cameras: dict[str, bool] = Field(
        default_factory=dict,
        description="Per camera id: on or off, whatever `enabled` says (the opt-in per camera).",
    )
    model: str = Field(
        DEFAULT_APPEARANCE_MODEL,
        min_length=1,
        description="Embedding model of the model repository (models.repository; empty: the "
        "starter one).",
    )
    path: str = Field(
        "", description="An ONNX embedding model file instead of `model` (input Nx3x256x128)."
    )
    dim: int = Field(512, ge=8, description="Embedding size the model must give.")
    labels: list[str] = Field(
        default_factory=lambda: ["person"],
        description="Detector labels whose tracks are embedded (the model knows people).",
    )
    # OSNet x0.25 a crop, one thread, Intel Xeon (2026-12-07): ONNX Runtime 11.6 ms,
    # OpenVINO 2.7 ms with a static batch of one (3.7 ms dynamic).
    backend: Literal["auto", "onnxruntime-cpu", "openvino"] = Field(
        "auto",
        description="Runtime of the embedding model: `openvino` (4x faster on CPU; the "
        "openvino extra), `onnxruntime-cpu`, or `auto`: openvino when installed, else "
        "onnxruntime-cpu.",
    )
    threads: int = Field(1, ge=0, description="Runtime threads (0: the runtime's default).")
    batch: int = Field(
        8,
        ge=1,
        description="Crops embedded in one model call at most (onnxruntime-cpu; openvino "
        "embeds one a call, a static shape).",
    )
    # vtest, two 60% cuts at 1 frame in 5 (`strata bench identities`, its interleaved probe,
    # Intel Xeon 2 cores, 2026-12-07): 0.87 crops a kept frame on OpenVINO cost 0.146-0.153
    # of PicoDet-S 416's time (3.0 ms a crop, 18 ms a frame); on ONNX Runtime 0.61 (12.6 ms a
    # crop). Id switches per 100 tracks 154.2 at 0.85 (150.8 off), IDF1 0.433 (0.393 off).
    crops_per_frame: float = Field(
        0.85,
        gt=0.0,
        description="Crops embedded per detected frame of a camera on average (the cost bound: "
        "an OSNet x0.25 crop on OpenVINO costs ~0.17 of a PicoDet-S 416 frame on CPU, so 0.85 "
        "keeps appearance near 15% of the detector's time; on ONNX Runtime 4x that); the "
        "rest are counted as skipped.",
    )
    max_crops: int = Field(
        4, ge=1, description="... saved up to this many for one frame (people meeting)."
    )
    weight: float = Field(
        6.0,
        ge=0.0,
        description="Added association cost, in box heights, per unit of cosine distance "
        "between a track's and a detection's embeddings (only where both have one).",
    )
    neutral: float = Field(
        0.35,
        ge=0.0,
        le=2.0,
        description="Cosine distance assumed where a track or a detection has no embedding.",
    )
    gate_distance: float = Field(
        2.0,
        ge=0.0,
        description="A detection that looks like a track (cosine distance at most "
        "relink_distance) may match it this far (box heights) from its predicted box, beyond "
        "tracking.match_distance (people who turn between looks).",
    )
    # vtest, two 60% cuts at 1 frame in 5 (`strata bench identities --set veto_distance=V`):
    # V 0.5: links' precision at 0.8 0.12 -> 0.29 (seen together 0.59 -> 0.79), recall
    # 0.08 -> 0.14, but id switches per 100 tracks 165 -> 186 (tracks split where a crop is
    # poor); 0.4: 0.21, 189; 0.6: 0.20, 179; 0.7: as off. Off by default: it trades one
    # target for the other; a site that links across cameras may want 0.5.
    veto_distance: float = Field(
        2.0,
        ge=0.0,
        le=2.0,
        description="A track and a detection whose embeddings are farther apart than this "
        "(cosine distance) never match, whatever motion says (BoT-SORT's appearance gate): "
        "the detection starts a track instead; 2: never.",
    )
    relink_distance: float = Field(
        0.3,
        ge=0.0,
        le=2.0,
        description="A lost track is re-linked to a new detection at most this cosine "
        "distance from its embedding.",
    )
    relink_reach: float = Field(
        4.0,
        ge=0.0,
        description="... and at most this far (box heights) from its last observed box.",
    )
    relink_frames: int = Field(
        60,
        ge=0,
        description="... and lost at most this many source frames (the re-link window); "
        "also how long a lost track is kept when it is longer than tracking.max_lost.",
    )
    ema: float = Field(
        0.9,
        ge=0.0,
        lt=1.0,
        description="A track's embedding: this share of the old one plus the rest of the new "
        "crop's (BoT-SORT's 0.9); crops overlapping another box are not averaged in.",
    )
    refresh_frames: int = Field(
        20,
        ge=1,
        description="A matched track in the clear is embedded again after this many source frames.",
    )

    def on(self, camera_id: str) -> bool:
        """Whether `camera_id` has appearance embeddings."""
        return self.cameras.get(camera_id, self.enabled)
