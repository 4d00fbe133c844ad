"""What a policy sees each turn: the screenshot, and/or the screen as compact text.

Text-only policies (SmolLM2) and the `both` mode get the accessibility tree linearised into
one line per visible, named element — its role, name, text and centre on the same
1000x1000 grid the actions use — plus the terminal's recent output: xterm has no
accessibility tree (OSWorld's VM runs GNOME Terminal, which has one), so the desktop's
terminals log their sessions and the tail of the newest one stands in for its screen.
Pure functions, no I/O; the episode loop fetches the raw pieces.
"""

from __future__ import annotations

import ast
import io
import xml.etree.ElementTree as ET
from typing import Any

from runtime.envs.tasks.getters import terminal_text
from runtime.policy.actions import GRID

__all__ = ["OBSERVE_MODES", "linearize_a11y", "text_observation", "fit_image"]

OBSERVE_MODES = ("screenshot", "a11y", "both")
_STATE = "https://accessibility.ubuntu.example.org/ns/state"
_COMPONENT = "https://accessibility.ubuntu.example.org/ns/component"
# Roles that are layout, not something an agent reads or acts on.
_SKIP_ROLES = {"desktop-frame", "filler", "panel", "section", "layered-pane", "scroll-pane",
               "viewport", "redundant-object", "unknown", "glass-pane", "root-pane"}  # fmt: skip


def _center(node: ET.Element, screen: tuple[int, int]) -> tuple[int, int] | None:
    pos, size = node.get(f"{{{_COMPONENT}}}screencoord"), node.get(f"{{{_COMPONENT}}}size")
    if not pos or not size:
        return None
    try:
        (x, y), (w, h) = ast.literal_eval(pos), ast.literal_eval(size)
    except (ValueError, SyntaxError):
        return None
    if w <= 0 or h <= 0:
        return None
    cx, cy = x + w / 2, y + h / 2
    width, height = screen
    if not (0 <= cx < width and 0 <= cy < height):
        return None  # off screen
    return round(cx * GRID / width), round(cy * GRID / height)


def linearize_a11y(
    xml_text: str, screen: tuple[int, int], max_lines: int = 150, max_text: int = 120
) -> str:
    """Return the visible, named elements of an OSWorld-style a11y tree, one per line."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return ""
    lines: list[str] = []
    for node in root.iter():
        role = node.tag.rsplit("}", 1)[-1]
        if role in _SKIP_ROLES or node.get(f"{{{_STATE}}}showing") != "true":
            continue
        name = (node.get("name") or "").strip()
        text = " ".join((node.text or "").split())
        if not name and not text:
            continue
        center = _center(node, screen)
        if center is None:
            continue
        if text == name:
            text = ""
        line = f"[{role}] {name!r}" if name else f"[{role}]"
        if text:
            line += f" text={text[:max_text]!r}"
        lines.append(f"{line} at ({center[0]}, {center[1]})")
        if len(lines) >= max_lines:
            lines.append("... (more elements not shown)")
            break
    return "\n".join(lines)


def text_observation(
    tree_lines: str, terminal_log: bytes | None, max_terminal_lines: int = 30
) -> str:
    """Compose the text a policy sees: the screen's elements and the terminal's last lines."""
    parts = ["Screen elements (role, name, centre on the 1000x1000 grid):", tree_lines or "(none)"]
    if terminal_log:
        shown = terminal_text(terminal_log).rstrip("\n").splitlines()[-max_terminal_lines:]
        parts += ["Terminal (last lines):", "\n".join(shown)]
    return "\n".join(parts)


def fit_image(png: bytes, max_side: int) -> Any:
    """Decode a PNG screenshot and shrink it to fit `max_side` (the policy's input image)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    scale = max_side / max(width, height)
    if scale < 1:
        image = image.resize((round(width * scale), round(height * scale)), Image.BILINEAR)
    return image
