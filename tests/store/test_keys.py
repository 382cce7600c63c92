"""The key table is the whole of Redis: every name store.keys builds is a row of KEYS, every
row is built, and docs/architecture.md shows exactly that table."""

from __future__ import annotations

import inspect
import re

from approvals.cli import docs
from approvals.store import keys


def _pattern(name: str) -> re.Pattern[str]:
    """A row's name as a regular expression: each ``<...>`` part stands for any one part."""
    parts = re.split(r"(<[^>]+>)", name)
    return re.compile("".join("[^:]+" if p.startswith("<") else re.escape(p) for p in parts))


def _built() -> dict[str, str]:
    """What each constant and builder of store.keys names (builders called with sample parts)."""
    names = {n: v for n, v in vars(keys).items() if n.endswith("_KEY") and isinstance(v, str)}
    for name, function in vars(keys).items():
        if name.endswith("_key") and inspect.isfunction(function):
            sample = [
                f"S{p}" if p == "target" else p for p in inspect.signature(function).parameters
            ]
            names[name] = function(*sample)
    names["members_key(channel)"] = keys.members_key("C0CHANNEL")
    return names


def test_every_name_the_store_builds_is_one_row_of_the_table() -> None:
    """No key is written that the table does not list, and none matches two rows."""
    patterns = [_pattern(k.name) for k in keys.KEYS]
    for builder, name in _built().items():
        matching = [p.pattern for p in patterns if p.fullmatch(name)]
        assert len(matching) == 1, (builder, name, matching)


def test_every_row_of_the_table_is_built() -> None:
    """No row is left over from a key the code no longer writes."""
    built = list(_built().values())
    for row in keys.KEYS:
        assert any(_pattern(row.name).fullmatch(name) for name in built), row.name


def test_each_row_names_its_owner_in_the_store() -> None:
    """Every row says which store module reads and writes it, and that module exists."""
    import approvals.store as store

    for row in keys.KEYS:
        assert row.kind in {"hash", "string", "list", "zset", "stream"}, row
        assert hasattr(store, row.owner), row


def test_the_architecture_page_shows_the_table_as_generated() -> None:
    """docs/architecture.md holds exactly store.keys.table() between its markers."""
    page = docs.ARCHITECTURE_PATH.read_text(encoding="utf-8")
    assert page == docs.with_key_table(page), (
        f"docs/architecture.md's key table is out of date: run `{docs.REGENERATE}`"
    )
    assert keys.table() in page
