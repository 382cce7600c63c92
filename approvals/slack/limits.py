"""Slack's limits that shape what we send, in one place (sources: Block Kit reference).

Builders truncate to these so that Slack never rejects a card because an agent proposed
something long.
"""

MESSAGE_BLOCKS = 50
MODAL_BLOCKS = 100
SECTION_TEXT = 3000
FIELD_TEXT = 2000
HEADER_TEXT = 150
CONTEXT_ELEMENTS = 10
BUTTON_VALUE = 2000
ACTION_ID = 255
BLOCK_ID = 255
CONFIRM_TEXT = 300
MODAL_TITLE = 24
PRIVATE_METADATA = 3000
PLAIN_TEXT_INPUT = 3000
#: Characters of each sibling tool result a card shows (a record keeps one more, so the card
#: can tell a cut result from one that fit).
SIBLING_PREVIEW = 200
#: Calls of one turn listed on its card, two blocks each (the call, then its buttons or its
#: decision): with the header, the fields, the "Approve all" row, the run's state and an
#: escalation notice, 20 keep the card under ``MESSAGE_BLOCKS``. Later calls are counted in
#: one line and decided from /agent-pending.
TURN_CALLS_SHOWN = 20
#: Characters of a preview's head a card shows (one section, with room for the fence and the
#: note saying how many lines are left for the modal).
PREVIEW_CARD_CHARS = 2500
#: Sections of a preview in one page of its modal: with the context line and the page
#: buttons, far under ``MODAL_BLOCKS``, and a page stays small enough to open at once.
PREVIEW_PAGE_SECTIONS = 20
#: chat.postMessage truncates ``text`` beyond this.
MESSAGE_TEXT = 40_000


def truncate(text: str, limit: int, note: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, ending with ``note`` when cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(note))] + note


#: chat.postMessage: Slack allows about one message a second in a channel (its "special"
#: tier), with short bursts above it; beyond that it may hide messages rather than refuse
#: them, so cards are paced per channel before Slack has to say so
#: (``approvals.store.pacing``; ``APPROVALS_SLACK_PACE`` overrides it).
POSTS_PER_SECOND = 1.0
#: Posts let through back to back in a channel that has been quiet. Slack tolerates short
#: bursts without saying how short; this stays small (``APPROVALS_SLACK_BURST``).
POST_BURST = 2
