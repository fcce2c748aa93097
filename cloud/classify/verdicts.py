"""The cloud's second opinion: which classifier labels confirm which detector labels.

A model's verdict map (`verdicts.yaml` beside its manifest) groups the classifier's labels
under the detector labels they stand for (ImageNet's minivan, cab, ... under COCO's car).
For a crop the edge labelled L:

- CONFIRM: the probability on L's group reaches `confirm`;
- REJECT: L's group holds under `reject_below` and another group, not related to L (a
  `related` set such as car / truck / bus never rejects its own members), holds at least
  `reject`;
- ABSTAIN otherwise, and always for a label outside the groups or listed in `abstain`
  (an ImageNet model has no person class: it must never reject a person because it sees
  a suit).

The detector's label is never replaced. Without a verdict map each classifier label is a
group of its own name (a site's model trained on the detector's labels judges them as is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationError, model_validator
from strata.shared.config.base import StrictModel
from strata.shared.contracts import analytics_pb2, events_pb2
from strata.shared.runtime import ModelLoadError

VERDICTS_FILE = "verdicts.yaml"

# A class by label, by id, or an inclusive [first, last] id range.
Member = str | int | tuple[int, int]


class VerdictMapFile(StrictModel):
    """The verdicts.yaml of a classify model."""

    confirm: float = Field(0.5, gt=0, le=1, description="Group probability that confirms.")
    reject: float = Field(0.5, gt=0, le=1, description="Other group's probability to reject.")
    reject_below: float = Field(
        0.1, ge=0, le=1, description="The detector label's group must hold less to reject."
    )
    abstain: tuple[str, ...] = Field((), description="Detector labels never judged.")
    related: tuple[tuple[str, ...], ...] = Field(
        (), description="Sets of detector labels that never reject one another."
    )
    groups: dict[str, tuple[Member, ...]] = Field(
        ..., description="Detector label -> the classifier's classes that stand for it."
    )

    @model_validator(mode="after")
    def _sane(self) -> VerdictMapFile:
        if self.reject_below >= self.confirm:
            raise ValueError("reject_below must be under confirm")
        return self


@dataclass(frozen=True, slots=True)
class Judgement:
    """One verdict: what it says and the probability on the detector label's classes."""

    verdict: events_pb2.Verdict
    support: float


_ABSTAIN = Judgement(events_pb2.VERDICT_ABSTAIN, 0.0)


class VerdictMap:
    """Judges a detector label against one probability row (one matrix-vector product)."""

    def __init__(self, spec: VerdictMapFile, labels: Sequence[str], model: str = "") -> None:
        self.spec = spec
        self.names = tuple(spec.groups)
        index = {label: i for i, label in enumerate(labels)}
        self._member = np.zeros((len(self.names), len(labels)), np.float32)
        for g, (name, members) in enumerate(spec.groups.items()):
            self._member[g, _ids(members, index, len(labels), model, name)] = 1.0
        self._group = {name: g for g, name in enumerate(self.names)}
        self._abstain = frozenset(spec.abstain)
        # rivals[g]: 1 for the groups that may reject group g (itself and related ones not).
        self._rivals = np.ones((len(self.names), len(self.names)), bool)
        np.fill_diagonal(self._rivals, False)
        for related in spec.related:
            ids = [self._group[n] for n in related if n in self._group]
            self._rivals[np.ix_(ids, ids)] = False

    def judge(self, detector_label: str, probs: np.ndarray) -> Judgement:
        """The verdict on `detector_label` given the classifier's probabilities."""
        g = self._group.get(detector_label)
        if g is None or detector_label in self._abstain:
            return _ABSTAIN
        own_classes = self._member[g]
        own = float(own_classes @ probs)
        if own >= self.spec.confirm:
            return Judgement(events_pb2.VERDICT_CONFIRM, own)
        if own < self.spec.reject_below:
            # Another group's mass outside this group's classes (groups may share classes).
            others = self._member[self._rivals[g]] @ (probs * (1.0 - own_classes))
            if others.size and float(others.max()) >= self.spec.reject:
                return Judgement(events_pb2.VERDICT_REJECT, own)
        return Judgement(events_pb2.VERDICT_ABSTAIN, own)


def _ids(
    members: Sequence[Member], index: dict[str, int], n: int, model: str, group: str
) -> list[int]:
    out: list[int] = []
    for m in members:
        if isinstance(m, str):
            if m not in index:
                raise ModelLoadError(
                    f"model {model!r}: {VERDICTS_FILE} group {group!r} names {m!r}, which is not "
                    "one of the model's labels; use a label of its manifest (or a class id)"
                )
            out.append(index[m])
            continue
        first, last = (m, m) if isinstance(m, int) else m
        if not 0 <= first <= last < n:
            raise ModelLoadError(
                f"model {model!r}: {VERDICTS_FILE} group {group!r} has class ids {m!r}; "
                f"the model has classes 0..{n - 1}"
            )
        out.extend(range(first, last + 1))
    return out


def identity_map(labels: Sequence[str]) -> VerdictMap:
    """Each label a group of its own name (a model trained on the detector's labels)."""
    spec = VerdictMapFile(groups={label: (label,) for label in dict.fromkeys(labels)})
    return VerdictMap(spec, labels)


def load_verdict_map(folder: Path | None, labels: Sequence[str], model: str) -> VerdictMap:
    """The verdict map in `folder` (its verdicts.yaml), else the identity map."""
    import yaml

    path = folder / VERDICTS_FILE if folder is not None else None
    if path is None or not path.is_file():
        return identity_map(labels)
    try:
        data = yaml.safe_load(path.read_text())
        spec = VerdictMapFile.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ModelLoadError(f"model {model!r}: bad verdict map {path}: {exc}") from None
    return VerdictMap(spec, labels, model)


VERDICT_WORDS = {
    events_pb2.VERDICT_CONFIRM: "confirmed",
    events_pb2.VERDICT_REJECT: "rejected",
    events_pb2.VERDICT_ABSTAIN: "abstained",
}


@dataclass(frozen=True, slots=True)
class VerdictInfo:
    """A stored second opinion as the displays show it beside the detector's label."""

    verdict: str  # confirmed / rejected / abstained
    label: str  # the classifier's top label (evidence, never the object's label)
    score: float
    support: float
    model: str
    model_version: int | None

    @property
    def text(self) -> str:
        """'confirmed (minivan 0.81)', 'rejected (bicycle 0.74)', or plain 'abstained': an
        abstaining classifier's top label (a person crop's "speedboat 0.41") is no
        knowledge of the object, so people are not shown it (the JSON keeps it as `label`)."""
        if self.label and self.verdict != "abstained":
            return f"{self.verdict} ({self.label} {self.score:.2f})"
        return self.verdict

    @property
    def sub_label(self) -> str | None:
        """Frigate's sub_label: the classifier's finer label, only when it confirmed."""
        return self.label if self.verdict == "confirmed" else None

    def as_json(self) -> dict[str, object]:
        """The verdict's JSON object (MQTT, webhooks, the console)."""
        return {
            "result": self.verdict,
            "label": self.label,
            "score": round(self.score, 4),
            "support": round(self.support, 4),
            "model": self.model,
            "model_version": self.model_version,
            "text": self.text,
        }

    @staticmethod
    def of(
        verdict: int, label: str, score: float, support: float, model: str, version: int | None
    ) -> VerdictInfo | None:
        """None when no verdict was recorded (stored before verdicts were)."""
        word = VERDICT_WORDS.get(verdict)  # type: ignore[call-overload]
        if word is None:
            return None
        return VerdictInfo(word, label, score, support, model, version)


def event_verdict(ev: analytics_pb2.Event) -> VerdictInfo | None:
    """The verdict of a classified-crop event."""
    version = ev.model_version if ev.HasField("model_version") else None
    return VerdictInfo.of(ev.verdict, ev.label, ev.score, ev.support, ev.model, version)


def track_verdict(ev: events_pb2.TrackEvent) -> VerdictInfo | None:
    """The verdict joined to a track event (None: none yet, or stored before verdicts)."""
    if not ev.HasField("verdict"):
        return None
    v = ev.verdict
    version = v.model_version if v.HasField("model_version") else None
    return VerdictInfo.of(v.verdict, v.label, v.score, v.support, v.model, version)
