"""Type argv[1] exactly with XTEST: a standalone script sent to an OSWorld VM's /execute.

The controller runs `python -c <this file's source> TEXT` on servers without our
/scalecua/action route. It needs only python-xlib (a pyautogui dependency, so OSWorld's
VM image has it). Characters missing from the keymap are mapped onto spare keycodes a
chunk at a time; the mapping is restored only after a pause, since clients look keys up
lazily (`xdotool type` restores at once and drops characters in slow clients).
"""

import sys
import time

from Xlib import XK, X, display
from Xlib.ext import xtest

__all__ = ["SETTLE", "keysym", "main"]

SETTLE = 0.5  # seconds for clients to catch up before spare keycodes change meaning


def keysym(char):
    """Return the keysym that types `char`."""
    if char == "\n":
        return XK.XK_Return
    if char == "\t":
        return XK.XK_Tab
    return ord(char) if ord(char) <= 0xFF else 0x01000000 | ord(char)


def main(text):
    """Type `text` on $DISPLAY."""
    d = display.Display()
    low = d.display.info.min_keycode
    mapping = d.get_keyboard_mapping(low, d.display.info.max_keycode - low + 1)
    codes, spare, original = {}, [], {}
    for offset, syms in enumerate(mapping):
        code = low + offset
        # Unused keycodes, XF86 media keys and Unicode remaps: free to borrow, then restore.
        if all(not sym or 0x01000000 <= sym <= 0x0110FFFF or sym >> 8 == 0x1008FF for sym in syms):
            spare.append(code)
            original[code] = tuple(syms[:2]) if any(syms) else (0, 0)
            continue
        for level, sym in enumerate(syms[:2]):
            if sym and sym not in codes:
                codes[sym] = (code, level)
    if not spare:
        sys.exit("no spare keycode to type characters missing from the keymap")
    shift = codes[XK.XK_Shift_L][0]
    syms = [keysym(c) for c in text if c != "\r"]
    i = 0
    while i < len(syms):
        chunk, extra = [], {}
        while i < len(syms):
            sym = syms[i]
            if sym not in codes and sym not in extra:
                if len(extra) == len(spare):
                    break
                extra[sym] = spare[len(extra)]
            chunk.append(sym)
            i += 1
        for sym, code in extra.items():
            d.change_keyboard_mapping(code, [(sym, sym)])
        d.sync()
        for sym in chunk:
            code, level = codes.get(sym) or (extra[sym], 0)
            if level:
                xtest.fake_input(d, X.KeyPress, shift)
            xtest.fake_input(d, X.KeyPress, code)
            xtest.fake_input(d, X.KeyRelease, code)
            if level:
                xtest.fake_input(d, X.KeyRelease, shift)
        d.sync()
        if extra:
            time.sleep(SETTLE)
            for code in extra.values():
                d.change_keyboard_mapping(code, [original[code]])
            d.sync()
    d.close()


if __name__ == "__main__":
    main(sys.argv[1])
