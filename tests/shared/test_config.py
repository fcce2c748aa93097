from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from strata.shared.config import ConfigError, StrataConfig, load_config


def test_defaults_validate() -> None:
    cfg = load_config(None)
    assert isinstance(cfg, StrataConfig)
    assert cfg.logging.level == "INFO"


def test_unknown_key_names_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("logging:\n  level: INFO\n  colour: blue\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:3: logging.colour: unknown key" in str(err.value)


def test_bad_value_names_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("device:\n  metrics:\n    port: lots\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:3: device.metrics.port:" in str(err.value)


def test_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("logging:\n  level: INFO\n")
    cfg = load_config(path, {"logging": {"level": "DEBUG"}})
    assert cfg.logging.level == "DEBUG"


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"degradation": {"enabled": False}}, "edge.overload.gpu_pressure"),
        ({"scheduler": {"deadline_shed": True}}, "edge.overload.deadline.enabled"),
        ({"batching": {"min_batch": 2}}, "edge.overload.batch_limit.min_batch"),
        ({"batching": {"adapt_every": 2}}, "edge.overload.batch_limit.adapt_every"),
    ],
)
def test_moved_edge_overload_keys_name_their_new_home(old: dict[str, Any], new: str) -> None:
    from strata.shared.config.edge import EdgeConfig

    with pytest.raises(ValidationError, match=new.replace(".", r"\.")):
        EdgeConfig.model_validate(old)
    moved = EdgeConfig.model_validate({"overload": {"batch_limit": {"min_batch": 2}}})
    assert moved.overload.batch_limit.min_batch == 2


@pytest.mark.parametrize("section", [("edge", "uplink"), ("device", "clips", "upload")])
@pytest.mark.parametrize(
    ("tls", "why"),
    [
        ({"cert_file": "c.pem"}, "cert_file and key_file go together (mTLS)"),
        ({"key_file": "k.pem"}, "cert_file and key_file go together (mTLS)"),
        ({"cert_file": "c.pem", "key_file": "k.pem"}, "cert_file needs TLS: set ca_file"),
    ],
)
def test_tls_errors_name_the_section_they_are_in(
    section: tuple[str, ...], tls: dict[str, str], why: str
) -> None:
    data: dict[str, Any] = {"tls": tls}
    for key in reversed(section):
        data = {key: data}
    with pytest.raises(ConfigError) as err:
        load_config(None, data)
    message = str(err.value)
    assert f"{'.'.join(section)}.tls: " in message and why in message
    other = "device.clips" if section[0] == "edge" else "edge.uplink"
    assert other not in message, message


def test_unknown_key_suggests_the_closest_key_at_its_level(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("edge:\n  batching:\n    max_bach: 8\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}:3: edge.batching.max_bach: unknown key; did you mean max_batch?" in str(
        err.value
    )


def test_unknown_key_suggestions_follow_lists_and_dicts(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "rules:\n  cameras:\n    door:\n      zones:\n        - name: shop\n"
        "          points: [[0, 0], [1, 0], [1, 1]]\n          min_aera: 0.1\n"
        "cloud:\n  sinks:\n    mqtt:\n      - hots: broker\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert "rules.cameras.door.zones.0.min_aera: unknown key; did you mean min_area?" in text
    assert "cloud.sinks.mqtt.0.hots: unknown key; did you mean host?" in text


def test_a_key_far_from_every_field_gets_no_guess(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("logging:\n  zzzzzz: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).endswith("logging.zzzzzz: unknown key")
