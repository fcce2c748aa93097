"""cloud.sinks: off by default; a bad sink is a config error naming the file, line and key."""

from pathlib import Path

import pytest
from strata.shared.config import ConfigError, load_config


def test_no_sink_by_default() -> None:
    assert not load_config(None).cloud.sinks.enabled


def test_sinks_load(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "cloud:\n  sinks:\n    mqtt:\n      - host: broker\n        prefix: home/strata\n"
        "    webhooks:\n      - url: https://example.test/hook\n        filter:\n"
        "          labels: [person]\n"
    )
    sinks = load_config(path).cloud.sinks
    assert sinks.enabled and sinks.mqtt[0].prefix == "home/strata"
    assert sinks.webhooks[0].filter.labels == ["person"]


@pytest.mark.parametrize(
    ("yaml", "line", "key", "says"),
    [
        ("    webhooks:\n      - name: h\n        url: ftp://x\n", 5, "webhooks.0.url", "http"),
        ("    webhooks:\n      - name: h\n", 4, "webhooks.0.url", "required"),
        ("    mqtt:\n      - prefix: a/#\n", 4, "mqtt.0.prefix", "wildcards"),
        ("    mqtt:\n      - name: a b\n", 4, "mqtt.0.name", "letters"),
        ("    mqtt:\n      - {}\n      - {}\n", 2, "sinks", "unique"),
    ],
)
def test_bad_sinks_name_the_line(tmp_path: Path, yaml: str, line: int, key: str, says: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("cloud:\n  sinks:\n" + yaml)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert f"{path}:{line}: cloud.sinks" in text and key in text and says in text, text
