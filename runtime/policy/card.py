"""A policy's card: how it expects to be prompted and what it observes, kept in its folder.

    from runtime.policy.card import PolicyCard, read_card, write_card

    write_card(folder, PolicyCard(prompt_variant="compact", observe="compact"))
    read_card(folder)          # PolicyCard(...), or None when the folder has no card

A policy trained on one prompt and one observation mode plays badly on others, so the
settings travel with its weights: `agent.json` sits beside `config.json`, the trainer
copies it into every checkpoint (it is neither weights nor trainer state), and
`scalecua eval` / `scalecua rollout` take their defaults from it. Explicit flags win.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.errors import PolicyError

__all__ = ["CARD_FILE", "PolicyCard", "read_card", "write_card"]

CARD_FILE = "agent.json"


@dataclass(frozen=True)
class PolicyCard:
    """The prompt and observation a policy was trained with (None: the defaults)."""

    prompt_variant: str | None = None  # runtime.policy.prompts.VARIANTS
    observe: str | None = None  # runtime.policy.observation.OBSERVE_MODES


def read_card(folder: str | Path) -> PolicyCard | None:
    """The card in a model folder, or None when there is none (built-in names have none)."""
    path = Path(folder) / CARD_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyError(f"{path} is not a readable JSON file: {exc}") from exc
    if not isinstance(raw, dict):
        raise PolicyError(f"{path} must hold a JSON object")
    fields = {k: raw.get(k) for k in ("prompt_variant", "observe")}
    for key, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise PolicyError(f"{path}: {key} must be a string, got {value!r}")
    return PolicyCard(**fields)


def write_card(folder: str | Path, card: PolicyCard) -> Path:
    """Write the card into a model folder; return its path."""
    path = Path(folder) / CARD_FILE
    path.write_text(json.dumps(asdict(card), indent=1) + "\n", encoding="utf-8")
    return path
