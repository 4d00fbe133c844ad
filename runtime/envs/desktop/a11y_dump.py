"""Print the desktop's accessibility tree as OSWorld-shaped XML (run by Debian's python3).

pyatspi is packaged for Debian's /usr/bin/python3 only, so the desktop server runs this
file in a subprocess with the desktop's DISPLAY and DBUS_SESSION_BUS_ADDRESS. Standard
library plus pyatspi; nothing from the project may be imported here.

The XML follows OSWorld's Linux tree: a `desktop-frame` root, one element per node named
after its role, `name`, states in the `st:` namespace, attributes in `attr:`, on-screen
position and size in `cp:`, text as element text, values in `val:`, actions in `act:`.
Caps: depth 50 and 1024 children per node; a node reporting more children than that
(a Calc sheet reports 2^31-1 cells) contributes only the cells showing on screen.

`--compact` (scalecua's compact text view; OSWorld has no such mode) dumps only what is
showing: a child that is not showing (the items of a closed menu, a hidden panel) is left
out with its subtree, and a huge table contributes only its used block of cells — rows
and columns up to the last non-empty cell, plus a margin of `COMPACT_MARGIN` empty ones
(where the next value goes). Measured on a Calc sheet: 22 s and ~2,200 nodes for the full
dump; building a cell costs ~36 ms (LibreOffice makes its accessible on demand).
"""

import sys
import xml.etree.ElementTree as ET

import pyatspi

__all__ = [
    "COMPACT_MARGIN",
    "MAX_DEPTH",
    "MAX_SCAN",
    "MAX_TEXT",
    "MAX_WIDTH",
    "NS",
    "build",
    "main",
]

NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
MAX_DEPTH = 50
MAX_WIDTH = 1024
MAX_SCAN = 500  # rows or columns to look through for the first cell showing on screen
MAX_TEXT = 10_000  # characters of one node's text
COMPACT_MARGIN = 2  # empty rows/columns a compact dump keeps past a table's last value


def _q(ns, name):
    return "{" + NS[ns] + "}" + name


def _attributes(node):
    attrs = {"name": node.name or ""}
    try:
        states = node.getState().getStates()
    except Exception:
        states = []
    for state in states:
        label = pyatspi.StateType._enum_lookup.get(int(state), "")
        label = label.split("_", 1)[1].lower() if "_" in label else ""
        if label:
            attrs[_q("st", label)] = "true"
    try:
        for key, value in node.get_attributes().items():
            if key and key.replace("-", "").replace("_", "").isalnum():
                attrs[_q("attr", key)] = value
    except Exception:
        pass
    if attrs.get(_q("st", "visible")) == "true" and attrs.get(_q("st", "showing")) == "true":
        try:
            x, y, w, h = node.queryComponent().getExtents(pyatspi.XY_SCREEN)
            attrs[_q("cp", "screencoord")] = str((x, y))
            attrs[_q("cp", "size")] = str((w, h))
        except Exception:
            pass
    for probe, key in ((node.queryImage, "image"), (node.querySelection, "selection")):
        try:
            probe()
            attrs[key] = "true"
        except Exception:
            pass
    try:
        value = node.queryValue()
        for key, read in (
            ("value", lambda: value.currentValue),
            ("min", lambda: value.minimumValue),
            ("max", lambda: value.maximumValue),
            ("step", lambda: value.minimumIncrement),
        ):
            try:
                attrs[_q("val", key)] = str(read())
            except Exception:
                pass
    except Exception:
        pass
    try:
        action = node.queryAction()
        for i in range(action.nActions):
            name = action.getName(i).replace(" ", "-")
            if name:
                attrs[_q("act", name + "_desc")] = action.getDescription(i)
                attrs[_q("act", name + "_kb")] = action.getKeyBinding(i)
    except Exception:
        pass
    return attrs


def _text(node):
    try:
        text_iface = node.queryText()
        count = min(text_iface.characterCount, MAX_TEXT)
        return text_iface.getText(0, count).replace("\ufffc", "").replace("\ufffd", "")
    except Exception:
        return ""


def _showing(node):
    try:
        return node.getState().contains(pyatspi.STATE_SHOWING)
    except Exception:
        return False


def _table(table_node):
    """The node's table interface and its size, or None when it has none."""
    try:
        table = table_node.queryTable()
        return table, table.nRows, table.nColumns
    except Exception:
        return None


def _showing_cells(table_node):
    """Yield the cells of a huge table that are on screen, scanning rows then columns."""
    found = _table(table_node)
    if found is None:
        return
    table, rows, cols = found
    first_col = None
    for r in range(rows):
        any_showing = False
        for c in range(first_col or 0, cols):
            cell = table.getAccessibleAt(r, c)
            if cell is not None and _showing(cell):
                any_showing = True
                if first_col is None:
                    first_col = c
                yield cell
            elif any_showing or (first_col is None and c >= MAX_SCAN):
                break
        if not any_showing and (first_col is not None or r >= MAX_SCAN):
            break


def _used_cells(table_node):
    """Yield the cells of a huge table's used block (from its first showing cell) and margin."""
    found = _table(table_node)
    if found is None:
        return
    table, rows, cols = found
    start = _first_showing(table_node, table, rows, cols)
    if start is None:
        return
    row0, col0 = start
    last_col = col0  # the rightmost column holding a value so far
    empty_rows = 0
    for r in range(row0, min(rows, row0 + MAX_SCAN)):
        filled = False
        empty_run = 0
        c = col0
        while c < min(cols, col0 + MAX_SCAN):
            cell = table.getAccessibleAt(r, c)
            if cell is None or not _showing(cell):
                break
            yield cell
            if _text(cell) or cell.name and _has_value(cell):
                filled, empty_run, last_col = True, 0, max(last_col, c)
            else:
                empty_run += 1
                if c > last_col and empty_run > COMPACT_MARGIN:
                    break
            c += 1
        empty_rows = 0 if filled else empty_rows + 1
        if empty_rows > COMPACT_MARGIN:
            break


def _has_value(cell):
    """Whether a cell shows something (a number cell has text; this catches the rest)."""
    try:
        return bool(cell.queryValue().currentValue)
    except Exception:
        return False


def _first_showing(table_node, table, rows, cols):
    """The (row, column) of the top-left cell on screen: the cell at the table's top-left
    point when its name is a Calc reference such as `B7`, else the first one a scan finds."""
    try:
        x, y, _, _ = table_node.queryComponent().getExtents(pyatspi.XY_SCREEN)
        cell = table_node.queryComponent().getAccessibleAtPoint(x + 2, y + 2, pyatspi.XY_SCREEN)
        found = _cell_reference(cell.name if cell is not None else "")
        if found is not None and found[0] < rows and found[1] < cols:
            return found
    except Exception:
        pass
    for r in range(min(rows, MAX_SCAN)):
        for c in range(min(cols, MAX_SCAN)):
            cell = table.getAccessibleAt(r, c)
            if cell is not None and _showing(cell):
                return r, c
    return None


def _cell_reference(name):
    """(row, column), 0-based, of a spreadsheet reference such as `AB12`; None otherwise."""
    letters = name.rstrip("0123456789")
    digits = name[len(letters) :]
    if not letters or not digits or not letters.isalpha() or not letters.isupper():
        return None
    col = 0
    for ch in letters:
        col = col * 26 + (ord(ch) - ord("A") + 1)
    return int(digits) - 1, col - 1


def build(node, depth, compact=False):
    """Return the XML element of `node` and its subtree (only what is showing when compact)."""
    attrs = _attributes(node)
    try:
        role = (node.getRoleName() or "").strip()
    except Exception:
        role = ""
    element = ET.Element((role or "unknown").replace(" ", "-"), attrs)
    text = _text(node)
    if text:
        element.text = text
    if depth >= MAX_DEPTH:
        return element
    try:
        count = node.childCount
    except Exception:
        return element
    if count > MAX_WIDTH:
        children = _used_cells(node) if compact else _showing_cells(node)
    else:
        children = (node.getChildAtIndex(i) for i in range(count))
    for i, child in enumerate(children):
        if i >= MAX_WIDTH:
            break
        if child is None or (compact and not _showing(child)):
            continue
        try:
            element.append(build(child, depth + 1, compact))
        except Exception:
            continue
    return element


def main():
    """Dump every application's tree under one `desktop-frame` root to stdout."""
    global MAX_DEPTH
    compact = "--compact" in sys.argv[1:]
    for arg in sys.argv[1:]:
        if arg.startswith("--depth="):  # ScienceBoard's /opt: a shallower tree for some apps
            MAX_DEPTH = int(arg[len("--depth=") :])
    for prefix, uri in NS.items():
        ET.register_namespace(prefix, uri)
    pyatspi.setTimeout(2000, 15000)
    root = ET.Element("desktop-frame")
    desktop = pyatspi.Registry.getDesktop(0)
    for i in range(desktop.childCount):
        app = desktop.getChildAtIndex(i)
        if app is not None:
            try:
                root.append(build(app, 1, compact))
            except Exception:
                continue
    sys.stdout.write(ET.tostring(root, encoding="unicode"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
