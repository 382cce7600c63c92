"""Resolving llm models, once per process.

llm's plugin loading is not thread-safe on first use (concurrent ``get_model`` calls failed
with ``UnknownModelError``), so each process resolves models through this cache, and the
worker warms it at start-up before running any job.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import TypeVar

import llm
from llm.plugins import pm

from approvals.config import Settings
from approvals.errors import ConfigError, ResumeError

_lock = threading.Lock()
_plugins_loaded = False
SyncModel = llm.Model | llm.KeyModel
AsyncModel = llm.AsyncModel | llm.AsyncKeyModel
_models: dict[str, SyncModel] = {}
_async_models: dict[str, AsyncModel] = {}


def load_plugins(settings: Settings) -> None:
    """Register ``APPROVALS_LLM_PLUGINS`` modules with llm, then load llm's own plugins."""
    global _plugins_loaded
    with _lock:
        registered = False
        for name in settings.llm_plugins:
            if pm.has_plugin(name):
                continue
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                raise ConfigError(f"APPROVALS_LLM_PLUGINS: cannot import {name}: {exc}") from None
            pm.register(module, name=name)
            registered = True
        if registered or not _plugins_loaded:
            llm.get_models()  # loads llm's plugins once; every later run_agent skips this
            _plugins_loaded = True


def warm_models() -> int:
    """Resolve every installed model and alias now (sync and async), as ``resolve_model``
    would later; returns how many ids are cached. A forked work-horse then inherits them
    instead of asking every plugin for its models again in every resume."""
    with _lock:
        for model_with_aliases in llm.get_models_with_aliases():
            ids = (model_with_aliases.model.model_id, *model_with_aliases.aliases)
            for model_id in ids:
                _models.setdefault(model_id, model_with_aliases.model)
                if model_with_aliases.async_model is not None:
                    _async_models.setdefault(model_id, model_with_aliases.async_model)
        return len(_models) + len(_async_models)


def resolve_model(model: SyncModel | str) -> SyncModel:
    """The model itself, or the sync model registered under that id (cached)."""
    if isinstance(model, llm.Model | llm.KeyModel):
        return model
    return _resolve(model, _models, llm.get_model, "model")


def resolve_async_model(model: AsyncModel | str) -> AsyncModel:
    """The async model itself, or the async model registered under that id (cached)."""
    if isinstance(model, llm.AsyncModel | llm.AsyncKeyModel):
        return model
    return _resolve(model, _async_models, llm.get_async_model, "async model")


M = TypeVar("M")


def _resolve(model: object, cache: dict[str, M], get: Callable[[str], M], kind: str) -> M:
    if not isinstance(model, str):
        raise ConfigError(f"expected a model id or an {kind}, got {type(model).__name__}")
    with _lock:
        if model not in cache:
            try:
                cache[model] = get(model)
            except llm.UnknownModelError:
                raise ResumeError(
                    f"unknown {kind} {model!r}: install its llm plugin or list it in "
                    "APPROVALS_LLM_PLUGINS"
                ) from None
        return cache[model]
