"""The labels Home Assistant discovery announces: the edge's tracked labels (top-level
`objects`), resolved as the edge resolves them.

objects.track listed in the config is the answer as it stands (the edge refuses to start
on a label its detector lacks). Left to its defaults, the edge tracks the defaults its
detector has, or every label of a detector with none of them; the cloud does the same when
it can read the detector's labels (edge.model.labels, else the manifest of edge.model.name
in models.repository), and announces the defaults otherwise.
"""

from __future__ import annotations

import logging

from strata.shared.config import StrataConfig
from strata.shared.config.objects import UntrackableLabelError, tracked_labels

log = logging.getLogger(__name__)


def announced_labels(cfg: StrataConfig) -> tuple[str, ...]:
    """The labels whose entities (`<label>_count`, `<label>_snapshot`) are announced."""
    objects = cfg.objects
    labels = _detector_labels(cfg)
    if labels is None:
        return tuple(objects.track)
    try:
        return tracked_labels(objects, labels).labels
    except UntrackableLabelError:
        # The edge refuses this config; nothing it tracks is outside the list.
        return tuple(objects.track)


def _detector_labels(cfg: StrataConfig) -> tuple[str, ...] | None:
    """The edge detector's labels as the edge reads them, when the cloud can; None when
    they are only in an ONNX file (edge.model.path) or a repository it cannot read."""
    model = cfg.edge.model
    if model.labels:
        return tuple(model.labels)
    if model.path:
        return None
    from strata.shared.models import ModelError, ModelRepository

    try:
        manifest = ModelRepository(cfg.models.repository or None).manifest(model.name)
    except (ModelError, OSError) as exc:
        log.info("discovery: the edge detector's labels are unknown here (%s)", exc)
        return None
    return tuple(manifest.labels) or None
