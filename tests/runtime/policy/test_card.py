"""The policy card: a model folder's prompt and observation travel with its weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import PolicyError
from runtime.policy.card import CARD_FILE, PolicyCard, read_card, write_card


def test_round_trip(tmp_path: Path) -> None:
    card = PolicyCard(prompt_variant="compact", observe="compact")
    assert write_card(tmp_path, card) == tmp_path / CARD_FILE
    assert read_card(tmp_path) == card


def test_a_folder_without_a_card_has_none(tmp_path: Path) -> None:
    assert read_card(tmp_path) is None


def test_missing_keys_are_the_defaults(tmp_path: Path) -> None:
    (tmp_path / CARD_FILE).write_text('{"observe": "a11y", "note": "extra keys are kept out"}')
    assert read_card(tmp_path) == PolicyCard(prompt_variant=None, observe="a11y")


@pytest.mark.parametrize(
    ("text", "match"),
    [("{not json", "readable JSON"), ("[1]", "JSON object"), ('{"observe": 3}', "observe")],
)
def test_a_bad_card_is_a_policy_error(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / CARD_FILE).write_text(text)
    with pytest.raises(PolicyError, match=match):
        read_card(tmp_path)
