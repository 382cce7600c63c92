"""Settings from the environment: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import pytest

from approvals.config import DEFAULT_REDIS_URL, DEFAULT_SLACK_API_URL, Settings
from approvals.errors import ConfigError


def test_an_empty_environment_gives_the_defaults():
    """With nothing set, every setting has its documented default."""
    assert Settings.from_env({}) == Settings(
        redis_url=DEFAULT_REDIS_URL,
        slack_bot_token=None,
        slack_signing_secret=None,
        slack_app_token=None,
        slack_api_url="https://slack.com/api/",
        channel=None,
        approvers=(),
        chain_limit=25,
        queue="approvals",
        llm_plugins=(),
        worker_class="Worker",
        job_timeout=600,
    )


def test_empty_strings_count_as_unset():
    """A variable set to the empty string falls back to its default."""
    names = [
        "REDIS_URL",
        "SLACK_BOT_TOKEN",
        "SLACK_API_URL",
        "APPROVALS_CHANNEL",
        "APPROVERS",
        "APPROVALS_CHAIN_LIMIT",
        "APPROVALS_QUEUE",
        "APPROVALS_WORKER_CLASS",
        "APPROVALS_JOB_TIMEOUT",
    ]
    assert Settings.from_env(dict.fromkeys(names, "")) == Settings.from_env({})


def test_every_variable_is_read():
    """Each documented variable lands in its setting."""
    settings = Settings.from_env(
        {
            "REDIS_URL": "rediss://user:pw@redis.internal:6380/2",
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_SIGNING_SECRET": "secret",
            "SLACK_APP_TOKEN": "xapp-1",
            "SLACK_API_URL": "http://127.0.0.1:9000/api/",
            "APPROVALS_CHANNEL": "C0123456789",
            "APPROVERS": "U1",
            "APPROVALS_CHAIN_LIMIT": "7",
            "APPROVALS_QUEUE": "approvals-test",
            "APPROVALS_LLM_PLUGINS": "tests.agents.scripted",
            "APPROVALS_WORKER_CLASS": "SimpleWorker",
            "APPROVALS_JOB_TIMEOUT": "30",
        }
    )
    assert settings == Settings(
        redis_url="rediss://user:pw@redis.internal:6380/2",
        slack_bot_token="xoxb-1",
        slack_signing_secret="secret",
        slack_app_token="xapp-1",
        slack_api_url="http://127.0.0.1:9000/api/",
        channel="C0123456789",
        approvers=("U1",),
        chain_limit=7,
        queue="approvals-test",
        llm_plugins=("tests.agents.scripted",),
        worker_class="SimpleWorker",
        job_timeout=30,
    )


def test_approvers_csv_ignores_spaces_and_empty_items():
    """APPROVERS is a comma list; spaces around ids and empty items are dropped."""
    settings = Settings.from_env({"APPROVERS": " UALICE ,UBOB,, UCAROL ,"})
    assert settings.approvers == ("UALICE", "UBOB", "UCAROL")


def test_llm_plugins_csv_is_parsed_the_same_way():
    """APPROVALS_LLM_PLUGINS is a comma list of module names."""
    settings = Settings.from_env({"APPROVALS_LLM_PLUGINS": "a.b , c,"})
    assert settings.llm_plugins == ("a.b", "c")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:9000/api", "http://127.0.0.1:9000/api/"),
        ("http://127.0.0.1:9000/api/", "http://127.0.0.1:9000/api/"),
    ],
)
def test_slack_api_url_always_ends_with_a_slash(url, expected):
    """The Slack API base URL gets a trailing slash, so method names append to it."""
    assert Settings.from_env({"SLACK_API_URL": url}).slack_api_url == expected


def test_the_default_slack_api_url_is_slack():
    """Without SLACK_API_URL the bot talks to slack.com."""
    assert Settings.from_env({}).slack_api_url == DEFAULT_SLACK_API_URL == "https://slack.com/api/"


@pytest.mark.parametrize("name", ["APPROVALS_CHAIN_LIMIT", "APPROVALS_JOB_TIMEOUT"])
@pytest.mark.parametrize("raw", ["ten", "1.5", "3s", "0x10"])
def test_a_bad_integer_names_its_variable(name, raw):
    """A number that is not a whole number stops start-up with the variable's name and value."""
    with pytest.raises(ConfigError, match=name) as info:
        Settings.from_env({name: raw})
    assert repr(raw) in str(info.value)


def test_integers_allow_surrounding_spaces():
    """A whole number with spaces around it is still read."""
    assert Settings.from_env({"APPROVALS_CHAIN_LIMIT": " 12 "}).chain_limit == 12


@pytest.mark.parametrize("worker_class", ["worker", "ThreadWorker", "rq.Worker"])
def test_a_bad_worker_class_names_its_variable(worker_class):
    """Only Worker and SimpleWorker are accepted, and the error says which variable is wrong."""
    with pytest.raises(ConfigError, match="APPROVALS_WORKER_CLASS"):
        Settings.from_env({"APPROVALS_WORKER_CLASS": worker_class})


def test_from_env_reads_the_process_environment_by_default(monkeypatch):
    """Without an explicit mapping, from_env reads os.environ."""
    monkeypatch.setenv("APPROVALS_CHANNEL", "C0FROMENV")
    monkeypatch.setenv("APPROVERS", "U1,U2")
    settings = Settings.from_env()
    assert settings.channel == "C0FROMENV"
    assert settings.approvers == ("U1", "U2")


@pytest.mark.parametrize(
    "name", ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "APPROVALS_CHANNEL"]
)
def test_require_names_the_missing_variable(name):
    """A missing required setting stops start-up with a message naming the variable."""
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({}).require(name)


def test_require_reports_the_first_missing_variable():
    """Present settings pass; the message names the first missing one asked for."""
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-1"})
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        settings.require("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "APPROVALS_CHANNEL")


def test_retention_and_the_archive_are_read():
    """Defaults: histories a week, records a month, no archive."""
    assert Settings.from_env({}).history_retention == 7 * 24 * 3600
    assert Settings.from_env({}).retention == 30 * 24 * 3600
    assert Settings.from_env({}).archive_url is None
    settings = Settings.from_env(
        {
            "APPROVALS_HISTORY_RETENTION": "3600",
            "APPROVALS_RETENTION": "86400",
            "APPROVALS_ARCHIVE_URL": "sqlite:///a.db",
        }
    )
    assert (settings.history_retention, settings.retention) == (3600, 86400)
    assert settings.archive_url == "sqlite:///a.db"


def test_a_negative_retention_names_its_variable():
    with pytest.raises(ConfigError, match="APPROVALS_RETENTION"):
        Settings.from_env({"APPROVALS_RETENTION": "-1"})
