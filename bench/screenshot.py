"""``python -m bench.screenshot [--out docs/sandbox.png]``: the docs' picture of the sandbox,
taken from the real thing, never drawn by hand.

Starts ``approvals dev`` in a temporary folder (its own Redis, the bot, a worker and the
sandbox), runs ``approvals demo`` until its card waits for a decision, opens the sandbox in
Debian's headless Chromium (packages ``chromium`` and ``chromium-driver``; with
``fonts-noto-color-emoji`` the card's emoji are drawn too) and saves the page. The browser
tests open Chromium the same way (``chromium``).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.dev.conftest import start_dev

DOCS_PICTURE = Path("docs/sandbox.png")
#: The picture's size in pixels: the sidebar, and one card with room around it.
SIZE = (1200, 480)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,860",
]
_CARD = '#messages .msg[data-container="message"] button[data-action-id="approval_approve"]'


def chromium_paths() -> tuple[str, str] | None:
    """Debian's Chromium and its driver, when both are installed."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with its own profile folder, quit on exit."""
    paths = chromium_paths()
    if paths is None:
        raise RuntimeError("Debian's chromium and chromium-driver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    try:
        yield browser
    finally:
        browser.quit()


def capture(browser: webdriver.Chrome, url: str, out: Path) -> Path:
    """Open the sandbox at ``url``, wait for the bot and a card waiting for a decision, and
    save the page, ``SIZE`` pixels, to ``out``."""
    width, height = SIZE
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        browser.get(url)
        ignored = (NoSuchElementException, StaleElementReferenceException)
        wait = WebDriverWait(browser, 30, poll_frequency=0.05, ignored_exceptions=ignored)
        wait.until(lambda b: b.find_element(By.ID, "bot-status").text == "bot connected")
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, _CARD))
        out.parent.mkdir(parents=True, exist_ok=True)
        if not browser.save_screenshot(str(out)):
            raise RuntimeError(f"Chromium could not save {out}")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.screenshot", description=__doc__)
    parser.add_argument("--out", type=Path, default=DOCS_PICTURE, help="where to save it")
    out = parser.parse_args(argv).out.resolve()
    with tempfile.TemporaryDirectory(prefix="approvals-") as folder:
        root = Path(folder)
        dev = start_dev(root / ".approvals", root / "dev.log")
        try:
            dev.demo()
            with chromium(root / "chromium") as browser:
                capture(browser, dev.url, out)
        finally:
            dev.stop()
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
