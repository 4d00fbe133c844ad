"""Mouse and keyboard input on one X display through the XTEST extension (python-xlib).

XTEST events cost well under a millisecond (xdotool's click sleeps 100 ms). Text is typed
keysym by keysym: a character that is not on the keymap (any non-ASCII letter, CJK, emoji)
is mapped onto a spare keycode first (an unused one, or one of the ~95 XF86 media keys),
as xdotool does, so `type` is exact for any Unicode
string and never passes through a shell. Remapped keycodes are kept (least recently used
ones are recycled) because a client reads the new mapping lazily after MappingNotify;
restoring it at once could make a slow client see the old symbol.

Not thread-safe: the desktop server calls one `XInput` from one worker thread.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from Xlib import XK, X, display
from Xlib.error import CatchError, XError
from Xlib.ext import xtest

from runtime.envs.desktop.actions import text_keysyms
from runtime.errors import DesktopError

__all__ = ["XInput"]

_SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
_SYNC_EVERY = 64  # keystrokes between round trips while typing, so the server never lags far
# How long a spare keycode keeps its symbol after it was last typed. A client looks a key up
# only when it gets to the event, and a busy one lags: xterm drawing new CJK glyphs falls
# 5-10 ms per key behind. So the wait grows with the keys typed since the slot's last use.
_REMAP_SETTLE = 0.2
_LAG_PER_KEY = 0.015


class XInput:
    """Fake input on one display: pointer moves, clicks, drags, scrolls, key combos, text."""

    def __init__(self, display_name: str) -> None:
        self._d = display.Display(display_name)
        if not self._d.query_extension("XTEST").present:
            raise DesktopError(f"display {display_name} has no XTEST extension")
        self._root = self._d.screen().root
        self._min_code = self._d.display.info.min_keycode
        self._max_code = self._d.display.info.max_keycode
        self._codes: dict[int, tuple[int, int]] = {}  # keysym -> (keycode, shift level 0/1)
        self._spare: list[int] = []
        self._remapped: OrderedDict[int, int] = OrderedDict()  # keysym -> spare keycode (LRU)
        self._used: dict[int, tuple[float, int]] = {}  # spare keycode -> (time, keys) at last use
        self._keys_typed = 0
        self._load_keymap()
        self._shift = self._codes[XK.XK_Shift_L][0]
        self._active_atom = self._d.intern_atom("_NET_ACTIVE_WINDOW")

    def _load_keymap(self) -> None:
        count = self._max_code - self._min_code + 1
        mapping = self._d.get_keyboard_mapping(self._min_code, count)
        for offset, syms in enumerate(mapping):
            code = self._min_code + offset
            if not any(syms) or all(_is_multimedia(sym) for sym in syms if sym):
                self._spare.append(code)
                continue
            for level, sym in enumerate(syms[:2]):
                if sym and sym not in self._codes:
                    self._codes[sym] = (code, level)
        if not self._spare:
            raise DesktopError("the keymap has no spare keycode to type unmapped characters")

    # -- pointer ------------------------------------------------------------------------
    def screen_size(self) -> tuple[int, int]:
        """Return the screen's (width, height) in pixels."""
        screen = self._d.screen()
        return screen.width_in_pixels, screen.height_in_pixels

    def cursor(self) -> tuple[int, int]:
        """Return the pointer position in pixels."""
        reply = self._root.query_pointer()
        return reply.root_x, reply.root_y

    def move(self, x: int, y: int) -> None:
        """Move the pointer to (x, y)."""
        xtest.fake_input(self._d, X.MotionNotify, x=int(x), y=int(y))
        self._d.sync()

    def button(self, button: int, down: bool) -> None:
        """Press or release one mouse button where the pointer is."""
        xtest.fake_input(self._d, X.ButtonPress if down else X.ButtonRelease, button)
        self._d.sync()

    def click(self, button: int = 1, count: int = 1, modifiers: list[int] | None = None) -> None:
        """Click `button` `count` times where the pointer is, holding `modifiers` keysyms."""
        held = self._press_keys(modifiers or [])
        for _ in range(count):
            xtest.fake_input(self._d, X.ButtonPress, button)
            xtest.fake_input(self._d, X.ButtonRelease, button)
        self._release_keys(held)
        self._d.sync()

    def drag(self, start: tuple[int, int], end: tuple[int, int], steps: int = 10) -> None:
        """Press at `start`, move to `end` in `steps` motions, release there."""
        self.move(*start)
        xtest.fake_input(self._d, X.ButtonPress, 1)
        self._d.sync()
        for i in range(1, steps + 1):
            x = start[0] + (end[0] - start[0]) * i // steps
            y = start[1] + (end[1] - start[1]) * i // steps
            xtest.fake_input(self._d, X.MotionNotify, x=x, y=y)
            self._d.sync()
            # Toolkits start a drag only after motion events spread over time.
            time.sleep(0.01)
        xtest.fake_input(self._d, X.ButtonRelease, 1)
        self._d.sync()

    def scroll(self, direction: str, amount: int) -> None:
        """Turn the wheel `amount` clicks in `direction` (up, down, left, right)."""
        button = _SCROLL_BUTTONS[direction]
        for _ in range(amount):
            xtest.fake_input(self._d, X.ButtonPress, button)
            xtest.fake_input(self._d, X.ButtonRelease, button)
        self._d.sync()

    # -- keyboard -----------------------------------------------------------------------
    def ensure_focus(self) -> None:
        """Give the keyboard focus to the active window if the focus fell back to the root."""
        # After the focused app is killed the focus reverts to PointerRoot, and openbox's
        # focus request for the next window can carry an older timestamp, which the server
        # ignores: the window looks active but keys go wherever the pointer is.
        focus = self._d.get_input_focus().focus
        if focus not in (X.NONE, X.PointerRoot):
            return
        prop = self._root.get_full_property(self._active_atom, X.AnyPropertyType)
        if prop is None or not len(prop.value) or not prop.value[0]:
            return
        window = self._d.create_resource_object("window", int(prop.value[0]))
        catcher = CatchError()
        try:
            if window.get_attributes().map_state != X.IsViewable:
                return
        except XError:
            return
        window.set_input_focus(X.RevertToPointerRoot, X.CurrentTime, onerror=catcher)
        self._d.sync()

    def key_combos(self, combos: list[list[int]]) -> None:
        """Press each combo (keysyms held together, released in reverse), one after another."""
        self.ensure_focus()
        for combo in combos:
            self._release_keys(self._press_keys(combo))
        self._d.sync()

    def hold(self, combos: list[list[int]], duration: float) -> None:
        """Hold every key of `combos` down for `duration` seconds."""
        self.ensure_focus()
        held = self._press_keys([k for combo in combos for k in combo])
        self._d.sync()
        try:
            time.sleep(duration)
        finally:
            self._release_keys(held)
            self._d.sync()

    def type_text(self, text: str) -> None:
        """Type `text` exactly, whatever its characters."""
        keysyms = text_keysyms(text)
        self.ensure_focus()
        shift_lock = bool(self._root.query_pointer().mask & X.LockMask)
        pending = 0
        for keysym in keysyms:
            code, level = self._keycode(keysym)
            if shift_lock and _is_letter(keysym):
                level = 1 - level  # Caps Lock inverts letters only
            if level == 1:
                xtest.fake_input(self._d, X.KeyPress, self._shift)
            xtest.fake_input(self._d, X.KeyPress, code)
            xtest.fake_input(self._d, X.KeyRelease, code)
            self._keys_typed += 1
            if level == 1:
                xtest.fake_input(self._d, X.KeyRelease, self._shift)
            pending += 1
            if pending >= _SYNC_EVERY:
                self._d.sync()
                pending = 0
        self._d.sync()

    def release_all(self) -> None:
        """Release every key and button that is down (after an interrupted hold or drag)."""
        keymap = self._d.query_keymap()
        for byte_index, byte in enumerate(keymap):
            for bit in range(8):
                if byte & (1 << bit):
                    xtest.fake_input(self._d, X.KeyRelease, byte_index * 8 + bit)
        mask = self._root.query_pointer().mask
        for button, flag in ((1, X.Button1Mask), (2, X.Button2Mask), (3, X.Button3Mask)):
            if mask & flag:
                xtest.fake_input(self._d, X.ButtonRelease, button)
        self._d.sync()

    def close(self) -> None:
        """Close the X connection."""
        self._d.close()

    def _press_keys(self, keysyms: list[int]) -> list[int]:
        codes = []
        for keysym in keysyms:
            code, level = self._keycode(keysym)
            if level == 1 and self._shift not in codes:
                xtest.fake_input(self._d, X.KeyPress, self._shift)
                codes.append(self._shift)
            xtest.fake_input(self._d, X.KeyPress, code)
            codes.append(code)
        return codes

    def _release_keys(self, codes: list[int]) -> None:
        for code in reversed(codes):
            xtest.fake_input(self._d, X.KeyRelease, code)

    def _keycode(self, keysym: int) -> tuple[int, int]:
        if keysym in self._codes:
            return self._codes[keysym]
        now = time.monotonic()
        if keysym in self._remapped:
            self._remapped.move_to_end(keysym)
            code = self._remapped[keysym]
            self._used[code] = (now, self._keys_typed)
            return code, 0
        if len(self._remapped) < len(self._spare):
            code = self._spare[len(self._remapped)]
        else:
            _, code = self._remapped.popitem(last=False)
            # A slow client may still hold key events for this slot that it has not looked
            # up yet: give it time before the slot means another symbol.
            used_at, keys_then = self._used.get(code, (0.0, self._keys_typed))
            lag = _REMAP_SETTLE + _LAG_PER_KEY * (self._keys_typed - keys_then)
            wait = used_at + lag - now
            if wait > 0:
                self._d.sync()
                time.sleep(wait)
        self._d.change_keyboard_mapping(code, [(keysym, keysym)])
        self._d.sync()
        self._remapped[keysym] = code
        self._used[code] = (time.monotonic(), self._keys_typed)
        return code, 0


def _is_multimedia(keysym: int) -> bool:
    # XF86 media/launcher keys (0x1008FFxx): ~95 keycodes no desktop here needs, which
    # become spare slots for typing; an agent pressing one still gets it, remapped.
    return 0x1008FF00 <= keysym <= 0x1008FFFF


def _is_letter(keysym: int) -> bool:
    char = chr(keysym & 0xFFFFFF) if keysym >= 0x01000000 else chr(keysym) if keysym < 0x100 else ""
    return char.isalpha() and char.lower() != char.upper()
