"""What the dashboard's browser tests share: Debian's chromium, polling, fake screenshots."""

from __future__ import annotations

import asyncio
import io
import shutil
import time

from PIL import Image, ImageDraw
from playwright.async_api import Page

# Debian's chromium (`infra/install.sh --dev`) driven by playwright's bundled driver: no
# browser download; a fresh profile per launch (playwright's default temporary one).
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


async def until(page: Page, js: str, timeout_s: float = 10.0) -> None:
    """Poll an expression in the page (wait_for_function's eval is blocked by the page's CSP)."""
    deadline = time.monotonic() + timeout_s
    while not await page.evaluate(js):
        assert time.monotonic() < deadline, f"never true: {js}"
        await asyncio.sleep(0.05)


def screenshot_png(text: str, color: tuple[int, int, int]) -> bytes:
    """A 1280x800 desktop-like PNG with a title bar, a window and a label."""
    image = Image.new("RGB", (1280, 800), (36, 52, 71))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 1280, 28), fill=(20, 20, 20))
    draw.rectangle((160, 120, 1120, 680), fill=color, outline=(255, 255, 255), width=3)
    draw.rectangle((160, 120, 1120, 150), fill=(60, 60, 60))
    draw.text((180, 128), f"mousepad - {text}", fill=(255, 255, 255))
    for row in range(8):
        draw.text((200, 180 + 50 * row), f"{text} line {row}", fill=(10, 10, 10))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()
