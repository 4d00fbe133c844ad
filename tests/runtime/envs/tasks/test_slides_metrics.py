"""Impress metrics on presentations the tests build with python-pptx (no desktop)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from pptx import Presentation
from pptx.dml.color import RGBColor
from pptx.enum.text import PP_ALIGN
from pptx.util import Emu, Inches, Pt

from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.slides import PptxExamine, pptx_difference
from runtime.errors import TaskError

compare = METRICS["compare_pptx_files"]


def _deck(path: Path, edit=None) -> str:
    """Two slides (title + bulleted body); `edit(prs)` changes it before saving."""
    prs = Presentation()
    for title, lines in (("Agenda", ["Budget", "Hiring"]), ("Plan", ["Ship it"])):
        slide = prs.slides.add_slide(prs.slide_layouts[1])
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = lines[0]
        for line in lines[1:]:
            body.add_paragraph().text = line
    if edit is not None:
        edit(prs)
    prs.save(path)
    return str(path)


def _run(prs, slide=0, shape=1, paragraph=0):
    return prs.slides[slide].shapes[shape].text_frame.paragraphs[paragraph].runs[0]


def _rewrite(path: str, member: str, change) -> None:
    """Rewrite one XML member of a zip package in place with `change(text) -> text`."""
    with zipfile.ZipFile(path) as zin:
        items = [(info, zin.read(info.filename)) for info in zin.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info, data in items:
            if info.filename == member:
                data = change(data.decode()).encode()
            zout.writestr(info, data)


def test_identical_decks_match_and_missing_files_score_zero(tmp_path):
    a, b = _deck(tmp_path / "a.pptx"), _deck(tmp_path / "b.pptx")
    assert compare(a, b) == 1.0
    assert compare(None, b) == 0.0
    assert compare(a, None) == 0.0


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda p: setattr(_run(p).font, "name", "Times New Roman"), "font"),
        (lambda p: setattr(_run(p).font, "size", Pt(40)), "size"),
        (lambda p: setattr(_run(p).font, "bold", True), "bold"),
        (lambda p: setattr(_run(p).font, "italic", True), "italic"),
        (lambda p: setattr(_run(p).font, "underline", True), "underline"),
        (lambda p: _run(p).font._element.set("strike", "sngStrike"), "strike"),
        (lambda p: setattr(_run(p), "text", "Budgets"), "text"),
        (
            lambda p: setattr(
                p.slides[0].shapes[1].text_frame.paragraphs[0], "alignment", PP_ALIGN.RIGHT
            ),
            "alignment",
        ),
        (lambda p: setattr(p.slides[0].shapes[1].text_frame.paragraphs[1], "level", 1), "level"),
        (lambda p: setattr(p.slides[1].shapes[0], "left", Emu(100)), "position or size"),
        (lambda p: p.slides[1].shapes.add_textbox(0, 0, Inches(1), Inches(1)), "3 shapes"),
        (lambda p: p.slides.add_slide(p.slide_layouts[6]), "3 slides"),
        (lambda p: setattr(p.slides[0].notes_slide.notes_text_frame, "text", "hi"), "notes"),
    ],
)
def test_each_examined_difference_fails_the_comparison(tmp_path, edit, reason):
    ours, expected = _deck(tmp_path / "a.pptx", edit), _deck(tmp_path / "b.pptx")
    assert compare(ours, expected) == 0.0
    # As in OSWorld, a slide's bullets (levels and text of all its paragraphs) are compared
    # at its first text shape, so a body difference shows there first; without them, the
    # difference itself is named.
    assert reason in pptx_difference(ours, expected, PptxExamine(bullets=False))


def test_examine_options_switch_checks_off(tmp_path):
    expected = _deck(tmp_path / "b.pptx")
    bold = _deck(tmp_path / "bold.pptx", lambda p: setattr(_run(p).font, "bold", True))
    moved = _deck(tmp_path / "moved.pptx", lambda p: setattr(p.slides[1].shapes[0], "top", Emu(9)))
    assert compare(bold, expected, examine_font_bold=False) == 1.0
    assert compare(moved, expected, examine_shape=False) == 1.0
    # An option OSWorld does not know (a task of its own misspells one) is ignored.
    assert compare(bold, expected, examine_aligment=False) == 0.0
    assert PptxExamine.from_options({"examine_note": False}).note is False


def test_a_colour_is_compared_only_when_both_runs_have_an_rgb_one(tmp_path):
    def coloured(rgb):
        return lambda p: setattr(_run(p).font.color, "rgb", rgb)

    red = _deck(tmp_path / "red.pptx", coloured(RGBColor(255, 0, 0)))
    dark_red = _deck(tmp_path / "dark.pptx", coloured(RGBColor(0x80, 0, 0)))
    plain = _deck(tmp_path / "plain.pptx")
    assert "colour" in pptx_difference(red, dark_red)
    assert compare(red, plain) == 1.0  # the expected run inherits its colour: nothing to compare


def test_bullets_of_a_slide_are_compared(tmp_path):
    def bullet(prs):
        props = prs.slides[0].shapes[1].text_frame.paragraphs[0]._p.get_or_add_pPr()
        char = props.makeelement(
            "{http://schemas.openxmlformats.org/drawingml/2006/main}buChar", {"char": "-"}
        )
        props.append(char)

    ours, expected = _deck(tmp_path / "a.pptx", bullet), _deck(tmp_path / "b.pptx")
    assert "bullets" in pptx_difference(ours, expected)
    assert compare(ours, expected, examine_bullets=False) == 1.0


def test_background_colour_of_a_slide_or_its_master(tmp_path):
    def solid(colour):
        def edit(prs):
            fill = prs.slides[0].background.fill
            fill.solid()
            fill.fore_color.rgb = colour

        return edit

    purple = _deck(tmp_path / "purple.pptx", solid(RGBColor(0x70, 0x30, 0xA0)))
    purple2 = _deck(tmp_path / "purple2.pptx", solid(RGBColor(0x70, 0x30, 0xA0)))
    plain = _deck(tmp_path / "plain.pptx")
    assert "background" in pptx_difference(purple, plain)
    assert compare(purple, purple2) == 1.0
    assert compare(purple, plain, examine_background_color=False) == 1.0


def test_title_moved_to_the_bottom(tmp_path):
    def titled(top):
        def edit(prs):
            title = prs.slides[1].shapes.title
            title.text = "Product Comparison"
            title.top = Emu(top)

        return edit

    options = {"examine_shape": False, "examine_title_bottom_position": True}
    expected = _deck(tmp_path / "gold.pptx", titled(300_000))
    assert compare(_deck(tmp_path / "low.pptx", titled(5_000_000)), expected, **options) == 1.0
    assert compare(_deck(tmp_path / "high.pptx", titled(300_000)), expected, **options) == 0.0


def test_picture_size_and_height_options(tmp_path):
    png = tmp_path / "dot.png"
    from PIL import Image

    Image.new("RGB", (8, 8), "red").save(png)

    def picture(width, height, left=None):
        def edit(prs):
            at = Inches(1) if left is None else left
            prs.slides[1].shapes.add_picture(str(png), at, Inches(1), width, height)

        return edit

    gold = _deck(tmp_path / "gold.pptx", picture(Inches(2), Inches(3)))
    same_size = _deck(tmp_path / "moved.pptx", picture(Inches(2), Inches(3), left=Inches(4)))
    other_size = _deck(tmp_path / "small.pptx", picture(Inches(1), Inches(1)))
    taller = _deck(tmp_path / "taller.pptx", picture(Inches(2), Inches(5)))
    image_size = {"examine_shape": False, "examine_image_size": True}
    assert compare(same_size, gold, **image_size) == 1.0
    assert compare(other_size, gold, **image_size) == 0.0
    modify_height = {"examine_shape": False, "examine_modify_height": True}
    assert compare(gold, gold, **modify_height) == 1.0
    assert "height" in pptx_difference(taller, gold, PptxExamine.from_options(modify_height))
    right = {"examine_shape": False, "examine_right_position": True}
    assert (
        compare(_deck(tmp_path / "r.pptx", picture(Inches(2), Inches(3), Inches(6))), gold, **right)
        == 1.0
    )
    assert compare(same_size, gold, **right) == 0.0  # 4 inches is left of the slide's middle


def test_slide_orientation_and_transition(tmp_path):
    def portrait(prs):
        prs.slide_width, prs.slide_height = Inches(7.5), Inches(10)

    assert METRICS["check_slide_orientation_Portrait"](_deck(tmp_path / "p.pptx", portrait)) == 1.0
    plain = _deck(tmp_path / "l.pptx")
    assert METRICS["check_slide_orientation_Portrait"](plain) == 0.0

    rule = {"slide_idx": 0, "transition_type": "dissolve"}
    assert METRICS["check_transition"](plain, rule) == 0.0
    # Where LibreOffice writes a transition: inside markup-compatibility alternatives.
    transition = (
        '<mc:AlternateContent xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006">'
        '<mc:Fallback><p:transition spd="slow"><p:dissolve/></p:transition></mc:Fallback>'
        "</mc:AlternateContent></p:sld>"
    )
    _rewrite(plain, "ppt/slides/slide1.xml", lambda x: x.replace("</p:sld>", transition))
    assert METRICS["check_transition"](plain, rule) == 1.0
    assert METRICS["check_transition"](plain, {"slide_idx": 0, "transition_type": "fade"}) == 0.0
    assert (
        METRICS["check_transition"](plain, {"slide_idx": 5, "transition_type": "dissolve"}) == 0.0
    )
    with pytest.raises(TaskError):
        METRICS["check_transition"](plain, {"slide_idx": 0, "transition_type": "x/../y"})


def test_background_distance_to_a_colour(tmp_path):
    def backgrounds(*colours):
        def edit(prs):
            for slide, colour in zip(prs.slides, colours, strict=True):
                if colour is not None:
                    slide.background.fill.solid()
                    slide.background.fill.fore_color.rgb = RGBColor(*colour)

        return edit

    metric = METRICS["evaluate_presentation_fill_to_rgb_distance"]
    blue = _deck(tmp_path / "blue.pptx", backgrounds((0, 0, 255), (0, 0, 255)))
    half = _deck(tmp_path / "half.pptx", backgrounds((0, 0, 255), None))
    near = _deck(tmp_path / "near.pptx", backgrounds((0, 0, 250), (10, 0, 255)))
    assert metric(blue, {"rgb": [0, 0, 255]}) == 1.0
    assert metric(half, {"rgb": [0, 0, 255]}) == 0.5  # the other slide has no solid fill
    assert 0.97 < metric(near, {"rgb": [0, 0, 255]}) < 1.0
    assert metric(blue, {"rgb": [0, 0, 255], "original_rgb": [0, 0, 255]}) == 0.0


def test_image_stretched_to_the_slide_and_centred(tmp_path):
    png = tmp_path / "photo.png"
    from PIL import Image

    Image.new("RGB", (16, 9), "blue").save(png)

    def placed(left, top, width, height):
        def edit(prs):
            prs.slides[0].shapes.add_picture(str(png), left, top, width, height)

        return edit

    original = _deck(tmp_path / "orig.pptx", placed(Inches(1), Inches(1), Inches(3), Inches(2)))
    metric = METRICS["check_image_stretch_and_center"]
    covered = _deck(tmp_path / "cover.pptx", placed(0, 0, Inches(10), Inches(7.5)))
    assert metric(covered, original) == 1.0
    assert metric(original, original) == 0.0
    assert metric(None, original) == 0.0


def test_page_number_colour_of_the_master(tmp_path):
    def master(colours):
        path = tmp_path / f"{'-'.join(colours)}.pptx"
        fills = "".join(f'<a:solidFill><a:srgbClr val="{c}"/></a:solidFill>' for c in colours)
        xml = (
            '<p:sldMaster xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
            'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main">'
            f"{fills}</p:sldMaster>"
        )
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("ppt/slideMasters/slideMaster1.xml", xml)
        return str(path)

    metric = METRICS["check_page_number_colors"]
    # The next-to-last solid RGB colour of the master is the slide number's.
    assert metric(master(["000000", "C9211E", "FFFFFF"]), {"color": "red"}) == 1.0
    assert metric(master(["C9211E", "000000", "FFFFFF"]), {"color": "red"}) == 0.0
    assert metric(master(["C9211E", "000000", "FFFFFF"]), {"color": "black"}) == 1.0
    assert metric(master(["FFFFFF"]), {"color": "red"}) == 0.0
    with pytest.raises(TaskError):
        metric(master(["000000", "C9211E", "FFFFFF"]), {"color": "mauve"})


def test_strikethrough_and_slide_number_colour(tmp_path):
    struck = _deck(tmp_path / "s.pptx", lambda p: _run(p).font._element.set("strike", "sngStrike"))
    rules = {"slide_index_s": [0], "shape_index_s": [1], "paragraph_index_s": [0]}
    assert METRICS["check_strikethrough"](struck, rules) == 1.0
    assert METRICS["check_strikethrough"](_deck(tmp_path / "p.pptx"), rules) == 0.0
    assert METRICS["check_strikethrough"](struck, dict(rules, paragraph_index_s=[7])) == 0.0

    def numbered(colour):
        def edit(prs):
            prs.slides[0].shapes.add_textbox(0, 0, Inches(1), Inches(1)).text = "1"
            # LibreOffice writes "<number>" into the master's slide-number placeholder.
            number = next(
                ph for ph in prs.slide_masters[0].placeholders if ph.placeholder_format.type == 13
            )
            number.text_frame.text = "<number>"
            number.text_frame.paragraphs[0].font.color.rgb = colour

        return edit

    assert (
        METRICS["check_slide_numbers_color"](
            _deck(tmp_path / "r.pptx", numbered(RGBColor(255, 0, 0)))
        )
        == 1.0
    )
    assert (
        METRICS["check_slide_numbers_color"](
            _deck(tmp_path / "b.pptx", numbered(RGBColor(0, 0, 255)))
        )
        == 0.0
    )


_OURS = 'xmlns:st="https://accessibility.ubuntu.example.org/ns/state" xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"'
_OLD = (
    'xmlns:st="uri:deskat:state.at-spi.gnome.org" xmlns:cp="uri:deskat:component.at-spi.gnome.org"'
)


def _tree(namespaces: str, panes: str) -> str:
    return (
        f'<desktop-frame {namespaces}><application name="soffice"><frame><root-pane>'
        f'<panel cp:screencoord="(0, 97)" cp:size="(1280, 656)">{panes}</panel>'
        "</root-pane></frame></application></desktop-frame>"
    )


def test_left_panel_in_both_tree_conventions():
    sidebar = '<split-pane st:visible="true" cp:screencoord="(892, 97)"/>'
    slides = '<split-pane st:visible="true" cp:screencoord="(0, 97)"/>'
    metric = METRICS["check_left_panel"]
    assert metric(_tree(_OURS, sidebar + slides)) == 1.0
    assert metric(_tree(_OURS, sidebar)) == 0.0
    assert metric(_tree(_OLD, '<split-pane st:visible="true" cp:parentcoord="(0, 0)"/>')) == 1.0
    assert metric(_tree(_OLD, '<split-pane st:visible="true" cp:parentcoord="(700, 0)"/>')) == 0.0
    assert metric(_tree(_OURS, '<split-pane cp:screencoord="(0, 97)"/>')) == 0.0  # not visible
    assert metric(None) == 0.0
