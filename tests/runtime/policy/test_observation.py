"""The compact observation: a window's content in few tokens, from OSWorld-shaped XML."""

from __future__ import annotations

from runtime.policy.observation import compact_observation

_NS = (
    'xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
    'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"'
)
TREE = f"""<desktop-frame {_NS}>
  <application name="soffice">
    <frame name="sales.csv - LibreOffice Calc" st:showing="true">
      <menu-bar name=""><menu name="File"><menu-item name="Save">Save</menu-item></menu></menu-bar>
      <tool-bar name="Standard"><push-button name="Bold"/></tool-bar>
      <table name="Sheet1">
        <table-cell name="A1" st:focused="true">item</table-cell>
        <table-cell name="B1">price</table-cell>
        <table-cell name="A2">pen</table-cell>
        <table-cell name="B2">3</table-cell>
        <table-cell name="C2"></table-cell>
      </table>
      <status-bar name=""><label name="Sheet 1 of 1">Sheet 1 of 1</label></status-bar>
      <dialog name="Keep current format?">
        <label name="Use Text CSV format?"/>
        <push-button name="Use Text CSV Format!" cp:screencoord="(100, 200)" cp:size="(40, 20)"/>
      </dialog>
    </frame>
  </application>
</desktop-frame>"""


def test_shows_window_cells_selection_and_dialog_without_chrome() -> None:
    text = compact_observation(TREE, (1280, 800), None)
    lines = text.splitlines()
    assert lines[0] == "Window: sales.csv - LibreOffice Calc"
    assert "Cells: A1 item, B1 price; A2 pen, B2 3" in lines
    assert "Selected cell: A1 'item'" in lines
    assert "Dialog: Keep current format?" in lines
    button = next(line for line in lines if "[push-button]" in line)
    assert "Use Text CSV Format!" in button and " at " in button  # clickable: it has a place
    for chrome in ("File", "Bold", "Sheet 1 of 1", "C2"):
        assert chrome not in text, chrome


def test_text_areas_and_the_terminal_tail() -> None:
    tree = f"""<desktop-frame {_NS}><application name="mousepad">
      <frame name="notes.txt - Mousepad"><text st:focused="true">hello
world</text></frame></application></desktop-frame>"""
    log = b"".join(f"line {i}\r\n".encode() for i in range(30))
    text = compact_observation(tree, (1280, 800), log, max_terminal_lines=3)
    assert "Text (focused): 'hello\\nworld'" in text
    assert text.endswith("Terminal:\nline 27\nline 28\nline 29")


def test_bad_or_empty_xml_still_gives_an_observation() -> None:
    for xml in ("", "<not xml", "<desktop-frame/>"):
        assert compact_observation(xml, (1280, 800), None) == "Window: (none)"


def test_long_content_is_clipped() -> None:
    tree = f"""<desktop-frame {_NS}><frame name="w"><text>{"x" * 5000}</text></frame>
    </desktop-frame>"""
    assert len(compact_observation(tree, (1280, 800), None, max_chars=300)) <= 300
