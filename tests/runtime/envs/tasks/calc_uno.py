"""Drive LibreOffice Calc through UNO, for the OSWorld Calc tests: run with Debian's python3.

    /usr/bin/python3 calc_uno.py live OPS.json   # in a desktop: edit the open document
    /usr/bin/python3 calc_uno.py host OPS.json   # on the host: a headless Calc of its own

OPS.json is {"file": PATH, "ops": [[name, args...], ...], "save_as": PATH or null}.
`live` connects to the desktop's running Calc (started by the task's `open` step and told
to listen with `soffice --accept=pipe,name=scalecua;urp;`) and edits the document that
has PATH open, as a user would through the menus; the task's postconfig then saves it
with ctrl+s. `host` opens PATH in a headless Calc with a throwaway profile, applies the
ops and stores the result as .xlsx (the test's expected files are made this way, so
they are written by Calc as OSWorld's were). This file needs python3-uno, which the
venv's Python cannot import.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import uno
from com.sun.star.awt import Rectangle
from com.sun.star.beans import PropertyValue

PIPE = "scalecua"


def _prop(name, value):
    p = PropertyValue()
    p.Name, p.Value = name, value
    return p


def _connect(pipe, seconds=30.0):
    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext(
        "com.sun.star.bridge.UnoUrlResolver", local
    )
    deadline = time.monotonic() + seconds
    while True:
        try:
            return resolver.resolve(f"uno:pipe,name={pipe};urp;StarOffice.ComponentContext")
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _enum(kind, value):
    return uno.Enum(kind, value)


def insert_sheet(doc, name, position):
    doc.Sheets.insertNewByName(name, position)


def pivot(doc, source, rng, target, cell, rows, data):
    """A pivot table at target!cell over source!rng: row fields by column index, data fields
    as [column index, "SUM"|"COUNT"|...]."""
    sheet = doc.Sheets.getByName(target)
    tables = sheet.getDataPilotTables()
    desc = tables.createDataPilotDescriptor()
    desc.setSourceRange(doc.Sheets.getByName(source).getCellRangeByName(rng).getRangeAddress())
    fields = desc.getDataPilotFields()
    for col in rows:
        fields.getByIndex(col).Orientation = _enum(
            "com.sun.star.sheet.DataPilotFieldOrientation", "ROW"
        )
    for col, function in data:
        field = fields.getByIndex(col)
        field.Orientation = _enum("com.sun.star.sheet.DataPilotFieldOrientation", "DATA")
        field.Function = _enum("com.sun.star.sheet.GeneralFunction", function)
    tables.insertNewByName("DataPilot1", sheet.getCellRangeByName(cell).getCellAddress(), desc)


def chart(doc, target, source, rng, title, kind):
    """A chart on target over source!rng (first row and column as labels), titled."""
    charts = doc.Sheets.getByName(target).getCharts()
    address = doc.Sheets.getByName(source).getCellRangeByName(rng).getRangeAddress()
    charts.addNewByName("Chart1", Rectangle(1000, 1000, 16000, 9000), (address,), True, True)
    embedded = charts.getByName("Chart1").getEmbeddedObject()
    if kind == "line":
        embedded.setDiagram(embedded.createInstance("com.sun.star.chart.LineDiagram"))
    if title:
        embedded.HasMainTitle = True
        embedded.getTitle().String = title


def back_color(doc, sheet, cells, color):
    target = doc.Sheets.getByName(sheet)
    for cell in cells:
        target.getCellRangeByName(cell).CellBackColor = color


def font_color(doc, sheet, cells, color):
    target = doc.Sheets.getByName(sheet)
    for cell in cells:
        target.getCellRangeByName(cell).CharColor = color


def validation_list(doc, sheet, rng, items):
    target = doc.Sheets.getByName(sheet).getCellRangeByName(rng)
    validation = target.Validation
    validation.Type = _enum("com.sun.star.sheet.ValidationType", "LIST")
    validation.setFormula1(";".join(f'"{item}"' for item in items))
    target.Validation = validation


def freeze(doc, cols, rows):
    doc.getCurrentController().freezeAtPosition(cols, rows)


def zoom(doc, value):
    doc.getCurrentController().ZoomValue = value


def formula(doc, sheet, cell, text):
    doc.Sheets.getByName(sheet).getCellRangeByName(cell).setFormula(text)


def value(doc, sheet, cell, number):
    doc.Sheets.getByName(sheet).getCellRangeByName(cell).setValue(number)


def text(doc, sheet, cell, string):
    doc.Sheets.getByName(sheet).getCellRangeByName(cell).setString(string)


OPS = {f.__name__: f for f in (insert_sheet, pivot, chart, back_color, font_color,
                                validation_list, freeze, zoom, formula, value, text)}  # fmt: skip


def _find_open(desktop, path):
    url = uno.systemPathToFileUrl(os.path.abspath(path))
    components = desktop.getComponents().createEnumeration()
    while components.hasMoreElements():
        doc = components.nextElement()
        if getattr(doc, "URL", None) == url:
            return doc
    raise SystemExit(f"no open document {url}")


def main():
    mode, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    if mode == "live":
        ctx = _connect(PIPE)
        desktop = ctx.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", ctx)
        doc = _find_open(desktop, spec["file"])
        for name, *args in spec["ops"]:
            OPS[name](doc, *args)
        return
    with tempfile.TemporaryDirectory() as profile:
        pipe = f"scalecua-host-{os.getpid()}"
        office = subprocess.Popen(
            ["soffice", "--headless", "--invisible", "--norestore", "--nologo",
             f"-env:UserInstallation=file://{profile}", f"--accept=pipe,name={pipe};urp;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            ctx = _connect(pipe, 60.0)
            desktop = ctx.ServiceManager.createInstanceWithContext(
                "com.sun.star.frame.Desktop", ctx
            )
            for job in spec["jobs"]:
                url = uno.systemPathToFileUrl(os.path.abspath(job["file"]))
                doc = desktop.loadComponentFromURL(url, "_blank", 0, (_prop("Hidden", False),))
                for name, *args in job["ops"]:
                    OPS[name](doc, *args)
                doc.calculateAll()
                out = uno.systemPathToFileUrl(os.path.abspath(job["save_as"]))
                doc.storeToURL(out, (_prop("FilterName", "Calc Office Open XML"),))
                if job.get("csv"):
                    csv_url = uno.systemPathToFileUrl(os.path.abspath(job["csv"]))
                    options = "44,34,UTF-8,,,,false,true,true,false,false,1"
                    doc.storeToURL(csv_url, (_prop("FilterName", "Text - txt - csv (StarCalc)"),
                                             _prop("FilterOptions", options)))  # fmt: skip
                doc.close(True)
            try:
                desktop.terminate()
            except Exception:
                pass  # the office may drop the bridge as it exits
        finally:
            try:
                office.wait(timeout=20)
            except subprocess.TimeoutExpired:
                office.kill()
                office.wait()


if __name__ == "__main__":
    main()
