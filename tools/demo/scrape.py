"""Read a daemon's Prometheus /metrics endpoint into plain sample values."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample: name, labels as sorted pairs, value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


class Samples:
    """All samples of one scrape, with sums over labels."""

    def __init__(self, samples: Iterable[Sample] = ()) -> None:
        self.samples = tuple(samples)

    def total(self, name: str, **match: str) -> float:
        """Sum of `name` over every label set that has the `match` labels."""
        want = set(match.items())
        return sum(s.value for s in self.samples if s.name == name and want <= set(s.labels))

    def by_label(self, name: str, label: str, **match: str) -> dict[str, float]:
        """Sum of `name` grouped by one label's value (only samples with the `match` labels)."""
        want = set(match.items())
        out: dict[str, float] = {}
        for s in self.samples:
            if s.name == name and want <= set(s.labels):
                key = dict(s.labels).get(label, "")
                out[key] = out.get(key, 0.0) + s.value
        return out

    def names(self) -> set[str]:
        """Every sample name present."""
        return {s.name for s in self.samples}

    def as_dict(self, prefix: str = "strata_") -> dict[str, float]:
        """`name{a="b"}` -> value for the samples whose name starts with `prefix`."""
        out = {}
        for s in self.samples:
            if s.name.startswith(prefix):
                lab = ",".join(f'{k}="{v}"' for k, v in s.labels)
                out[f"{s.name}{{{lab}}}" if lab else s.name] = s.value
        return out


def parse(text: str) -> Samples:
    """Parse Prometheus text exposition."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels: Mapping[str, str] = s.labels
            out.append(Sample(s.name, tuple(sorted(labels.items())), float(s.value)))
    return Samples(out)


def scrape(url: str, timeout: float = 2.0) -> Samples | None:
    """GET and parse `url`; None when nothing answers there (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            text = resp.read().decode("utf-8")
    except (urllib.error.URLError, OSError, TimeoutError):
        return None
    return parse(text)
