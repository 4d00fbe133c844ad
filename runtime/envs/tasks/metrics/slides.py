"""Impress metrics with OSWorld's names: presentations (.pptx, read with python-pptx)
compared with a reference or checked against a rule, and Impress's slide panel as its
accessibility tree shows it.

`compare_pptx_files` is OSWorld's workhorse (38 of its Impress tasks). It walks the two
presentations slide by slide and shape by shape in file order and fails on the first
difference its options examine; `pptx_difference` says which one. It follows OSWorld's
current evaluator: a slide's background colour (its own solid fill, else its master's)
and its number of shapes are compared too (the first released version read the
background in a way that always gave None, and ignored extra shapes).
"""

from __future__ import annotations

import logging
import math
import re
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, fields
from typing import Any

from runtime.errors import TaskError

__all__ = [
    "METRICS",
    "PptxExamine",
    "check_image_stretch_and_center",
    "check_left_panel",
    "check_page_number_colors",
    "check_slide_numbers_color",
    "check_slide_orientation_Portrait",
    "check_strikethrough",
    "check_transition",
    "compare_pptx_files",
    "evaluate_presentation_fill_to_rgb_distance",
    "pptx_difference",
]

log = logging.getLogger(__name__)

_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_EMU_PER_INCH = 914400
# python-pptx's MSO_SHAPE_TYPE values that OSWorld's options single out.
_FREEFORM, _PICTURE, _TABLE = 5, 13, 19
# The special cases OSWorld's position options were written for (EMU; text of one task).
_BOTTOM_HALF_TOP = 3_600_000  # a title or table moved "to the bottom" starts below this
_RIGHT_HALF_LEFT = 4_320_000  # an image moved "to the right" starts right of this
_TOP_PICTURE_TOP = 1_980_000  # a picture moved "to the top" starts above this
_BOTTOM_TITLE = "Product Comparison"
_RESIZED_TEXT = "Elaborate on what you want to discuss."


@dataclass(frozen=True)
class PptxExamine:
    """Which properties `compare_pptx_files` compares: OSWorld's `examine_*` options."""

    number_of_slides: bool = True  # same slide count
    shape: bool = True  # every shape at the same position and size
    text: bool = True  # same text per shape and paragraph
    indent: bool = True  # same paragraph levels
    font_name: bool = True
    font_size: bool = True
    font_bold: bool = True
    font_italic: bool = True
    color_rgb: bool = True  # run colours, where both runs have an RGB colour
    font_underline: bool = True
    strike_through: bool = True
    alignment: bool = True  # paragraph alignment
    bullets: bool = True  # bullet character, colour and level of every paragraph of a slide
    background_color: bool = True
    note: bool = True  # speaker notes text
    # Task-specific options: geometry checked differently for one kind of shape.
    title_bottom_position: bool = False  # the "Product Comparison" title moved down
    table_bottom_position: bool = False  # the table on slide 3 moved down
    right_position: bool = False  # the non-text shapes of slide 2 moved right
    top_position: bool = False  # the pictures of slide 2 moved up
    shape_for_shift_size: bool = False  # one placeholder may change size
    image_size: bool = False  # pictures compared by size only
    modify_height: bool = False  # non-text shapes and freeforms compared by height only

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> PptxExamine:
        """The settings an OSWorld `options` dict asks for (unknown keys ignored, as OSWorld does)."""
        known = {f.name for f in fields(cls)}
        chosen = {}
        for key, value in options.items():
            name = key.removeprefix("examine_")
            if key.startswith("examine_") and name in known:
                chosen[name] = bool(value)
            else:
                log.info("compare_pptx_files ignores option %r", key)
        return cls(**chosen)


def compare_pptx_files(result: str | None, expected: str | None, **options: Any) -> float:
    """1.0 when two presentations agree on everything OSWorld's `examine_*` options examine."""
    if not result or not expected:
        return 0.0
    difference = pptx_difference(result, expected, PptxExamine.from_options(options))
    if difference is not None:
        log.info("compare_pptx_files: %s", difference)
    return float(difference is None)


def pptx_difference(result: str, expected: str, examine: PptxExamine | None = None) -> str | None:
    """The first difference between two presentations that `examine` looks at, or None."""
    from pptx import Presentation

    examine = examine or PptxExamine()
    ours, theirs = Presentation(result), Presentation(expected)
    if examine.number_of_slides and len(ours.slides) != len(theirs.slides):
        return f"{len(ours.slides)} slides, expected {len(theirs.slides)}"
    for number, (a, b) in enumerate(zip(ours.slides, theirs.slides, strict=False), start=1):
        found = _slide_difference(number, a, b, examine)
        if found is not None:
            return f"slide {number}: {found}"
    return None


def _slide_difference(number: int, a: Any, b: Any, examine: PptxExamine) -> str | None:
    if examine.background_color and _background_rgb(a) != _background_rgb(b):
        return f"background {_background_rgb(a)} != {_background_rgb(b)}"
    if examine.note and _notes(a).strip() != _notes(b).strip():
        return "notes differ"
    if len(a.shapes) != len(b.shapes):
        return f"{len(a.shapes)} shapes, expected {len(b.shapes)}"
    bullets_checked = False
    for index, (s1, s2) in enumerate(zip(a.shapes, b.shapes, strict=True)):
        found = _geometry_difference(number, s1, s2, examine)
        if found is None and s1.has_text_frame and s2.has_text_frame:
            found = _text_difference(s1, s2, examine)
            # OSWorld compares a slide's bullets once a text shape pair has a run pair.
            if found is None and examine.bullets and not bullets_checked and _has_run_pair(s1, s2):
                bullets_checked = True
                if _bullets(a) != _bullets(b):
                    found = "bullets differ"
        if found is not None:
            return f"shape {index} ({s1.name!r}): {found}"
    return None


def _geometry(shape: Any) -> tuple[Any, Any, Any, Any]:
    return shape.left, shape.top, shape.width, shape.height


def _kind(shape: Any) -> int | None:
    """python-pptx's shape type number, None for a shape it cannot classify."""
    try:
        return int(shape.shape_type)
    except (NotImplementedError, TypeError):
        return None


def _geometry_difference(number: int, s1: Any, s2: Any, examine: PptxExamine) -> str | None:
    """OSWorld's position and size checks, each option in its order."""
    moved = _geometry(s1) != _geometry(s2)
    both_text = s1.has_text_frame and s2.has_text_frame
    if examine.title_bottom_position:
        if both_text and s1.text == s2.text:
            if s1.text == _BOTTOM_TITLE and (s1.top <= s2.top or s1.top < _BOTTOM_HALF_TOP):
                return "title not moved to the bottom"
        elif moved:
            return "position or size differs"
    if examine.table_bottom_position:
        if number == 3 and _kind(s1) == _TABLE and _kind(s2) == _TABLE:
            if s1.top <= s2.top or s1.top < _BOTTOM_HALF_TOP:
                return "table not moved to the bottom"
        elif moved:
            return "position or size differs"
    if examine.right_position and number == 2 and not s1.has_text_frame and not s2.has_text_frame:
        if s1.left <= s2.left or s1.left < _RIGHT_HALF_LEFT:
            return "not moved to the right"
    if examine.top_position:
        if number == 2 and _kind(s1) == _PICTURE and _kind(s2) == _PICTURE:
            if s1.top >= s2.top or s1.top > _TOP_PICTURE_TOP:
                return "picture not moved to the top"
        elif moved:
            return "position or size differs"
    if examine.shape_for_shift_size and moved:
        if not (both_text and s1.text == s2.text == _RESIZED_TEXT):
            return "position or size differs"
    if examine.shape and moved:
        return f"position or size {_geometry(s1)} != {_geometry(s2)}"
    if examine.image_size:
        if _kind(s1) == _PICTURE and _kind(s2) == _PICTURE:
            if (s1.width, s1.height) != (s2.width, s2.height):
                return "picture size differs"
        elif moved:
            return "position or size differs"
    if examine.modify_height:
        if (not s1.has_text_frame and not s2.has_text_frame) or (
            _kind(s1) == _FREEFORM and _kind(s2) == _FREEFORM
        ):
            if s1.height != s2.height:
                return f"height {s1.height} != {s2.height}"
        elif moved:
            return "position or size differs"
    return None


def _text_difference(s1: Any, s2: Any, examine: PptxExamine) -> str | None:
    """Text, paragraph and run formatting of two text shapes, pairwise in order."""
    if examine.text and s1.text.strip() != s2.text.strip():
        return f"text {s1.text.strip()!r} != {s2.text.strip()!r}"
    paragraphs = zip(s1.text_frame.paragraphs, s2.text_frame.paragraphs, strict=False)
    for p1, p2 in paragraphs:
        if examine.alignment and p1.alignment != p2.alignment:
            return f"alignment {p1.alignment} != {p2.alignment}"
        if examine.text and p1.text != p2.text:
            return f"paragraph {p1.text!r} != {p2.text!r}"
        if examine.indent and p1.level != p2.level:
            return f"level {p1.level} != {p2.level}"
        for r1, r2 in zip(p1.runs, p2.runs, strict=False):
            found = _run_difference(r1.font, r2.font, examine)
            if found is not None:
                return f"run {r1.text!r}: {found}"
    return None


def _run_difference(f1: Any, f2: Any, examine: PptxExamine) -> str | None:
    checks = (
        (examine.font_name, "font", f1.name, f2.name),
        (examine.font_size, "size", f1.size, f2.size),
        (examine.font_bold, "bold", f1.bold, f2.bold),
        (examine.font_italic, "italic", f1.italic, f2.italic),
        (examine.font_underline, "underline", f1.underline, f2.underline),
        (examine.strike_through, "strike", _strike(f1), _strike(f2)),
    )
    for wanted, what, v1, v2 in checks:
        if wanted and v1 != v2:
            return f"{what} {v1} != {v2}"
    c1, c2 = _run_rgb(f1), _run_rgb(f2)
    if examine.color_rgb and c1 is not None and c2 is not None and c1 != c2:
        return f"colour {c1} != {c2}"
    return None


def _strike(font: Any) -> str:
    return font._element.get("strike", "noStrike")


def _run_rgb(font: Any) -> Any:
    """A run's explicit RGB colour, None when it has none (OSWorld compares only RGB colours)."""
    from pptx.enum.dml import MSO_FILL

    fill = font.fill
    if fill.type != MSO_FILL.SOLID:
        return None
    try:
        return fill.fore_color.rgb
    except AttributeError:  # a theme or preset colour has no .rgb
        return None


def _has_run_pair(s1: Any, s2: Any) -> bool:
    pairs = zip(s1.text_frame.paragraphs, s2.text_frame.paragraphs, strict=False)
    return any(p1.runs and p2.runs for p1, p2 in pairs)


def _bullets(slide: Any) -> list[tuple[str, str, str, str]]:
    """(level, bullet character, text, bullet colour) of every paragraph of a slide, tables too."""
    out = []
    for paragraph in slide.element.iter(f"{{{_A}}}p"):
        props = paragraph.find(f"{{{_A}}}pPr")
        level, char, colour = "No Level", "No Bullet", "No Color"
        if props is not None:
            level = props.get("lvl")
            bullet = props.find(f"{{{_A}}}buChar")
            char = bullet.get("char") if bullet is not None else char
            rgb = props.find(f"{{{_A}}}buClr/{{{_A}}}srgbClr")
            colour = rgb.get("val") if rgb is not None else colour
        text = "".join(t.text or "" for t in paragraph.iter(f"{{{_A}}}t"))
        out.append((level, char, text, colour))
    return out


def _notes(slide: Any) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return frame.text if frame is not None else ""


def _solid_rgb(fill_parent: Any) -> tuple[int, int, int] | None:
    """The RGB colour of an `a:solidFill` child, or None."""
    colour = fill_parent.find(f"{{{_A}}}solidFill/{{{_A}}}srgbClr")
    if colour is None:
        return None
    value = colour.get("val", "")
    return (int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16))


def _own_background(slide_like: Any) -> tuple[str, Any]:
    """("solid", rgb), ("inherit", None) or ("other", None) for a slide's or master's background.

    As python-pptx reads it: no `p:bgPr` (none, or a theme reference) and `a:noFill` both
    mean the background shows through; a gradient, picture or pattern is "other".
    """
    props = slide_like.element.find(f"{{{_P}}}cSld/{{{_P}}}bg/{{{_P}}}bgPr")
    if props is None or props.find(f"{{{_A}}}noFill") is not None:
        return "inherit", None
    if props.find(f"{{{_A}}}solidFill") is not None:
        return "solid", _solid_rgb(props)
    return "other", None


def _background_rgb(slide: Any) -> tuple[int, int, int] | None:
    """A slide's background colour: its own solid fill, else its master's, else None."""
    kind, rgb = _own_background(slide)
    if kind == "inherit":
        kind, rgb = _own_background(slide.slide_layout.slide_master)
        return rgb if kind == "solid" else None
    return rgb


def check_image_stretch_and_center(modified: str | None, original: str | None) -> float:
    """1.0 when the first slide's picture fills the slide (within half an inch) and is centred."""
    from pptx import Presentation

    if not modified or not original:
        return 0.0
    before, after = Presentation(original), Presentation(modified)
    pictures = [s for s in before.slides[0].shapes if _kind(s) == _PICTURE]
    if not pictures:
        return 0.0
    blob = pictures[0].image.blob
    moved = [s for s in after.slides[0].shapes if _kind(s) == _PICTURE and s.image.blob == blob]
    if not moved:
        return 0.0
    image, width, height = moved[-1], before.slide_width, before.slide_height
    tolerance = _EMU_PER_INCH / 2
    return float(
        abs(image.width - width) <= tolerance
        and abs(image.height - height) <= tolerance
        and abs(image.left - (width - image.width) / 2) <= tolerance
        and abs(image.top - (height - image.height) / 2) <= tolerance
    )


def check_slide_numbers_color(pptx: str | None) -> float:
    """1.0 when a slide shows a number and the master's number placeholder is pure red."""
    from pptx import Presentation

    if not pptx:
        return 0.0
    presentation = Presentation(pptx)
    numbered = any(
        shape.has_text_frame and shape.text.isdigit()
        for slide in presentation.slides
        for shape in slide.shapes
    )
    if not numbered:
        return 0.0
    for master in presentation.slide_masters:
        for placeholder in master.placeholders:
            if placeholder.has_text_frame and placeholder.text == "<number>":
                paragraphs = placeholder.text_frame.paragraphs
                if paragraphs:
                    return float(_run_rgb(paragraphs[0].font) == (255, 0, 0))
    return 0.0


def check_strikethrough(pptx: str | None, rules: dict[str, Any]) -> float:
    """1.0 when the first run of each named paragraph (slides x shapes x paragraphs) has a strike."""
    from pptx import Presentation

    if not pptx:
        return 0.0
    presentation = Presentation(pptx)
    try:
        for slide_index in rules["slide_index_s"]:
            shapes = presentation.slides[slide_index].shapes
            for shape_index in rules["shape_index_s"]:
                paragraphs = shapes[shape_index].text_frame.paragraphs
                for paragraph_index in rules["paragraph_index_s"]:
                    run = paragraphs[paragraph_index].runs[0]
                    if "strike" not in run.font._element.attrib:
                        return 0.0
    except (IndexError, AttributeError):  # the shape, paragraph or run is not there
        return 0.0
    return 1.0


def check_slide_orientation_Portrait(pptx: str | None) -> float:  # noqa: N802 (OSWorld's name)
    """1.0 when the slides are taller than wide."""
    from pptx import Presentation

    if not pptx:
        return 0.0
    presentation = Presentation(pptx)
    return float(presentation.slide_width < presentation.slide_height)


def evaluate_presentation_fill_to_rgb_distance(pptx: str | None, rules: dict[str, Any]) -> float:
    """1 minus the mean colour distance of the slides' backgrounds to `rgb` (0 best, 1 worst).

    A slide keeps its distance of 1 when its background is no solid colour, or is still
    `original_rgb` (the colour before the task) when the rules name one.
    """
    from pptx import Presentation

    if not pptx:
        return 0.0
    target = tuple(rules["rgb"])
    original = tuple(rules["original_rgb"]) if rules.get("original_rgb") is not None else None
    slides = list(Presentation(pptx).slides)
    if not slides:
        return 0.0
    total = 0.0
    for slide in slides:
        kind, rgb = _own_background(slide)
        if kind == "inherit":
            kind, rgb = _own_background(slide.slide_layout.slide_master)
        if kind != "solid" or rgb is None or rgb == original:
            total += 1.0
        else:
            total += math.dist(rgb, target) / math.dist((0, 0, 0), (255, 255, 255))
    return 1.0 - total / len(slides)


_STATE_NS = (
    "https://accessibility.ubuntu.example.org/ns/state",  # OSWorld's current tree (and ours)
    "uri:deskat:state.at-spi.gnome.org",  # its first releases
)
_COMPONENT_NS = (
    "https://accessibility.ubuntu.example.org/ns/component",
    "uri:deskat:component.at-spi.gnome.org",
)


def check_left_panel(accessibility_tree: str | None) -> float:
    """1.0 when Impress shows its slide panel: a visible split pane at its parent's top-left.

    OSWorld's first trees carried each node's position in its parent (`cp:parentcoord`);
    trees that carry only screen positions (`cp:screencoord`, ours) are compared with
    their parent's position instead.
    """
    if not accessibility_tree:
        return 0.0
    root = ET.fromstring(accessibility_tree)
    parents = {child: parent for parent in root.iter() for child in parent}
    for root_pane in root.iter("root-pane"):
        for panel in root_pane.iter("panel"):
            for split_pane in panel.iter("split-pane"):
                visible = _namespaced(split_pane, _STATE_NS, "visible")
                if visible and _at_parent_origin(split_pane, parents.get(split_pane)):
                    return 1.0
    return 0.0


def _namespaced(node: ET.Element, namespaces: tuple[str, ...], name: str) -> str | None:
    for namespace in namespaces:
        value = node.get(f"{{{namespace}}}{name}")
        if value is not None:
            return value
    return None


def _at_parent_origin(node: ET.Element, parent: ET.Element | None) -> bool:
    in_parent = _namespaced(node, _COMPONENT_NS, "parentcoord")
    if in_parent is not None:
        return in_parent == "(0, 0)"
    if parent is None:
        return False
    mine = _namespaced(node, _COMPONENT_NS, "screencoord")
    theirs = _namespaced(parent, _COMPONENT_NS, "screencoord")
    return mine is not None and mine == theirs


_TRANSITION = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def check_transition(pptx: str | None, rules: dict[str, Any]) -> float:
    """1.0 when slide file `slide_idx`+1 has a transition of type `transition_type` ("dissolve")."""
    kind = str(rules["transition_type"])
    if not _TRANSITION.fullmatch(kind):
        raise TaskError(f"check_transition: {kind!r} is no transition element name")
    if not pptx:
        return 0.0
    name = f"ppt/slides/slide{int(rules['slide_idx']) + 1}.xml"
    with zipfile.ZipFile(pptx) as archive:
        if name not in archive.namelist():
            return 0.0
        root = ET.fromstring(archive.read(name))
    transition = next(root.iter(f"{{{_P}}}transition"), None)
    if transition is None:
        return 0.0
    return float(next(transition.iter(f"{{{_P}}}{kind}"), None) is not None)


_PAGE_NUMBER_COLOURS = {
    "red": lambda r, g, b: r > g + 50 and r > b + 50,
    "green": lambda r, g, b: g > r + 50 and g > b + 50,
    "blue": lambda r, g, b: b > g + 50 and b > r + 50,
    "black": lambda r, g, b: r < 50 and g < 50 and b < 50,
}


def check_page_number_colors(pptx: str | None, rules: dict[str, Any]) -> float:
    """1.0 when the first master's slide-number colour (its next-to-last solid RGB) is `color`.

    As OSWorld reads it: the next-to-last `a:srgbClr` inside an `a:solidFill` of
    slideMaster1.xml, which is the slide-number field's in a master LibreOffice writes.
    """
    name = str(rules["color"])
    if name not in _PAGE_NUMBER_COLOURS:
        raise TaskError(
            f"check_page_number_colors knows {sorted(_PAGE_NUMBER_COLOURS)}, not {name!r}"
        )
    if not pptx:
        return 0.0
    with zipfile.ZipFile(pptx) as archive:
        root = ET.fromstring(archive.read("ppt/slideMasters/slideMaster1.xml"))
    colours = [
        colour.get("val")
        for fill in root.iter(f"{{{_A}}}solidFill")
        for colour in fill.iter(f"{{{_A}}}srgbClr")
    ]
    if len(colours) < 2 or not colours[-2] or len(colours[-2]) != 6:
        return 0.0
    value = colours[-2]
    rgb = (int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16))
    return float(_PAGE_NUMBER_COLOURS[name](*rgb))


METRICS = {
    "compare_pptx_files": compare_pptx_files,
    "check_image_stretch_and_center": check_image_stretch_and_center,
    "check_slide_numbers_color": check_slide_numbers_color,
    "check_strikethrough": check_strikethrough,
    "check_slide_orientation_Portrait": check_slide_orientation_Portrait,
    "evaluate_presentation_fill_to_rgb_distance": evaluate_presentation_fill_to_rgb_distance,
    "check_left_panel": check_left_panel,
    "check_transition": check_transition,
    "check_page_number_colors": check_page_number_colors,
}
