"""Evaluate a conditional format's formula at a cell, for `compare_table`'s `style` rule.

A conditional format rule of type "expression" holds a formula written for the first
cell of its range (`$E2=MAX($E$2:$E$9)`); at another cell of the range its relative
references move by the same offset, as a spreadsheet moves them. Cell values are the
stored ones (`XlsxParts.cell`: numbers as floats, dates as serial numbers, text, bools).

The language covered is what conditional formats are written in: numbers, text,
TRUE/FALSE, cell references and ranges on the same sheet, the operators
`+ - * / ^ & = <> < > <= >=` and `%`, and the functions in `FUNCTIONS`. Anything else
raises ValueError naming it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from openpyxl.formula.tokenizer import Token, Tokenizer
from openpyxl.utils.cell import column_index_from_string

from runtime.errors import OutcomeError

__all__ = ["FUNCTIONS", "CellReader", "FormulaError", "evaluate_formula"]

CellReader = Callable[[int, int], Any]  # (row, column), 1-based -> stored value
_REF = re.compile(r"^(\$?)([A-Za-z]{1,3})(\$?)(\d+)$")
_BINARY = {"=": 1, "<>": 1, "<": 1, ">": 1, "<=": 1, ">=": 1, "&": 2, "+": 3, "-": 3,
           "*": 4, "/": 4, "^": 5}  # fmt: skip


class FormulaError(OutcomeError, ValueError):
    """The formula's value is a spreadsheet error (#DIV/0!, #VALUE!, #NUM!)."""


class _Range:
    """A rectangle of cells, read on demand."""

    def __init__(self, cells: list[Any]) -> None:
        self.cells = cells


def evaluate_formula(formula: str, read: CellReader, offset: tuple[int, int] = (0, 0)) -> Any:
    """The value of `formula` with its relative references moved by (rows, columns)."""
    text = formula if formula.startswith("=") else "=" + formula
    try:
        tokens = [t for t in Tokenizer(text).items if t.type != Token.WSPACE]
    except Exception as exc:  # openpyxl's tokenizer raises a bare TokenizerError/ValueError
        raise ValueError(f"cannot read formula {formula!r}: {exc}") from exc
    parser = _Parser(tokens, read, offset, formula)
    value = parser.expression(0)
    if parser.pos != len(tokens):
        raise ValueError(
            f"cannot read formula {formula!r}: unexpected {tokens[parser.pos].value!r}"
        )
    return value.cells[0] if isinstance(value, _Range) and len(value.cells) == 1 else value


class _Parser:
    """A precedence-climbing evaluator over openpyxl's formula tokens."""

    def __init__(self, tokens: list[Token], read: CellReader, offset: tuple[int, int], src: str):
        self.tokens, self.read, self.offset, self.src = tokens, read, offset, src
        self.pos = 0

    def _peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def expression(self, min_prec: int) -> Any:
        left = self._unary()
        while (tok := self._peek()) is not None and tok.type == Token.OP_IN:
            if tok.value not in _BINARY:
                raise ValueError(f"operator {tok.value!r} in {self.src!r} is not supported")
            prec = _BINARY[tok.value]
            if prec < min_prec:
                break
            self.pos += 1
            right = self.expression(prec + 1)  # every operator groups to the left
            left = _binary(tok.value, _scalar(left), _scalar(right))
        return left

    def _unary(self) -> Any:
        tok = self._peek()
        if tok is not None and tok.type == Token.OP_PRE:
            self.pos += 1
            value = _number(_scalar(self._unary()))
            return -value if tok.value == "-" else value
        value = self._primary()
        while (tok := self._peek()) is not None and tok.type == Token.OP_POST and tok.value == "%":
            self.pos += 1
            value = _number(_scalar(value)) / 100
        return value

    def _primary(self) -> Any:
        tok = self._peek()
        if tok is None:
            raise ValueError(f"formula {self.src!r} ends too early")
        self.pos += 1
        if tok.type == Token.OPERAND:
            return self._operand(tok)
        if tok.type == Token.PAREN and tok.subtype == Token.OPEN:
            value = self.expression(0)
            self._expect(Token.PAREN)
            return value
        if tok.type == Token.FUNC and tok.subtype == Token.OPEN:
            name = tok.value[:-1].upper().removeprefix("_XLFN.")
            args: list[Any] = []
            if not self._closing():
                args.append(self.expression(0))
                while (sep := self._peek()) is not None and sep.type == Token.SEP:
                    self.pos += 1
                    args.append(self.expression(0))
            self._expect(Token.FUNC)
            if name not in FUNCTIONS:
                raise ValueError(f"function {name} in {self.src!r} is not supported")
            return FUNCTIONS[name](*args)
        raise ValueError(f"unexpected {tok.value!r} in formula {self.src!r}")

    def _closing(self) -> bool:
        tok = self._peek()
        return tok is not None and tok.type == Token.FUNC and tok.subtype == Token.CLOSE

    def _expect(self, kind: str) -> None:
        tok = self._peek()
        if tok is None or tok.type != kind or tok.subtype != Token.CLOSE:
            raise ValueError(f"unbalanced parentheses in formula {self.src!r}")
        self.pos += 1

    def _operand(self, tok: Token) -> Any:
        if tok.subtype == Token.NUMBER:
            return float(tok.value)
        if tok.subtype == Token.TEXT:
            return tok.value[1:-1].replace('""', '"')
        if tok.subtype == Token.LOGICAL:
            return tok.value.upper() == "TRUE"
        if tok.subtype == Token.RANGE:
            return self._range(tok.value)
        raise ValueError(f"operand {tok.value!r} in {self.src!r} is not supported")

    def _range(self, text: str) -> _Range:
        if "!" in text:
            raise ValueError(f"reference {text!r} to another sheet is not supported")
        ends = [self._cell(part) for part in text.split(":")]
        if len(ends) == 1:
            return _Range([self.read(*ends[0])])
        (r0, c0), (r1, c1) = ends[0], ends[-1]
        rows = range(min(r0, r1), max(r0, r1) + 1)
        cols = range(min(c0, c1), max(c0, c1) + 1)
        return _Range([self.read(r, c) for r in rows for c in cols])

    def _cell(self, text: str) -> tuple[int, int]:
        match = _REF.match(text)
        if match is None:
            raise ValueError(f"reference {text!r} is not supported")
        col = column_index_from_string(match[2].upper())
        row = int(match[4])
        # a relative part ($ absent) moves with the cell the format is evaluated at
        return row + (0 if match[3] else self.offset[0]), col + (0 if match[1] else self.offset[1])


def _scalar(value: Any) -> Any:
    if isinstance(value, _Range):
        if len(value.cells) != 1:
            raise FormulaError("#VALUE!: a range where one value is needed")
        return value.cells[0]
    return value


def _number(value: Any) -> float:
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        raise FormulaError(f"#VALUE!: {value!r} is not a number") from None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _compare_key(value: Any) -> tuple[int, Any]:
    """Order as spreadsheets do: numbers < text < booleans; empty is 0 or ""."""
    if value is None:
        value = 0.0
    if isinstance(value, bool):
        return 2, value
    if isinstance(value, int | float):
        return 0, float(value)
    return 1, str(value).lower()


def _binary(op: str, a: Any, b: Any) -> Any:
    if op in ("=", "<>", "<", ">", "<=", ">="):
        if a is None and isinstance(b, str):
            a = ""
        if b is None and isinstance(a, str):
            b = ""
        ka, kb = _compare_key(a), _compare_key(b)
        return {"=": ka == kb, "<>": ka != kb, "<": ka < kb, ">": ka > kb,
                "<=": ka <= kb, ">=": ka >= kb}[op]  # fmt: skip
    if op == "&":
        return _text(a) + _text(b)
    x, y = _number(a), _number(b)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        if y == 0:
            raise FormulaError("#DIV/0!")
        return x / y
    return x**y


def _values(args: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = []
    for arg in args:
        out.extend(arg.cells if isinstance(arg, _Range) else [arg])
    return out


def _numbers(args: tuple[Any, ...]) -> list[float]:
    """Numbers among the arguments, as SUM/MAX/AVERAGE count them (text in ranges skipped)."""
    out = []
    for arg in args:
        if isinstance(arg, _Range):
            out += [
                float(v)
                for v in arg.cells
                if isinstance(v, int | float) and not isinstance(v, bool)
            ]
        else:
            out.append(_number(arg))
    return out


def _weekday(serial: Any, kind: Any = 1.0) -> float:
    day = int(_number(serial))
    kind = int(_number(kind))
    if kind == 1:
        return float((day - 1) % 7 + 1)
    if kind == 2:
        return float((day - 2) % 7 + 1)
    if kind == 3:
        return float((day - 2) % 7)
    raise ValueError(f"WEEKDAY type {kind} is not supported")


def _nth(args: tuple[Any, ...], largest: bool) -> float:
    values = sorted(_numbers(args[:1]), reverse=largest)
    k = int(_number(_scalar(args[1])))
    if not 1 <= k <= len(values):
        raise FormulaError("#NUM!")
    return values[k - 1]


def _round_half_away(value: Any, digits: Any = 0.0) -> float:
    x, d = _number(value), int(_number(digits))
    scale = 10.0**d
    return math.copysign(math.floor(abs(x) * scale + 0.5) / scale, x)


def _right(text: str, n: int) -> str:
    return text[max(len(text) - n, 0) :]


def _average(*a: Any) -> float:
    nums = _numbers(a)
    if not nums:
        raise FormulaError("#DIV/0!")
    return sum(nums) / len(nums)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "AND": lambda *a: all(bool(_number(v)) if not isinstance(v, str) else True for v in _values(a)),
    "OR": lambda *a: any(bool(_number(v)) for v in _values(a) if not isinstance(v, str)),
    "NOT": lambda a: not bool(_number(_scalar(a))),
    "IF": lambda c, t=True, f=False: t if bool(_number(_scalar(c))) else f,
    "SUM": lambda *a: sum(_numbers(a)),
    "MAX": lambda *a: max(_numbers(a), default=0.0),
    "MIN": lambda *a: min(_numbers(a), default=0.0),
    "AVERAGE": _average,
    "COUNT": lambda *a: float(len(_numbers(a))),
    "LARGE": lambda *a: _nth(a, True),
    "SMALL": lambda *a: _nth(a, False),
    "ABS": lambda a: abs(_number(_scalar(a))),
    "INT": lambda a: float(math.floor(_number(_scalar(a)))),
    "MOD": lambda a, b: _number(_scalar(a)) % _number(_scalar(b)),
    "ROUND": lambda a, d=0.0: _round_half_away(_scalar(a), _scalar(d)),
    "WEEKDAY": lambda a, k=1.0: _weekday(_scalar(a), _scalar(k)),
    "ISBLANK": lambda a: _scalar(a) is None,
    "ISNUMBER": lambda a: isinstance(_scalar(a), int | float) and not isinstance(_scalar(a), bool),
    "ISTEXT": lambda a: isinstance(_scalar(a), str),
    "LEN": lambda a: float(len(_text(_scalar(a)))),
    "LOWER": lambda a: _text(_scalar(a)).lower(),
    "UPPER": lambda a: _text(_scalar(a)).upper(),
    "TRIM": lambda a: " ".join(_text(_scalar(a)).split()),
    "LEFT": lambda a, n=1.0: _text(_scalar(a))[: int(_number(_scalar(n)))],
    "RIGHT": lambda a, n=1.0: _right(_text(_scalar(a)), int(_number(_scalar(n)))),
    "EXACT": lambda a, b: _text(_scalar(a)) == _text(_scalar(b)),
}
