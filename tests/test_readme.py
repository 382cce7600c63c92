"""The README stays what a newcomer reads in ten minutes, and CI runs the test command it gives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_at_most_350_lines():
    assert len(README.splitlines()) <= 350


def test_ci_runs_the_test_command_the_readme_gives():
    given = re.search(r"To run the tests.*?```sh\n(.+?)\n```", README, re.DOTALL)
    assert given is not None, "the README names no test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert given.group(1).strip() in [line.strip() for line in ci]


def test_every_doc_the_readme_links_exists():
    for link in re.findall(r"\]\(((?:docs/)?[\w./-]+\.(?:md|png|yml))(?:#[\w-]+)?\)", README):
        assert (ROOT / link).is_file(), link


def test_every_test_file_the_docs_name_exists():
    """The guarantees cite their proofs by test file: a moved test must take its citation along."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for cited in re.findall(r"\btests/[\w/]+\.py\b", page.read_text(encoding="utf-8")):
            assert (ROOT / cited).is_file(), f"{page.name} cites {cited}, which does not exist"
