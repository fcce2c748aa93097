"""The `rules:` section: every bad input is a config error naming the file, line and key."""

from pathlib import Path

import pytest
from strata.shared.config import ConfigError, load_config
from strata.shared.config.rules import UnknownLabelError, check_labels

GOOD = """\
device:
  cameras:
    - id: door
      source: synthetic://?frames=10
rules:
  cameras:
    door:
      zones:
        - name: shop
          points: [[0.1, 0.5], [0.9, 0.5], [0.9, 1.0], [0.1, 1.0]]
          labels: [person]
      lines:
        - name: entry
          points: [[0.0, 0.6], [1.0, 0.6]]
      dwell:
        - name: loiter
          zone: shop
          seconds: 5
"""


def load(tmp_path: Path, text: str) -> str:
    path = tmp_path / "strata.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value).replace(str(path), "FILE")


def test_a_good_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "strata.yaml"
    path.write_text(GOOD)
    cfg = load_config(path)
    door = cfg.rules.cameras["door"]
    assert [z.name for z in door.zones] == ["shop"]
    assert door.lines[0].in_side == "left" and door.reference_point == "bottom_center"


def test_polygon_with_two_points(tmp_path: Path) -> None:
    text = GOOD.replace(
        "[[0.1, 0.5], [0.9, 0.5], [0.9, 1.0], [0.1, 1.0]]", "[[0.1, 0.5], [0.9, 0.5]]"
    )
    msg = load(tmp_path, text)
    assert "FILE:10: rules.cameras.door.zones.0.points:" in msg
    assert "at least 3 points, got 2" in msg


def test_self_crossing_polygon(tmp_path: Path) -> None:
    # A bow tie: the corners are not listed in order around it.
    text = GOOD.replace(
        "[[0.1, 0.5], [0.9, 0.5], [0.9, 1.0], [0.1, 1.0]]",
        "[[0.1, 0.5], [0.9, 1.0], [0.9, 0.5], [0.1, 1.0]]",
    )
    msg = load(tmp_path, text)
    assert "FILE:10: rules.cameras.door.zones.0.points:" in msg and "crosses itself" in msg


def test_zero_length_line(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("[[0.0, 0.6], [1.0, 0.6]]", "[[0.5, 0.6], [0.5, 0.6]]"))
    assert "FILE:14: rules.cameras.door.lines.0.points:" in msg and "zero length" in msg


def test_coordinates_outside_the_frame(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("[[0.0, 0.6], [1.0, 0.6]]", "[[0.0, 0.6], [1.5, 0.6]]"))
    assert "FILE:14: rules.cameras.door.lines.0.points.1:" in msg
    assert "outside the frame" in msg and "relative (0..1)" in msg


def test_pixels_with_the_frame_size_stated(tmp_path: Path) -> None:
    text = GOOD.replace("    door:\n", "    door:\n      frame_size: [768, 576]\n")
    path = tmp_path / "strata.yaml"
    path.write_text(text.replace("[[0.0, 0.6], [1.0, 0.6]]", "[[0, 300], [768, 300]]"))
    assert load_config(path).rules.cameras["door"].lines[0].points[1] == (768, 300)
    msg = load(tmp_path, text.replace("[[0.0, 0.6], [1.0, 0.6]]", "[[0, 300], [800, 300]]"))
    assert "FILE:15: rules.cameras.door.lines.0.points.1:" in msg
    assert "pixels of the stated frame_size, 0..768 x 0..576" in msg


def test_unknown_camera(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("    door:\n      zones", "    garage:\n      zones"))
    assert "FILE:7: rules.cameras.garage:" in msg
    assert "device.cameras does not list" in msg and "['door']" in msg


def test_rules_for_any_camera_when_the_device_lists_none(tmp_path: Path) -> None:
    path = tmp_path / "strata.yaml"
    path.write_text("rules:" + GOOD.split("rules:", 1)[1])
    assert "door" in load_config(path).rules.cameras


def test_duplicate_names(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("name: loiter", "name: shop"))
    assert "FILE:16: rules.cameras.door.dwell.0.name:" in msg and "used twice" in msg


def test_dwell_on_a_missing_zone(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("zone: shop", "zone: back"))
    assert "FILE:17: rules.cameras.door.dwell.0.zone:" in msg and "no zone named 'back'" in msg


def test_unknown_key(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("seconds: 5", "seconds: 5\n          colour: red"))
    assert "FILE:19: rules.cameras.door.dwell.0.colour: unknown key" in msg


def test_unknown_labels_are_checked_against_the_model(tmp_path: Path) -> None:
    path = tmp_path / "strata.yaml"
    # A rule's labels must be tracked (objects.track) before they reach the model check.
    path.write_text(
        "objects:\n  track: [person, unicorn]\n"
        + GOOD.replace("labels: [person]", "labels: [person, unicorn]")
    )
    rules = load_config(path).rules
    check_labels(rules, ["person", "unicorn"])
    with pytest.raises(
        UnknownLabelError, match=r"rules\.cameras\.door\.zones\.0\.labels: 'unicorn'"
    ):
        check_labels(rules, ["person", "car"])


def test_a_rule_on_a_label_objects_does_not_track(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("labels: [person]", "labels: [person, skis]"))
    assert "FILE:11: rules.cameras.door.zones.0.labels.1:" in msg
    assert "names 'skis', which objects.track does not list" in msg
    assert "add 'skis' to objects.track, or remove it from the rule" in msg
    # Listed in objects.track, the same rule loads.
    path = tmp_path / "ok.yaml"
    path.write_text(
        "objects:\n  track: [person, skis]\n"
        + GOOD.replace("labels: [person]", "labels: [person, skis]")
    )
    assert load_config(path).rules.cameras["door"].zones[0].labels == ["person", "skis"]
    # Tracked labels the list leaves out are refused as well.
    text = "objects:\n  track: [car]\n" + GOOD
    assert "names 'person', which objects.track does not list (tracked: car)" in load(
        tmp_path, text
    )


def test_a_misspelt_camera_of_device_cameras_gets_a_guess(tmp_path: Path) -> None:
    msg = load(tmp_path, GOOD.replace("    door:", "    dor:", 1))
    assert "which device.cameras does not list (ids: ['door'])" in msg, msg
    assert "did you mean 'door'?" in msg


def test_unseen_hint_names_the_rules_cameras_not_met_yet() -> None:
    from strata.shared.config.rules import CameraRules, RulesConfig

    rules = RulesConfig(cameras={"front-door": CameraRules(), "garage": CameraRules()})
    hint = rules.unseen_hint("frontdoor", seen=["garage"])
    assert "camera 'frontdoor' has no rules" in hint
    assert "not seen here yet: front-door;" in hint
    assert "is 'front-door' meant to be 'frontdoor'?" in hint
    # A camera with rules, or nothing unseen left: nothing to say.
    assert rules.unseen_hint("garage", seen=[]) == ""
    assert rules.unseen_hint("yard", seen=["front-door", "garage"]) == ""
    assert "meant to be" not in rules.unseen_hint("yard", seen=["garage"])
