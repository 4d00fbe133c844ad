"""Screenshots of one X display with mss, encoded as PNG, with the mouse pointer drawn in.

Xvfb does not draw the pointer into the framebuffer; OSWorld's screenshots show it, so the
pointer image (XFixes, through mss's `with_cursor`) is composited in (about 1 ms).
"""

from __future__ import annotations

import mss
import mss.tools

__all__ = ["Grabber", "PNG_LEVEL"]

PNG_LEVEL = 1  # zlib level: 1 is several times faster than 6 for ~1.3x the bytes


class Grabber:
    """Grabs the whole screen of one display; use from one thread."""

    def __init__(self, display_name: str) -> None:
        factory = getattr(mss, "MSS", None) or mss.mss  # mss 10 renamed the class
        self._sct = factory(display=display_name, with_cursor=True)

    def raw(self) -> tuple[bytes, tuple[int, int]]:
        """Return the screen as RGB bytes and its (width, height)."""
        shot = self._sct.grab(self._sct.monitors[0])
        return shot.rgb, shot.size

    def png(self) -> bytes:
        """Return the screen as PNG bytes."""
        rgb, size = self.raw()
        return mss.tools.to_png(rgb, size, level=PNG_LEVEL)

    def close(self) -> None:
        """Release the X connection."""
        self._sct.close()
