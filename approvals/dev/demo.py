"""A demo agent that needs no model API key: it lists a folder, then asks to delete a file.

``approvals demo`` runs it so a new user sees a card within a second. Its model is
``approvals-demo`` (``approvals.dev.model``), offline and rule-based: turn one lists the folder
named in the prompt, turn two asks to delete the first object file it saw, turn three says
what happened, so a rejection's reason and an edit show up in its answer.

The tools only touch a throw-away workspace made for each run (marked with a file), even if
someone edits the path in the card to point elsewhere. The deletion's card shows its preview:
what the path holds (``approvals.previews.path_contents``), computed again after an Edit.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from approvals import Preview, previews, requires_approval
from approvals.calls.agent import Outcome, run_agent
from approvals.config import Settings
from approvals.dev import model
from approvals.dev.model import MODEL_ID

AGENT = "demo-cleanup"
#: The file that marks a folder as a demo workspace, where the tools may act.
MARKER = ".approvals-demo"
_PROMPT = "Tidy up {folder}: delete the object files you find there."
_FILES = {"app.o": "\x7fELF object", "util.o": "\x7fELF object", "app": "\x7fELF", "notes.txt": ""}


def list_files(path: str) -> str:
    """List the files in a folder of the demo workspace, one path a line."""
    folder = _inside_workspace(path)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)
    return "\n".join(str(p) for p in files) or "(empty)"


def _what_goes(path: str) -> Preview:
    """The card's preview of a deletion: the files it would remove, and their size."""
    return previews.path_contents(_inside_workspace(path))


@requires_approval(summary="Delete {path}", preview=_what_goes)
def delete_path(path: str) -> str:
    """Delete a file or a folder in the demo workspace."""
    target = _inside_workspace(path)
    if (target / MARKER).exists():
        raise ValueError(f"refusing to delete the demo workspace itself ({target})")
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    return f"deleted {target}"


def make_workspace(base: Path) -> Path:
    """A fresh folder ``base/<n>/build`` with a few build outputs; returns the build folder."""
    base.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name) for p in base.iterdir() if p.name.isdigit()]
    root = base / str(max(taken, default=0) + 1)
    build = root / "build"
    build.mkdir(parents=True)
    (root / MARKER).write_text("a throw-away folder made by `approvals demo`\n")
    for name, content in _FILES.items():
        (build / name).write_text(content)
    return build.resolve()


def run_demo(settings: Settings, base: Path, requested_by: str | None = None) -> Outcome:
    """Make a workspace and run the demo agent on it until it pauses for the deletion."""
    settings = replace(
        settings,
        llm_plugins=_with(settings.llm_plugins, model.__name__),
        tool_modules=_with(settings.tool_modules, __name__),
    )
    folder = make_workspace(base)
    return run_agent(
        MODEL_ID,
        _PROMPT.format(folder=folder),
        tools=[list_files, delete_path],
        system="You tidy build folders. Delete only build output, and ask before deleting.",
        agent=AGENT,
        requested_by=requested_by,
        settings=settings,
    )


def _with(names: tuple[str, ...], name: str) -> tuple[str, ...]:
    return names if name in names else (*names, name)


def _inside_workspace(path: str) -> Path:
    target = Path(path).expanduser().resolve()
    if not any((folder / MARKER).is_file() for folder in [target, *target.parents]):
        raise ValueError(f"{path} is not inside a demo workspace; the demo touches nothing else")
    if not target.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return target
