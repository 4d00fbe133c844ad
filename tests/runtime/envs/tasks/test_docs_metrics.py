"""Writer and document metrics on files the tests build (python-docx, .odt and .epub zips;
no desktop)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import docx
import pytest
from docx.enum.text import WD_PARAGRAPH_ALIGNMENT, WD_TAB_ALIGNMENT
from docx.oxml.ns import qn
from docx.shared import Inches, Pt, RGBColor

from runtime.envs.tasks.metrics import METRICS
from runtime.envs.tasks.metrics.writer import delta_e_2000, srgb_to_lab


def _doc(path: Path, paragraphs: list[str], edit=None) -> str:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if edit is not None:
        edit(document)
    document.save(path)
    return str(path)


TEXT = ["Title", "", "Body  text here", "Last line"]


def test_compare_docx_files_follows_osworld_options(tmp_path):
    a = _doc(tmp_path / "a.docx", TEXT)
    joined = _doc(tmp_path / "b.docx", ["Title Body text", "here Last line"])
    upper = _doc(tmp_path / "c.docx", [t.upper() for t in TEXT])
    shuffled = _doc(tmp_path / "d.docx", list(reversed(TEXT)))
    compare = METRICS["compare_docx_files"]
    # ignore_blanks (the default) compares the text with every run of whitespace as one space.
    assert compare(a, joined) == 1.0
    assert compare(a, joined, ignore_blanks=False) == 0.0  # paragraph by paragraph, blanks kept
    assert compare(a, a, ignore_blanks=False) == 1.0
    assert compare(a, upper) == 0.0
    assert compare(a, upper, ignore_case=True) == 1.0
    assert compare(a, shuffled) == 0.0
    assert compare(a, shuffled, ignore_order=True) == 1.0
    assert (
        0.5
        < compare(a, _doc(tmp_path / "e.docx", ["Title Body text hare"]), content_only=True)
        < 1.0
    )
    assert compare(a, str(tmp_path / "x.odt")) == 0.0  # different types
    assert compare(None, a) == 0.0


def test_compare_docx_files_ignores_tables_as_osworld_does(tmp_path):
    with_table = _doc(
        tmp_path / "t.docx", TEXT, lambda d: d.add_table(2, 2).cell(0, 0).__setattr__("text", "x")
    )
    assert METRICS["compare_docx_files"](with_table, _doc(tmp_path / "a.docx", TEXT)) == 1.0


def _odt(path: Path, body: str, styles: str = "") -> str:
    content = (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
        'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
        'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0">'
        f"<office:automatic-styles>{styles}</office:automatic-styles>"
        f"<office:body><office:text>{body}</office:text></office:body></office:document-content>"
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", content)
    return str(path)


YELLOW = (
    '<style:style style:name="T1" style:family="text">'
    '<style:text-properties fo:background-color="#ffff00"/></style:style>'
)


def test_odt_text_and_highlighted_words(tmp_path):
    marked = _odt(
        tmp_path / "marked.odt",
        '<text:p>Call <text:span text:style-name="T1">the</text:span> candidate</text:p>',
        YELLOW,
    )
    clean = _odt(
        tmp_path / "clean.odt", "<text:p>Call <text:span>the</text:span> candidate</text:p>", YELLOW
    )
    other = _odt(tmp_path / "other.odt", "<text:p>Call a candidate</text:p>")
    assert METRICS["compare_docx_files"](marked, clean) == 1.0
    assert METRICS["compare_docx_files"](marked, other) == 0.0
    assert METRICS["check_highlighted_words"](clean, marked) == 1.0
    assert METRICS["check_highlighted_words"](marked, clean) == 0.0  # a yellow span is left
    assert METRICS["check_highlighted_words"](other, clean) == 0.0  # the text changed


def test_lines_tables_and_new_lines(tmp_path):
    a = _doc(tmp_path / "a.docx", ["b", "a", "", "a"])
    b = _doc(tmp_path / "b.docx", ["a", "b"])
    assert METRICS["compare_docx_lines"](a, b) == 1.0
    assert METRICS["compare_docx_lines"](a, _doc(tmp_path / "c.docx", ["a"])) == 0.0
    spaced = _doc(tmp_path / "s.docx", ["one", "", "two"])
    tight = _doc(tmp_path / "t.docx", ["one", "two"])
    assert (
        METRICS["compare_docx_files_and_ignore_new_lines"](spaced, tight, ignore_blanks=False)
        == 1.0
    )
    assert METRICS["compare_docx_files_and_ignore_new_lines"](spaced, b) == 0.0
    assert METRICS["compare_init_lines"](spaced, _doc(tmp_path / "p.docx", ["one"])) == 1.0

    def table(rows, cols, fill="x"):
        def edit(d):
            t = d.add_table(rows, cols)
            t.cell(0, 0).text = fill

        return edit

    t75 = _doc(tmp_path / "t75.docx", [], table(5, 7))
    assert METRICS["compare_docx_tables"](t75, _doc(tmp_path / "g.docx", [], table(5, 7))) == 1.0
    assert METRICS["compare_docx_tables"](t75, _doc(tmp_path / "h.docx", [], table(7, 5))) == 0.0
    assert (
        METRICS["compare_docx_tables"](t75, _doc(tmp_path / "i.docx", [], table(5, 7, "y"))) == 0.0
    )
    assert METRICS["compare_docx_tables"](t75, _doc(tmp_path / "j.docx", [])) == 0.0


def test_references_rescaled_from_the_base(tmp_path):
    def paper(refs):
        return _doc(
            tmp_path / f"{len(refs)}-{hash(tuple(refs))}.docx", ["Intro", "References", *refs]
        )

    gold = paper(["Smith, J. (2003). Cocoa. Nutrition 19(2).", "Lee, K. (2010). Tea. Food 4."])
    metric = METRICS["compare_references"]
    assert metric(gold, gold) == 1.0
    close = paper(["Smith, J. (2003). Cocoa. Nutrition 19 (2).", "Lee, K. (2010). Tea. Food 4."])
    assert 0.0 < metric(close, gold, reference_base_result=0.9) < 1.0
    assert metric(paper(["Other"]), gold) == 0.0  # a different number of references
    assert metric(_doc(tmp_path / "none.docx", ["Intro"]), gold) == 0.0


def test_train_records_without_duplicates(tmp_path):
    initial = _doc(
        tmp_path / "i.docx", ["08:00, T1, S1, 1", "08:05, T2, S1, 2", "08:09, T1, S2, 1"]
    )
    done = _doc(tmp_path / "d.docx", ["08:00, T1, S1, 1", "08:05, T2, S1, 2"])
    assert METRICS["check_no_duplicates"](initial, done) == 1.0
    assert METRICS["check_no_duplicates"](initial, initial) == 0.0


def _epub(path: Path, title: str, page: str) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("toc.ncx", f"<ncx>\n<navPoint id='1'/>\n<docTitle>{title}</docTitle>\n</ncx>")
        z.writestr(
            "content.opf",
            f"<package>\n<dc:identifier>{path.name}</dc:identifier>\n<dc:title>{title}</dc:title>\n</package>",
        )
        z.writestr("index.html", f"<html><body>\n<h1>{title}</h1><p>{page}</p></body></html>")
    return str(path)


def test_epub_parts_compared_line_by_line(tmp_path):
    gold = _epub(tmp_path / "gold.epub", "Pass Through", "Chapter one.")
    same = _epub(
        tmp_path / "same.epub", "Pass Through", "Chapter one."
    )  # only its identifier differs
    other = _epub(tmp_path / "other.epub", "Pass Through", "Chapter two.")
    not_zip = tmp_path / "no.epub"
    not_zip.write_text("plain text")
    assert METRICS["compare_epub"](same, gold) == 1.0
    assert 0.0 < METRICS["compare_epub"](other, gold) < 1.0
    assert METRICS["compare_epub"](str(not_zip), gold) == 0.0
    assert METRICS["compare_epub"](None, gold) == 0.0


def test_formatting_checks(tmp_path):
    def spacing(values):
        def edit(d):
            for p, v in zip(d.paragraphs, values, strict=False):
                p.paragraph_format.line_spacing = v

        return edit

    gold = _doc(tmp_path / "g.docx", TEXT, spacing([2.0, 2.0]))
    assert (
        METRICS["compare_line_spacing"](_doc(tmp_path / "a.docx", TEXT, spacing([2.0, 2.0])), gold)
        == 1.0
    )
    assert METRICS["compare_line_spacing"](_doc(tmp_path / "b.docx", TEXT), gold) == 0.0
    assert (
        METRICS["evaluate_spacing"](_doc(tmp_path / "s.docx", TEXT, spacing([1.0, 2.0, 1.5])))
        == 1.0
    )

    def font(name):
        def edit(d):
            for p in d.paragraphs:
                for r in p.runs:
                    r.font.name = name

        return edit

    rule = {"font_name": "Times New Roman"}
    assert (
        METRICS["compare_font_names"](
            _doc(tmp_path / "f.docx", TEXT, font("Times New Roman")), rule
        )
        == 1.0
    )
    assert (
        METRICS["compare_font_names"](_doc(tmp_path / "h.docx", TEXT, font("Arial")), rule) == 0.0
    )

    def centred(d):
        d.paragraphs[0].alignment = WD_PARAGRAPH_ALIGNMENT.CENTER

    assert METRICS["is_first_line_centered"](_doc(tmp_path / "c.docx", TEXT, centred)) == 1.0
    assert METRICS["is_first_line_centered"](gold) == 0.0


def _runs(path: Path, parts: list[tuple[str, dict]], extra=None) -> str:
    """One paragraph of runs, each with python-docx font attributes."""
    document = docx.Document()
    paragraph = document.add_paragraph()
    for text, attrs in parts:
        run = paragraph.add_run(text)
        for key, value in attrs.items():
            setattr(run.font, key, value)
    if extra is not None:
        extra(document)
    document.save(path)
    return str(path)


def test_run_level_checks(tmp_path):
    sub = _runs(tmp_path / "sub.docx", [("H", {}), ("2", {"subscript": True}), ("O", {})])
    flat = _runs(tmp_path / "flat.docx", [("H", {}), ("2", {}), ("O", {})])
    assert METRICS["compare_subscript_contains"](sub, sub) == 1.0
    assert METRICS["compare_subscript_contains"](flat, sub) == 0.0

    italic14 = _runs(
        tmp_path / "i14.docx", [("plain ", {}), ("slanted", {"italic": True, "size": Pt(14)})]
    )
    italic12 = _runs(
        tmp_path / "i12.docx", [("plain ", {}), ("slanted", {"italic": True, "size": Pt(12)})]
    )
    assert METRICS["check_italic_font_size_14"](italic14, italic12) == 1.0
    assert METRICS["check_italic_font_size_14"](italic12, italic14) == 0.0

    struck = _runs(tmp_path / "st.docx", [("old ", {"strike": True}), ("words", {"strike": True})])
    half = _runs(tmp_path / "half.docx", [("old ", {"strike": True}), ("words", {})])
    assert METRICS["evaluate_strike_through_last_paragraph"](struck, half) == 1.0
    assert METRICS["evaluate_strike_through_last_paragraph"](half, struck) == 0.0

    upper = _runs(tmp_path / "up.docx", [("LOUD", {})])
    assert METRICS["evaluate_conversion"](upper) == 0.0
    assert (
        METRICS["evaluate_conversion"](
            _runs(tmp_path / "low.docx", [("quiet ", {}), ("Words", {})])
        )
        == 1.0
    )


def test_page_breaks_numbers_images_and_equations(tmp_path):
    from docx.enum.text import WD_BREAK

    broken = _doc(
        tmp_path / "br.docx", TEXT, lambda d: d.paragraphs[0].add_run().add_break(WD_BREAK.PAGE)
    )
    plain = _doc(tmp_path / "plain.docx", TEXT)
    assert METRICS["contains_page_break"](broken) == 1.0
    assert METRICS["contains_page_break"](plain) == 0.0

    def footer(text):
        return lambda d: setattr(d.sections[0].footer.paragraphs[0], "text", text)

    assert (
        METRICS["has_page_numbers_in_footers"](_doc(tmp_path / "n.docx", TEXT, footer("Page 1")))
        == 1.0
    )
    assert (
        METRICS["has_page_numbers_in_footers"](_doc(tmp_path / "m.docx", TEXT, footer("Draft")))
        == 0.0
    )

    from PIL import Image

    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    Image.new("RGB", (4, 4), "red").save(red)
    Image.new("RGB", (4, 4), "blue").save(blue)

    def picture(path):  # inside the first run, where OSWorld pairs runs by position
        return lambda d: d.paragraphs[0].runs[0].add_picture(str(path), width=Inches(1))

    with_red = _doc(tmp_path / "r.docx", TEXT, picture(red))
    assert (
        METRICS["compare_contains_image"](with_red, _doc(tmp_path / "r2.docx", TEXT, picture(red)))
        == 1.0
    )
    assert METRICS["compare_contains_image"](plain, with_red) == 0.0
    assert (
        METRICS["compare_docx_images"](with_red, _doc(tmp_path / "r3.docx", TEXT, picture(red)))
        == 1.0
    )
    assert (
        METRICS["compare_docx_images"](with_red, _doc(tmp_path / "b.docx", TEXT, picture(blue)))
        == 0.0
    )
    assert METRICS["compare_docx_images"](with_red, plain) == 0.0

    def equation(d):
        run = d.paragraphs[0].runs[0]
        run._r.append(run._r.makeelement(qn("w:object"), {}))

    eq = _doc(tmp_path / "eq.docx", TEXT, equation)
    assert (
        METRICS["compare_insert_equation"](eq, _doc(tmp_path / "eq2.docx", TEXT, equation)) == 1.0
    )
    assert METRICS["compare_insert_equation"](plain, eq) == 0.0


def test_tab_stops_and_first_words(tmp_path):
    lines = ["One two three\trest of it", "Four five six\tmore"]

    def tabs(position):
        def edit(d):
            for p in d.paragraphs:
                p.paragraph_format.tab_stops.add_tab_stop(position, WD_TAB_ALIGNMENT.LEFT)

        return edit

    gold = _doc(tmp_path / "g.docx", lines, tabs(Inches(2)))
    metric = METRICS["check_tabstops"]
    assert (
        metric(
            _doc(tmp_path / "a.docx", lines, tabs(Inches(2))), gold, word_number_split_by_tabstop=3
        )
        == 1.0
    )
    nearly = metric(_doc(tmp_path / "b.docx", lines, tabs(Inches(2.5))), gold)
    assert 0.9 < nearly < 1.0  # half an inch off on a 6-inch line
    assert metric(_doc(tmp_path / "c.docx", lines), gold) == 0.0  # no tab stop at all
    assert (
        metric(
            _doc(tmp_path / "d.docx", lines, tabs(Inches(2))), gold, word_number_split_by_tabstop=2
        )
        == 0.0
    )


def test_ciede2000_matches_published_values():
    # Sharma, Wu and Dalal (2005), test pairs 1, 7, 17 and 25.
    pairs = [
        ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
        ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
        ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
        ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ]
    for lab1, lab2, expected in pairs:
        assert delta_e_2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert srgb_to_lab((255, 0, 0)) == pytest.approx((53.24, 80.09, 67.20), abs=0.01)


def test_coloured_words_in_tables(tmp_path):
    def table(colours):
        def edit(d):
            t = d.add_table(1, 2)
            for cell, (word, rgb) in zip(t.rows[0].cells, colours, strict=True):
                run = cell.paragraphs[0].add_run(word)
                if rgb is not None:
                    run.font.color.rgb = RGBColor(*rgb)

        return edit

    good = _doc(
        tmp_path / "g.docx", ["Words"], table([("apple", (255, 0, 0)), ("pear", (0, 0, 255))])
    )
    near = _doc(
        tmp_path / "n.docx", ["Words"], table([("apple", (250, 0, 0)), ("pear", (0, 0, 250))])
    )
    swapped = _doc(
        tmp_path / "s.docx", ["Words"], table([("apple", (0, 0, 255)), ("pear", (0, 0, 255))])
    )
    uncoloured = _doc(
        tmp_path / "u.docx", ["Words"], table([("apple", None), ("pear", (0, 0, 255))])
    )
    metric = METRICS["evaluate_colored_words_in_tables"]
    assert metric(good, good) == 1.0
    assert metric(near, good) == 1.0  # within the default CIEDE2000 threshold of 3.5
    assert metric(swapped, good) == 0.0
    assert metric(uncoloured, good) == 0.0


def test_highlighted_text_sets(tmp_path):
    def highlight(words):
        def edit(d):
            paragraph = d.add_paragraph()
            for word in ["keep ", "mark ", "this"]:
                run = paragraph.add_run(word)
                if word.strip() in words:
                    run.font.highlight_color = 7  # WD_COLOR_INDEX.YELLOW

        return edit

    a = _doc(tmp_path / "a.docx", [], highlight({"mark"}))
    b = _doc(tmp_path / "b.docx", [], highlight({"mark"}))
    c = _doc(tmp_path / "c.docx", [], highlight({"this"}))
    assert METRICS["compare_highlighted_text"](a, b) == 1.0
    assert METRICS["compare_highlighted_text"](a, c) == 0.0


def test_settings_from_libreoffice_registry(tmp_path):
    def registry(*items):
        body = "".join(
            f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>'
            for path, name, value in items
        )
        path = tmp_path / f"r{len(list(tmp_path.iterdir()))}.xcu"
        path.write_text(
            f'<oor:items xmlns:oor="http://openoffice.org/2001/registry">{body}</oor:items>'
        )
        return str(path)

    font = registry(("/org.openoffice.Office.Writer/DefaultFont", "Standard", "Times New Roman"))
    assert METRICS["find_default_font"](font, {"font_name": "Times New Roman"}) == 1.0
    assert METRICS["find_default_font"](font, {"font_name": "Arial"}) == 0.0
    assert METRICS["find_default_font"](None, {"font_name": "Arial"}) == 0.0
    autosave = registry(
        ("/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall", "3")
    )
    assert METRICS["check_auto_saving_time"](autosave, {"minutes": 3}) == 1.0
    assert METRICS["check_auto_saving_time"](autosave, {"minutes": 10}) == 0.0
    assert METRICS["check_auto_saving_time"](font, {"minutes": 3}) == 0.0
    presenter = "/org.openoffice.Office.Impress/Misc/Start"
    assert (
        METRICS["check_presenter_console_disable"](
            registry((presenter, "EnablePresenterScreen", "false"))
        )
        == 1.0
    )
    assert (
        METRICS["check_presenter_console_disable"](
            registry((presenter, "EnablePresenterScreen", "true"))
        )
        == 0.0
    )
    assert METRICS["check_presenter_console_disable"](font) == 0.0
    broken = tmp_path / "broken.xcu"
    broken.write_text("<oor:items")
    assert METRICS["check_presenter_console_disable"](str(broken)) == 0.0
    assert METRICS["check_text_enlarged"]("1.25\n") == 1.0
    assert METRICS["check_text_enlarged"]("1.0\n") == 0.0
