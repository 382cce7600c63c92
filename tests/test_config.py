"""Settings from the environment: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from approvals.config import DEFAULT_REDIS_URL, DEFAULT_SLACK_API_URL, NUMBERS, Settings
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


#: Every numeric setting: its attribute, values refused, and values accepted with what they
#: become. Written out here, apart from ``config.NUMBERS``, so a changed bound shows up twice.
NUMERIC: dict[str, tuple[str, list[str], dict[str, float]]] = {
    "APPROVALS_EXPIRES_IN": ("expires_in", ["0", "-1", "31536001", "nan"], {"1": 1, "2.5": 2.5}),
    "APPROVALS_WARN_BEFORE": ("warn_before", ["-0.1", "1", "2"], {"0": 0, "0.5": 0.5}),
    "APPROVALS_CHAIN_LIMIT": ("chain_limit", ["-5", "0", "1001", "2.5"], {"1": 1, "1000": 1000}),
    "APPROVALS_JOB_TIMEOUT": ("job_timeout", ["-1", "0", "604801"], {"1": 1, "604800": 604800}),
    "APPROVALS_WORKER_TTL": ("worker_ttl", ["0", "9", "86401"], {"10": 10, "420": 420}),
    "APPROVALS_MAINTENANCE_INTERVAL": ("maintenance_interval", ["0", "-5", "3601"], {"1": 1}),
    "APPROVALS_LEASE": ("lease", ["0", "2", "3601", "1.5"], {"3": 3, "15": 15}),
    "APPROVALS_RESULT_TTL": ("result_ttl", ["-3", "0", "31536001"], {"1": 1, "20": 20}),
    "APPROVALS_HISTORY_RETENTION": ("history_retention", ["-1", "315360001"], {"0": 0}),
    "APPROVALS_RETENTION": ("retention", ["-3", "315360001", "1.5"], {"0": 0, "86400": 86400}),
    "APPROVALS_RECEIPT_TTL": ("receipt_ttl", ["0", "-600", "86401"], {"1": 1, "86400": 86400}),
    "APPROVALS_AUDIT_TTL": ("audit_ttl", ["-1", "315360001"], {"0": 0, "3600": 3600}),
    "APPROVALS_API_MAX_BODY": ("api_max_body", ["1023", "0", "67108865"], {"1024": 1024}),
    "APPROVALS_API_RATE_LIMIT": ("api_rate_limit", ["0", "-1", "1000001"], {"1": 1}),
    "APPROVALS_REMIND_AFTER": ("remind_after", ["-1", "31536001", "inf"], {"0": 0, "0.5": 0.5}),
    "APPROVALS_ESCALATE_AFTER": ("escalate_after", ["-0.5", "1e9"], {"0": 0, "600": 600}),
    "APPROVALS_PREVIEW_TIMEOUT": ("preview_timeout", ["0", "0.05", "601"], {"0.5": 0.5, "5": 5}),
    "APPROVALS_STALE_RETRIES": ("stale_retries", ["-1", "101", "1.5"], {"0": 0, "2": 2}),
    "APPROVALS_MIN_REPLICAS": ("min_replicas", ["-1", "101", "1.5"], {"0": 0, "2": 2}),
    "APPROVALS_MIN_REPLICAS_TIMEOUT": (
        "min_replicas_timeout",
        ["0", "11"],
        {"0.25": 0.25, "5": 5.0},
    ),
    "APPROVALS_SLACK_PACE": ("slack_pace", ["0", "-1", "1001"], {"0.5": 0.5, "20": 20}),
    "APPROVALS_SLACK_BURST": ("slack_burst", ["0", "101", "1.5"], {"1": 1, "5": 5}),
}
#: Refused by every numeric setting, whatever its bounds.
NOT_NUMBERS = ["ten", "nan", "-inf", "1e999", "0x10", "12s", "9" * 400, "\u0661\u0662"]


def test_the_table_covers_every_numeric_setting():
    """A numeric setting added to the code without a row here fails this test."""
    assert set(NUMERIC) == set(NUMBERS)


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_every_numeric_setting_refuses_what_is_out_of_bounds_and_takes_the_rest(name):
    """Each bad value stops start-up with one line naming the variable and what it accepts
    (a whole number or a number, of what, from where to where); each good value is read."""
    attribute, bad, good = NUMERIC[name]
    for raw in bad + [r for r in NOT_NUMBERS if r]:
        with pytest.raises(ConfigError) as info:
            Settings.from_env({name: raw})
        message = str(info.value)
        assert message.startswith(f"{name} must be ") and "\n" not in message, message
        assert f"from {_plain(NUMBERS[name].low)} to {_plain(NUMBERS[name].high)}" in message
        assert len(message) < 160, message
    for raw, expected in good.items():
        assert getattr(Settings.from_env({name: raw}), attribute) == expected
        assert getattr(Settings.from_env({name: f" {raw} "}), attribute) == expected


def _plain(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REDIS_URL", "http://user:s3cret@redis.internal:6379/0"),
        ("REDIS_URL", "redis.internal:6379"),
        ("SLACK_API_URL", "ftp://slack.example/api/"),
        ("APPROVALS_API_URL", "127.0.0.1:8000"),
        ("APPROVALS_WEBHOOK_URLS", "https://ok.example/h,mailto:ops@example.com"),
        ("APPROVALS_ARCHIVE_URL", "/var/lib/approvals/archive.db"),
        ("APPROVALS_ARCHIVE_URL", "mysql://root:s3cret@db/approvals"),
    ],
)
def test_a_url_with_another_scheme_is_refused_without_repeating_it(name, value):
    """A URL setting names the schemes it takes; the refusal never shows the value, which
    may carry a password."""
    env = {name: value}
    if name == "APPROVALS_WEBHOOK_URLS":
        env["APPROVALS_WEBHOOK_SECRET"] = "whsec_" + "A" * 32
    with pytest.raises(ConfigError, match=f"^{name} must be a URL starting with ") as info:
        Settings.from_env(env)
    assert "s3cret" not in str(info.value)


def test_urls_of_every_accepted_scheme_are_read():
    """redis, rediss and unix sockets; http(s); SQLite and PostgreSQL with or without a driver."""
    settings = Settings.from_env(
        {
            "REDIS_URL": "unix:///run/redis.sock?db=2",
            "APPROVALS_ARCHIVE_URL": "postgresql+psycopg://u@/db?host=/run/pg",
            "APPROVALS_API_URL": "https://approvals.internal/",
        }
    )
    assert settings.redis_url == "unix:///run/redis.sock?db=2"
    assert settings.archive_url == "postgresql+psycopg://u@/db?host=/run/pg"
    assert settings.api_url == "https://approvals.internal"
    assert Settings.from_env({"APPROVALS_ARCHIVE_URL": "sqlite:///a.db"}).archive_url


def test_the_operations_guide_lists_every_bound_as_the_code_has_it():
    """docs/operations.md's table of numeric settings says what the code accepts."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    rows = dict(re.findall(r"^\| `(APPROVALS_[A-Z_]+)` \| (a [^|]+?) \|$", text, re.MULTILINE))
    assert rows == {name: bounds.describe() for name, bounds in NUMBERS.items()}


@pytest.mark.parametrize(
    ("secret", "says"),
    [
        ("s3cretvalue", "must be a Standard Webhooks secret (whsec_...)"),
        ("whsec_s3cret-value_url-safe+AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "is not base64"),
        ("whsec_", "holds 0 bytes; a Standard Webhooks secret holds 24 to 64"),
        ("whsec_" + "A" * 24, "holds 18 bytes"),
        ("whsec_" + "A" * 32 + ",whsec_" + "A" * 100, "holds 75 bytes"),
    ],
)
def test_a_webhook_secret_receivers_could_not_read_is_refused_without_repeating_it(secret, says):
    """Each comma-separated secret must be whsec_ and the standard base64 of 24 to 64 bytes;
    the refusal names the variable, says how to make one, and never shows the value."""
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"APPROVALS_WEBHOOK_SECRET": secret})
    message = str(refused.value)
    assert message.startswith("APPROVALS_WEBHOOK_SECRET") and says in message
    assert "openssl rand -base64 32" in message
    assert "s3cret" not in message and "AAAA" not in message


def test_webhook_secrets_are_read_newest_first():
    """During a rotation the variable holds the new secret, then the old: both are kept."""
    new, old = "whsec_" + "B" * 32, "whsec_" + "A" * 32
    settings = Settings.from_env({"APPROVALS_WEBHOOK_SECRET": f"{new}, {old}"})
    assert settings.webhook_secrets == (new, old)


def test_sentinels_are_read_with_their_service_and_credentials():
    """The Sentinels' addresses (IPv6 in brackets), the service, and their own user, password
    and TLS; ``REDIS_URL`` stays what it was (its database, user, password and TLS count)."""
    settings = Settings.from_env(
        {
            "REDIS_SENTINELS": "s1:26379, [::1]:26380",
            "REDIS_SENTINEL_SERVICE": "approvals",
            "REDIS_SENTINEL_USERNAME": "watcher",
            "REDIS_SENTINEL_PASSWORD": "pw",
            "REDIS_SENTINEL_TLS": "true",
            "REDIS_URL": "rediss://app:pw@ignored:6379/4",
        }
    )
    assert settings.redis_sentinels == (("s1", 26379), ("::1", 26380))
    assert settings.redis_sentinel_service == "approvals"
    assert (settings.redis_sentinel_username, settings.redis_sentinel_password) == ("watcher", "pw")
    assert settings.redis_sentinel_tls is True
    assert Settings.from_env({}).redis_sentinels == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REDIS_SENTINELS": "s1"}, "REDIS_SENTINELS takes comma-separated host:port"),
        ({"REDIS_SENTINELS": "s1:port"}, "REDIS_SENTINELS takes comma-separated host:port"),
        ({"REDIS_SENTINELS": "s1:70000"}, "REDIS_SENTINELS takes comma-separated host:port"),
        ({"REDIS_SENTINELS": "s1:26379"}, "set REDIS_SENTINEL_SERVICE"),
        (
            {
                "REDIS_SENTINELS": "s1:26379",
                "REDIS_SENTINEL_SERVICE": "a",
                "REDIS_URL": "unix:///run/redis.sock",
            },
            "REDIS_URL must be redis:// or rediss://",
        ),
        ({"REDIS_SENTINEL_TLS": "maybe"}, "REDIS_SENTINEL_TLS must be 1 or 0"),
    ],
)
def test_bad_sentinel_settings_stop_start_up_naming_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)
