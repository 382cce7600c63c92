"""The sandbox in a real headless Chromium: a person approves, edits and rejects the demo
agent's request, uses /agent-pending and the Home tab, and sees what Slack would show.

Chromium and its driver are Debian's (``.ci/run`` installs them). Screenshots go to
``artifacts/`` (kept by CI); ``docs/sandbox.png`` in the README is made by
``python -m bench.screenshot`` the same way.
"""

from __future__ import annotations

import getpass
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from slack_sdk import WebClient

from approvals.dev.sandbox.server import Sandbox
from approvals.slack.cards import (
    APPROVE_ACTION,
    APPROVE_SCOPE_ACTION,
    EDIT_ACTION,
    REJECT_ACTION,
    RESPOND_ACTION,
    build_card,
)
from bench.screenshot import SIZE, capture, chromium, chromium_paths
from tests.dev.conftest import ROOT
from tests.factories import make_approval

ARTIFACTS = ROOT / "artifacts"
CHANNEL = "C0APPROVALS"
ME = getpass.getuser()  # the sandbox's first person is named after the login running it


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if chromium_paths() is None:
        why = "Debian's chromium and chromium-driver are not installed (.ci/run installs them)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    with chromium(tmp_path_factory.mktemp("chromium")) as chrome:
        yield chrome


@pytest.fixture
def page(browser, dev):
    """The sandbox, open and connected to the bot, as ``approvals dev`` serves it."""
    browser.get(dev.url)
    until(browser, lambda: browser.find_element(By.ID, "bot-status").text == "bot connected")
    return browser


def until(browser, condition: Callable[[], Any], timeout: float = 20) -> Any:
    """Wait for what a person would wait for; the page redraws, so elements go stale."""
    ignored = (NoSuchElementException, StaleElementReferenceException)
    wait = WebDriverWait(browser, timeout, poll_frequency=0.05, ignored_exceptions=ignored)
    return wait.until(lambda _: condition())


def card_ts(browser, approval_id: str) -> str:
    """The ts of the card whose buttons decide ``approval_id`` (waits for it to appear)."""
    selector = f'#messages .msg[data-container="message"] button[data-value="{approval_id}"]'
    button = until(browser, lambda: browser.find_element(By.CSS_SELECTOR, selector))
    holder = button.find_element(By.XPATH, "ancestor::div[@data-container='message']")
    return str(holder.get_attribute("data-ts"))


def card(browser, ts: str) -> WebElement:
    return browser.find_element(By.CSS_SELECTOR, f'#messages .msg[data-ts="{ts}"]')


def click(browser, selector: str, by: str = By.CSS_SELECTOR) -> None:
    """Click once the element is there; the page redraws panes as messages arrive."""

    def attempt() -> bool:
        browser.find_element(by, selector).click()
        return True

    until(browser, attempt)


def click_in_card(browser, ts: str, selector: str) -> None:
    click(browser, f'#messages .msg[data-ts="{ts}"] {selector}')


def click_button(browser, ts: str, action: str) -> None:
    click_in_card(browser, ts, f'button[data-action-id="{action}"]')


def confirm(browser, expected: str) -> None:
    dialog = until(
        browser, lambda: browser.find_element(By.CSS_SELECTOR, "dialog.bk-confirm[open]")
    )
    assert expected in dialog.text
    dialog.find_element(By.CSS_SELECTOR, "[data-confirm-ok]").click()


def modal(browser) -> WebElement:
    return until(browser, lambda: browser.find_element(By.CSS_SELECTOR, "#modal-layer .bk-modal"))


def modal_closed(browser) -> bool:
    return not browser.find_element(By.ID, "modal-layer").is_displayed()


def open_thread(browser, ts: str, text: str) -> str:
    """Open the card's thread; returns its text once it shows ``text``."""
    click_in_card(browser, ts, "button.replies")
    pane = lambda: browser.find_element(By.ID, "thread")  # noqa: E731
    return until(browser, lambda: text in pane().text and pane().text)


def has_buttons(browser, ts: str) -> bool:
    return (
        until(
            browser,
            lambda: (card(browser, ts).find_elements(By.CSS_SELECTOR, "button[data-action-id]"),),
        )[0]
        != []
    )


def card_shows(browser, ts: str, text: str) -> str:
    return until(browser, lambda: text in card(browser, ts).text and card(browser, ts).text)


def nothing_unrendered(browser) -> bool:
    return not browser.find_elements(By.CSS_SELECTOR, ".bk-unknown")


def shot(browser, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    assert browser.save_screenshot(str(path))
    return path


def build_of(dev) -> Path:
    runs = sorted((dev.data_dir / "demo").iterdir(), key=lambda p: int(p.name))
    return runs[-1] / "build"


def test_approve_runs_the_tool_and_shows_the_thread_and_the_updated_card(page, dev):
    approval_id = dev.run_demo()
    build = build_of(dev)
    ts = card_ts(page, approval_id)
    text = until(page, lambda: card(page, ts).text)
    for part in ("Approval needed: delete_path", f"Delete {build}/app.o", "demo-cleanup"):
        assert part in text
    assert "Waiting for a decision" in text and "@teammate" in text
    assert nothing_unrendered(page)
    shot(page, "sandbox-card.png")

    click_button(page, ts, "approval_approve")
    confirm(page, "Run delete_path now?")
    card_shows(page, ts, "Completed")
    assert not has_buttons(page, ts)
    thread = open_thread(page, ts, f"Done: deleted {build}/app.o.")
    assert f"Approved by @{ME}" in thread
    shot(page, "sandbox-approved.png")
    assert not (build / "app.o").exists() and (build / "util.o").exists()


def demo_modal(page, dev, action: str) -> tuple[Path, str, WebElement]:
    """Run the demo and click ``action`` on its card: its build folder, card ts and modal."""
    approval_id = dev.run_demo()
    ts = card_ts(page, approval_id)
    click_button(page, ts, action)
    return build_of(dev), ts, modal(page)


def submit(page, form: WebElement) -> None:
    form.find_element(By.CSS_SELECTOR, "[data-modal-submit]").click()
    until(page, lambda: modal_closed(page))


def test_edit_fills_the_modal_and_runs_the_edited_call(page, dev):
    build, ts, form = demo_modal(page, dev, "approval_edit")
    assert "Edit and approve" in form.text
    path = form.find_element(By.CSS_SELECTOR, '[data-input][data-block-id="arg-path"]')
    assert path.get_attribute("value") == f"{build}/app.o"
    path.clear()
    path.send_keys(f"{build}/util.o")
    shot(page, "sandbox-edit-modal.png")
    submit(page, form)

    card_shows(page, ts, "Completed")
    thread = open_thread(page, ts, f"deleted {build}/util.o")
    assert f"Approved with edits by @{ME}" in thread
    assert f'- path: "{build}/app.o"' in thread and f'+ path: "{build}/util.o"' in thread
    assert (build / "app.o").exists() and not (build / "util.o").exists()
    assert nothing_unrendered(page)


def test_reject_asks_for_a_reason_and_the_agent_is_told(page, dev):
    build, ts, form = demo_modal(page, dev, "approval_reject")
    assert "Reject" in form.text
    reason = form.find_element(By.CSS_SELECTOR, "textarea[data-input]")
    reason.send_keys("keep the objects for the debugger")
    submit(page, form)

    text = card_shows(page, ts, f"rejected by @{ME}")
    assert "keep the objects for the debugger" in text
    assert not has_buttons(page, ts)
    thread = open_thread(page, ts, "I left the files alone")
    assert f"Rejected by @{ME}" in thread and "keep the objects for the debugger" in thread
    assert (build / "app.o").exists() and (build / "util.o").exists()
    shot(page, "sandbox-rejected.png")


def test_agent_pending_and_the_home_tab_list_what_waits(page, dev):
    """/agent-pending answers only you, with buttons that work; Home lists the same."""
    approval_id = dev.run_demo()
    ts = card_ts(page, approval_id)
    page.find_element(By.ID, "home-link").click()
    home_button = f'#messages .bk-home button[data-value="{approval_id}"]'
    until(page, lambda: page.find_element(By.CSS_SELECTOR, home_button))
    assert "waiting" in until(page, lambda: page.find_element(By.CSS_SELECTOR, ".bk-home").text)
    shot(page, "sandbox-home.png")

    click(page, "#channels .nav-item")
    composer = until(page, lambda: page.find_element(By.ID, "composer-input"))
    card_ts(page, approval_id)
    composer.send_keys("/agent-pending", Keys.ENTER)
    listing = f"//div[contains(@class,'ephemeral')][.//button[@data-value='{approval_id}']]"
    text = until(page, lambda: page.find_element(By.XPATH, listing).text)
    assert "Only visible to you" in text
    click(page, f"{listing}//button[@data-action-id='approval_approve']", By.XPATH)
    confirm(page, "Run delete_path now?")
    card_shows(page, ts, "Completed")
    assert nothing_unrendered(page)


# --- layout: the bot's own cards, posted to a sandbox with no bot behind it ---------------------


@pytest.fixture(scope="module")
def cards_page(browser):
    """A sandbox alone, and a function that posts the bot's own Block Kit to it (as the bot
    would, through the Web API) and returns the message's ts once the page shows it."""
    sandbox = Sandbox(channel=CHANNEL, channel_name="approvals", users={"U0DEV": ME})
    sandbox.start(port=0)
    web = WebClient(token=sandbox.token, base_url=sandbox.api_url)

    def post(blocks: list[dict[str, Any]], thread_ts: str | None = None) -> str:
        sent = web.chat_postMessage(
            channel=CHANNEL, blocks=blocks, text="a card", thread_ts=thread_ts
        )
        return str(sent["ts"])

    browser.get(sandbox.url)
    yield post
    sandbox.stop()


def geometry(browser, element: WebElement) -> dict[str, float]:
    """Where an element is drawn, and how wide its content is against its box."""
    return browser.execute_script(  # type: ignore[no-any-return]
        "const r = arguments[0].getBoundingClientRect();"
        "return {top: r.top, bottom: r.bottom, height: r.height,"
        " scroll: arguments[0].scrollWidth, client: arguments[0].clientWidth};",
        element,
    )


def test_a_cards_buttons_and_scope_menu_sit_in_one_row_as_in_slack(browser, cards_page):
    """Approve, "Approve for…", Reject, Edit and Respond share one row (Slack wraps an
    actions block only when its elements do not fit); the menu is not drawn full width."""
    ts = cards_page(build_card(make_approval()))
    actions = until(browser, lambda: card(browser, ts).find_element(By.CSS_SELECTOR, ".bk-actions"))
    elements = actions.find_elements(By.CSS_SELECTOR, "[data-action-id]")
    assert [e.get_attribute("data-action-id") for e in elements] == [
        APPROVE_ACTION, APPROVE_SCOPE_ACTION, REJECT_ACTION, EDIT_ACTION, RESPOND_ACTION,
    ]  # fmt: skip
    rows = [geometry(browser, e) for e in elements]
    assert max(r["top"] for r in rows) - min(r["top"] for r in rows) < 4, rows
    assert geometry(browser, actions)["height"] < 2 * max(r["height"] for r in rows)


def test_a_300_character_path_wraps_in_the_thread_instead_of_overflowing(browser, cards_page):
    """A long unbroken path on the card, its summary and a reply wraps inside the thread pane
    and the channel: nothing is wider than its box."""
    path = "/srv/builds/" + "averylongfoldername_" * 15 + "app.o"
    assert len(path) >= 300 and " " not in path
    approval = make_approval(arguments={"path": path}, summary=f"Delete {path}")
    ts = cards_page(build_card(approval))
    cards_page(
        [{"type": "section", "text": {"type": "mrkdwn", "text": f"Done: deleted `{path}`."}}], ts
    )
    click_in_card(browser, ts, "button.replies")
    thread = until(browser, lambda: browser.find_element(By.ID, "thread"))
    until(browser, lambda: "Done: deleted" in thread.text)
    for pane in (thread, browser.find_element(By.ID, "messages")):
        boxes = [pane, *pane.find_elements(By.CSS_SELECTOR, ".msg, .msg *")]
        wide = [
            (b.tag_name, b.get_attribute("class"), g)
            for b in boxes
            if (g := geometry(browser, b))["scroll"] > g["client"] + 1 and g["client"] > 0
        ]
        assert not wide, wide
    shot(browser, "sandbox-long-path.png")


def test_the_docs_picture_is_taken_from_the_sandbox_with_the_card_waiting(page, dev, tmp_path):
    """``python -m bench.screenshot`` saves the sandbox, with a card that waits, at its size."""
    dev.run_demo()
    out = capture(page, dev.url, tmp_path / "sandbox.png")
    header = out.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == SIZE
