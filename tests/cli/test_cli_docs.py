"""docs/cli.md is generated from the commands' --help and must match it."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from approvals.cli import docs as cli_docs
from approvals.cli.main import cli


def test_cli_reference_matches_the_commands_help() -> None:
    """docs/cli.md is exactly what the generator writes from today's commands."""
    written = cli_docs.DOCS_PATH.read_text(encoding="utf-8")
    assert written == cli_docs.render(), (
        f"docs/cli.md is out of date with the CLI: run `{cli_docs.REGENERATE}` and commit it"
    )


def test_every_command_has_a_section() -> None:
    """Each command of the approvals group gets its own heading and help block."""
    text = cli_docs.render()
    assert "## `approvals`\n" in text
    for name in cli.list_commands(click.Context(cli)):
        assert f"## `approvals {name}`\n" in text


def test_nested_groups_are_walked() -> None:
    """Subcommands of subgroups are documented under their full command path."""

    @click.group()
    def tool() -> None:
        """A tool."""

    @tool.group()
    def keys() -> None:
        """Manage keys."""

    @keys.command(name="list")
    @click.option("--json", is_flag=True, help="As JSON.")
    def keys_list(json: bool) -> None:
        """List the keys."""

    text = cli_docs.render(tool, prog_name="tool")
    assert "## `tool keys list`\n\n```text\nUsage: tool keys list [OPTIONS]" in text
    assert "--json  As JSON." in text


def test_check_reports_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--check`` exits 1 and names the command to run when the file differs."""
    stale = tmp_path / "cli.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(cli_docs, "DOCS_PATH", stale)
    assert cli_docs.main(["--check"]) == 1
    assert cli_docs.REGENERATE in capsys.readouterr().err
    assert cli_docs.main([]) == 0
    assert cli_docs.main(["--check"]) == 0
