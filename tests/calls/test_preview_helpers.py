"""``compute_preview`` and the helpers of ``approvals.previews``, on real files and threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from approvals import Preview, previews
from approvals.calls.previews import compute_preview
from approvals.models.preview import MAX_PREVIEW_CHARS, PreviewKind, as_preview


def test_a_string_is_text_or_a_diff_and_a_preview_stays_as_it_is():
    """A plain string is text; one that is a unified diff is a diff; a Preview keeps its kind."""
    assert as_preview("12 rows").kind is PreviewKind.TEXT
    diff = previews.text_diff("a.txt", "x\n", "y\n").text
    assert as_preview(diff).kind is PreviewKind.DIFF
    assert as_preview(Preview("*bold*", "markdown")).kind is PreviewKind.MARKDOWN
    with pytest.raises(TypeError):
        as_preview(42)


def test_a_huge_preview_is_cut_to_the_cap_saying_so():
    """Beyond the documented cap the preview is cut, with a note; its digest is of what is kept."""
    kept = as_preview("x" * (MAX_PREVIEW_CHARS + 10))
    assert len(kept.text) == MAX_PREVIEW_CHARS and kept.text.endswith("characters)")


def test_compute_preview_returns_what_the_function_says():
    """The function gets the call's arguments as keywords."""
    arguments = {"path": "a", "force": True}
    preview = compute_preview(lambda path, force: f"{path} {force}", arguments, 5)
    assert preview == Preview("a True")


def test_a_failing_preview_says_why():
    """An exception becomes a failed preview naming it; nothing is raised."""

    def broken(name: str) -> str:
        raise LookupError(f"no {name}")

    preview = compute_preview(broken, {"name": "idx"}, 5)
    assert preview == Preview("preview failed: LookupError: no idx", PreviewKind.FAILED)


def test_a_hanging_preview_times_out_within_its_limit():
    """The answer comes at the time limit, whatever the function does after."""
    release = threading.Event()
    started = time.monotonic()
    preview = compute_preview(lambda: release.wait(30) and "late", {}, 0.3)
    elapsed = time.monotonic() - started
    release.set()
    assert preview == Preview("preview timed out after 0.3 s", PreviewKind.FAILED)
    assert 0.3 <= elapsed < 2


def test_an_async_preview_function_is_awaited():
    """A coroutine function's result is awaited in the preview's thread."""

    async def planned(table: str) -> str:
        return f"VACUUM {table}"

    assert compute_preview(planned, {"table": "events"}, 5) == Preview("VACUUM events")


def test_file_write_diff_against_the_file_as_it_is(tmp_path: Path):
    """An existing file: the lines that change; a new one: every line added."""
    path = tmp_path / "app.cfg"
    path.write_text("port = 80\nhost = a\n", encoding="utf-8")
    diff = previews.file_write_diff(path, "port = 8080\nhost = a\n")
    assert diff.kind is PreviewKind.DIFF
    assert "-port = 80\n+port = 8080\n host = a\n" in diff.text
    created = previews.file_write_diff(tmp_path / "new.txt", "hi\n")
    assert created.text.startswith("--- /dev/null") and "+hi\n" in created.text
    same = previews.file_write_diff(path, "port = 80\nhost = a\n")
    assert same.kind is PreviewKind.TEXT and "no change" in same.text


def test_path_contents_counts_sizes_and_names_the_first_files(tmp_path: Path):
    """How many files, their total size, the first names sorted, and how many more."""
    for n in range(25):
        (tmp_path / f"f{n:02}.o").write_bytes(b"x" * 100)
    text = previews.path_contents(tmp_path, names=3).text
    lines = text.splitlines()
    assert lines[0] == f"{tmp_path}: 25 files, 2.4 KB"
    assert lines[1:] == ["  f00.o", "  f01.o", "  f02.o", "  … and 22 more"]
    assert "does not exist" in previews.path_contents(tmp_path / "gone").text
