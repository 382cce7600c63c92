"""Secrets stay out of Slack: masked on the card, the list, the modals and the thread."""

from __future__ import annotations

import base64
import hashlib
import json

import jwt
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from approvals import run_agent
from approvals.cli.main import cli
from approvals.config import Settings
from approvals.models import Status
from approvals.models.grant import Grant, Scope, canonical
from approvals.secrets import DEFAULT_SECRET_NAMES, MASK, MAX_SCANNED, mask, secret_names
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.conftest import CHANNEL
from tests.e2e import card_of, click, pending_command, submit_edit, tool_runs, wait_status
from tests.factories import make_approval

PASSWORD, KEY = "hunter2-S3cret", "sk-live-0123456789"


def test_secret_arguments_are_masked_everywhere_people_look(services, slack, env, conn):
    """The card, /agent-pending, the Edit modal and the thread never show a secret value."""
    arguments = {"user": "ada", "new_password": PASSWORD, "api_key": KEY}
    prompt = script(calls(("set_password", arguments)), say("done"))
    pause_id = run_agent("scripted", prompt, tools=[tools.set_password]).pause_id
    card = card_of(slack, pause_id)
    shown_card = json.dumps(card.blocks, ensure_ascii=False)
    assert "ada" in shown_card and "••••" in shown_card

    pending_command(slack, services.bot_url)
    click(slack, services.bot_url, "edit", pause_id, card_ts=card.ts)
    modal = slack.wait_for(lambda: slack.views())[0]["view"]
    inputs = [b["block_id"] for b in modal["blocks"] if b["type"] == "input"]
    assert inputs == ["arg-user"]  # a secret cannot be edited: the modal would show it

    submit_edit(services.bot_url, pause_id, {"user": "grace"})
    done = wait_status(conn, pause_id, Status.COMPLETED)
    (run,) = tool_runs(env, "set_password")
    assert run["arguments"] == {"user": "grace", "new_password": PASSWORD, "api_key": KEY}
    assert done.result.executed_arguments["new_password"] == PASSWORD  # the record keeps it

    slack.wait_for(lambda: len(slack.thread(CHANNEL, card.ts)) >= 2)
    everything_slack_saw = json.dumps(slack.calls()) + json.dumps(slack.responses())
    assert PASSWORD not in everything_slack_saw and KEY not in everything_slack_saw

    shown = CliRunner().invoke(cli, ["show", pause_id])
    assert PASSWORD in shown.output  # operators, who hold Redis access, see the record


# --- by name and by value ------------------------------------------------------------------------

#: Made at import, so no secret-looking literal sits in the source.
JWT = jwt.encode(
    {"sub": "ada", "scope": "admin"}, "a signing key of the tests, 32 bytes", algorithm="HS256"
)
PEM = (
    Ed25519PrivateKey.generate()
    .private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    .decode()
)
HIGH_ENTROPY = base64.b64encode(hashlib.sha256(b"approvals").digest()).decode()
LOOKS_SECRET = {
    "an OpenAI key": "sk-proj-" + base64.b64encode(hashlib.sha256(b"openai").digest()).decode(),
    "a Slack bot token": "xoxb-123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "a GitHub token": "ghp_" + hashlib.sha256(b"github").hexdigest()[:36],
    "an AWS access key id": "AKIA" + "IOSFODNN7EXAMPLE",
    "a JWT": JWT,
    "a PEM private key": PEM,
    "a high-entropy string": HIGH_ENTROPY,
    "a URL with a password": "postgres://app:" + "hunter2" + "@db.internal:5432/app",
    "a bearer header": f"curl -H 'Authorization: Bearer {JWT}' https://api.example.com",
}
LOOKS_ORDINARY = {
    "a vault path": "prod/db/users",
    "an S3 key": "reports/2024/q1.csv",
    "a file path": "/home/ada/projects/build/app.o",
    "a sentence": "Delete the build folder before the release",
    "a UUID": "f47ac10b-58cc-4372-a567-0e02b3c479d4",
    "a short commit": "9fceb02",
    "a public IP": "8.8.8.8",
    "a URL": "https://example.com/docs?page=2",
    "a cache key": "cache:user:42:profile",
}


@pytest.mark.parametrize("value", LOOKS_SECRET.values(), ids=LOOKS_SECRET.keys())
def test_a_value_that_looks_secret_is_masked_whatever_its_name(value):
    """Known token formats, key blocks and high-entropy strings are masked by value."""
    assert mask({"key": value, "path": "a/b"}, ()) == {"key": MASK, "path": "a/b"}


@pytest.mark.parametrize("value", LOOKS_ORDINARY.values(), ids=LOOKS_ORDINARY.keys())
def test_an_ordinary_value_is_shown(value):
    """What a reviewer must see to decide (paths, keys of a store, ids, addresses) stays."""
    assert mask({"key": value}, ()) == {"key": value}


def test_a_bare_key_is_not_a_secret_name_but_the_usual_secret_names_are():
    """``key`` names a key; ``api_key``, ``apiKey``, ``github_token``, ``db-password`` name
    secrets (a pattern's parts in a row), and ``keyboard`` or ``author`` nothing."""
    names = ["key", "cache_key", "keyboard", "author", "api_key", "apiKey", "APIKEY"]
    names += ["github_token", "db-password", "privateKey", "aws_access_key_id", "auth"]
    assert secret_names(names, DEFAULT_SECRET_NAMES) == (
        "APIKEY", "apiKey", "api_key", "auth", "aws_access_key_id", "db-password",
        "github_token", "privateKey",
    )  # fmt: skip


def test_secret_names_with_key_mask_every_key_as_before():
    """``APPROVALS_SECRET_NAMES=key`` masks every name with a ``key`` part, values unread."""
    settings = Settings.from_env({"APPROVALS_SECRET_NAMES": "key"})
    hidden = secret_names(["key", "cache_key", "keyboard", "path"], settings.secret_names)
    assert hidden == ("cache_key", "key")
    assert mask({"key": "prod/db/users", "path": "a"}, hidden) == {"key": MASK, "path": "a"}


def test_a_secret_nested_in_objects_and_lists_is_masked_and_its_neighbours_kept():
    """Inside objects and lists, a secret value or a secret-named field is masked alone."""
    arguments = {
        "request": {"url": "https://api.example.com", "headers": {"Authorization": JWT}},
        "steps": [{"run": "make"}, {"env": {"DB_PASSWORD": "hunter2"}}, HIGH_ENTROPY, 3],
    }
    assert mask(arguments, ()) == {
        "request": {"url": "https://api.example.com", "headers": {"Authorization": MASK}},
        "steps": [{"run": "make"}, {"env": {"DB_PASSWORD": MASK}}, MASK, 3],
    }


def test_a_value_too_long_to_read_is_masked_unread():
    """A string longer than the detector reads is masked, not shown unchecked."""
    assert mask({"body": "x" * (MAX_SCANNED + 1)}, ()) == {"body": MASK}
    assert mask({"body": "x" * MAX_SCANNED}, ()) == {"body": "x" * MAX_SCANNED}


def test_a_masked_value_cannot_be_edited_and_an_ordinary_key_can():
    """The Edit modal offers a key that is shown, never one whose value was masked."""
    shown = make_approval(arguments={"key": "prod/db/users"})
    assert "key" in shown.editable
    hidden = make_approval(arguments={"key": JWT})
    assert "key" not in hidden.editable and hidden.shown_arguments == {"key": MASK}


def test_a_summary_filled_in_with_a_masked_value_masks_it_too():
    """The gate's summary (``"Delete {key}"``) shows a masked value masked, the rest as is."""
    nested = {"env": {"DB_PASSWORD": "hunter2", "HOST": "db1"}}
    approval = make_approval(
        arguments={"key": JWT, "path": "a/b", "spec": nested},
        summary=f"Delete {JWT} at a/b with {nested}",
    )
    shown_nested = {"env": {"DB_PASSWORD": MASK, "HOST": "db1"}}
    assert approval.shown_summary == f"Delete {MASK} at a/b with {shown_nested}"
    assert make_approval(summary="Delete a/b").shown_summary == "Delete a/b"


def test_a_grant_for_these_arguments_does_not_show_a_secret_on_the_home_tab():
    """A grant scoped to arguments describes them masked."""
    grant = Grant(
        id="g1",
        tool="delete_key",
        agent="ops",
        requester="",
        scope=Scope.ARGUMENTS,
        arguments=canonical({"key": JWT, "api_key": "plain", "path": "a/b"}),
        created_by="UALICE",
        created_at=0.0,
        approval_id="a1",
    )
    described = grant.describe()
    assert JWT not in described and "plain" not in described and '"path":"a/b"' in described


def test_a_bare_key_reaches_the_card_and_a_secret_value_never_reaches_slack(
    services, slack, env, conn
):
    """End to end: ``delete_key(key="prod/db/users")`` shows the key on the card Slack got;
    ``delete_key(key=<JWT>)`` is masked in everything Slack was sent."""
    shown = run_agent(
        "scripted", script(calls(("delete_key", {"key": "prod/db/users"})), say("done")),
        tools=[tools.delete_key],
    ).pause_id  # fmt: skip
    card = _text_of(card_of(slack, shown).blocks)
    assert '"key": "prod/db/users"' in card and "Delete prod/db/users" in card

    hidden = run_agent(
        "scripted", script(calls(("delete_key", {"key": JWT})), say("done")),
        tools=[tools.delete_key],
    ).pause_id  # fmt: skip
    assert f'"key": "{MASK}"' in _text_of(card_of(slack, hidden).blocks)
    assert JWT not in json.dumps(slack.calls()) + json.dumps(slack.responses())


def _text_of(blocks):
    """The text of a message's sections, as a person reads it."""
    return "\n".join(b["text"]["text"] for b in blocks if isinstance(b.get("text"), dict))
