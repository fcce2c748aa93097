"""Helpers of the console's browser tests: Debian's chromium, headless, driven by Selenium
through chromium-driver (skipped locally, failed in CI, when either is missing), waits
bounded in time, and screenshots kept in the test's folder and, with STRATA_SCREENSHOTS=DIR,
in DIR too (how the README's picture is taken)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from required_testkit import require_module, require_tool

WAIT_S = 20.0
SCREENSHOTS_ENV = "STRATA_SCREENSHOTS"


@contextmanager
def chromium(tmp_path: Path, size: str = "1400,1000") -> Iterator[Any]:
    """A headless chromium WebDriver that keeps the browser console's log."""
    binary = require_tool("chromium", "apt-get install chromium (.ci/system-deps)")
    driver_path = require_tool("chromedriver", "apt-get install chromium-driver")
    webdriver = require_module("selenium.webdriver", "pip install -e '.[test]' (selenium)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={size}",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    """The first truthy value of check(), polled until `timeout`; else AssertionError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def screenshot(driver: Any, folder: Path, name: str) -> Path:
    """`name`.png of the window in `folder`, copied to $STRATA_SCREENSHOTS when set."""
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot {path}"
    extra = os.environ.get(SCREENSHOTS_ENV, "")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(extra) / path.name)
    return path


def images_loaded(driver: Any, images: list[Any]) -> bool:
    """Every <img> finished loading with a decoded picture (naturalWidth > 0)."""
    script = "return arguments[0].complete && arguments[0].naturalWidth"
    return bool(images) and all(driver.execute_script(script, i) for i in images)


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The browser console's errors since the last call (a failed load, a script error)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
