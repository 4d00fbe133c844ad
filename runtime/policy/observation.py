"""What a policy sees each turn: the screenshot, and/or the screen as compact text.

Text-only policies (SmolLM2) and the `both` mode get the accessibility tree linearised into
one line per visible, named element — its role, name, text and centre on the same
1000x1000 grid the actions use — plus the terminal's recent output: xterm has no
accessibility tree (OSWorld's VM runs GNOME Terminal, which has one), so the desktop's
terminals log their sessions and the tail of the newest one stands in for its screen.
Pure functions, no I/O; the episode loop fetches the raw pieces.

The `compact` mode is the same information cut to what a small text policy needs on a CPU
budget (`compact_observation`): the window's title, the text of text areas, a table's
filled cells row by row and its selected cell, the buttons and labels of a dialog, and
the terminal's last lines — no menus, toolbars, status bars, empty cells or coordinates
(but a dialog's buttons keep theirs). It reads the desktop's compact accessibility dump
(only what is showing; a sheet's used block), which is what makes it cheap: measured on
the task families, a Calc turn is ~100 tokens from a 1.7 s dump instead of 3,200 tokens
from a 22 s one, a mousepad turn ~40 tokens instead of ~220.
"""

from __future__ import annotations

import ast
import io
import xml.etree.ElementTree as ET
from typing import Any

from runtime.envs.tasks.getters import terminal_text
from runtime.policy.actions import GRID

__all__ = [
    "OBSERVE_MODES",
    "TEXT_MODES",
    "compact_observation",
    "linearize_a11y",
    "text_observation",
    "fit_image",
    "IMAGE_MODES",
]

OBSERVE_MODES = ("screenshot", "a11y", "both", "compact")
TEXT_MODES = ("a11y", "both", "compact")  # modes that show the policy text
IMAGE_MODES = ("screenshot", "both")  # modes that show the policy a screenshot
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


# Compact mode: subtrees that are chrome, not content (their text is never shown) ...
_CHROME_ROLES = {"menu-bar", "menu", "tool-bar", "status-bar", "scroll-bar"}
# ... and containers whose buttons and labels are the content (a question the agent answers).
_DIALOG_ROLES = {"dialog", "alert", "file-chooser"}
_TEXT_ROLES = {"text", "paragraph", "entry", "password-text", "document-text", "heading"}


def _role(node: ET.Element) -> str:
    return node.tag.rsplit("}", 1)[-1]


def _focused(node: ET.Element) -> bool:
    return node.get(f"{{{_STATE}}}focused") == "true"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compact_observation(
    xml_text: str,
    screen: tuple[int, int],
    terminal_log: bytes | None,
    *,
    max_cells: int = 60,
    max_text: int = 400,
    max_terminal_lines: int = 10,
    max_chars: int = 2000,
) -> str:
    """The compact text view of a screen: window, content, dialog, terminal (see the module doc)."""
    try:
        root = ET.fromstring(xml_text) if xml_text.strip() else None
    except ET.ParseError:
        root = None
    windows: list[str] = []
    texts: list[str] = []
    rows: dict[str, list[str]] = {}
    selected: str | None = None
    dialog: list[str] = []

    def visit(node: ET.Element, in_dialog: bool) -> None:
        nonlocal selected
        role = _role(node)
        if role in _CHROME_ROLES and not in_dialog:
            return
        name = " ".join((node.get("name") or "").split())
        text = (node.text or "").strip()
        if role == "frame" and name:
            windows.append(name)
        elif role in _DIALOG_ROLES:
            in_dialog = True
            dialog.append(f"Dialog: {name}" if name else "Dialog:")
        elif role == "table-cell":
            if _focused(node):
                selected = f"{name} {text!r}" if text else f"{name} (empty)"
            if text and sum(map(len, rows.values())) < max_cells:
                row = name.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ") or "?"
                rows.setdefault(row, []).append(f"{name} {_clip(' '.join(text.split()), 40)}")
        elif (
            in_dialog
            and role in ("push-button", "label", "check-box", "radio-button")
            and (name or text)
        ):
            where = _center(node, screen)
            label = _clip(name or " ".join(text.split()), 120)
            dialog.append(f"  [{role}] {label}" + (f" at {where}" if where else ""))
        elif role in _TEXT_ROLES and text:
            mark = " (focused)" if _focused(node) else ""
            texts.append(f"Text{mark}: {_clip(text, max_text)!r}")
        for child in node:
            visit(child, in_dialog)

    if root is not None:
        visit(root, False)
    parts = [f"Window: {' | '.join(windows) if windows else '(none)'}"]
    parts += texts
    if rows:
        parts.append("Cells: " + "; ".join(", ".join(cells) for cells in rows.values()))
    if selected:
        parts.append(f"Selected cell: {selected}")
    parts += dialog
    if terminal_log:
        shown = terminal_text(terminal_log).rstrip("\n").splitlines()[-max_terminal_lines:]
        parts += ["Terminal:", "\n".join(_clip(line, 200) for line in shown)]
    return _clip("\n".join(parts), max_chars)


def fit_image(png: bytes, max_side: int) -> Any:
    """Decode a PNG screenshot and shrink it to fit `max_side` (the policy's input image)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    scale = max_side / max(width, height)
    if scale < 1:
        image = image.resize((round(width * scale), round(height * scale)), Image.BILINEAR)
    return image
