"""Block Kit rendered to HTML for the sandbox's page: messages, modals and the Home tab.

Rendered on the server, in Python, so that every block type the bot emits is unit-tested with
plain pytest; the page's JavaScript only lays the HTML out and sends clicks back. A block or
element this module does not know, or one it cannot read, is shown as its raw JSON, never
dropped and never a crash: a developer then sees exactly what the bot sent.

Interactive parts carry ``data-`` attributes the page's script reads: buttons their
``action_id``, ``block_id`` and ``value`` (and a ``<dialog>`` for a ``confirm``), inputs their
``block_id``, ``action_id`` and element type.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from approvals.dev.sandbox.mrkdwn import TextContext, render_mrkdwn, render_plain

Block = Mapping[str, Any]


@dataclass(frozen=True)
class FormState:
    """What a person typed into a modal, and the errors the app answered for it."""

    values: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    notice: str | None = None


def render_blocks(blocks: Any, ctx: TextContext, form: FormState | None = None) -> str:
    """A list of blocks; anything that is not a list is shown raw."""
    if not isinstance(blocks, list):
        return raw_json(blocks, "blocks must be a list")
    form = form or FormState()
    return "".join(render_block(block, i, ctx, form) for i, block in enumerate(blocks))


def render_block(block: Any, index: int, ctx: TextContext, form: FormState) -> str:
    """One block, or its raw JSON when its type is unknown or it cannot be read."""
    kind = block.get("type") if isinstance(block, dict) else None
    renderer = _BLOCKS.get(kind) if isinstance(kind, str) else None
    if renderer is None:
        return raw_json(block, f"unsupported block type {kind!r}")
    try:
        return renderer(block, index, ctx, form)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        return raw_json(block, f"could not render this {kind} block ({type(exc).__name__})")


def render_view(view: Any, ctx: TextContext, form: FormState | None = None) -> str:
    """A modal (title, blocks, Close and Submit) or a Home tab."""
    if not isinstance(view, dict) or view.get("type") not in ("modal", "home"):
        return raw_json(view, "unsupported view")
    form = form or FormState()
    body = render_blocks(view.get("blocks", []), ctx, form)
    view_id = _attr(view.get("id", ""))
    if view["type"] == "home":
        return f'<div class="bk-home" data-view-id="{view_id}">{body}</div>'
    notice = f'<div class="bk-notice">{html.escape(form.notice)}</div>' if form.notice else ""
    submit = ""
    if isinstance(view.get("submit"), dict):
        submit = (
            '<button type="button" class="bk-button bk-primary" data-modal-submit>'
            f"{text_object(view['submit'], ctx)}</button>"
        )
    close = text_object(view["close"], ctx) if isinstance(view.get("close"), dict) else "Cancel"
    return (
        f'<div class="bk-modal" role="dialog" data-view-id="{view_id}">'
        f'<header class="bk-modal-title">{text_object(view.get("title"), ctx)}'
        '<button type="button" class="bk-modal-x" data-modal-close aria-label="Close">'
        "&times;</button>"
        f'</header><div class="bk-modal-body">{notice}{body}</div>'
        '<footer class="bk-modal-footer">'
        f'<button type="button" class="bk-button" data-modal-close>{close}</button>{submit}'
        "</footer></div>"
    )


def text_object(obj: Any, ctx: TextContext) -> str:
    """A ``plain_text`` or ``mrkdwn`` text object."""
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise ValueError("not a text object")
    if obj.get("type") == "mrkdwn":
        return render_mrkdwn(obj["text"], ctx)
    if obj.get("type") == "plain_text":
        return render_plain(obj["text"], emoji=obj.get("emoji", True) is not False)
    raise ValueError(f"unknown text type {obj.get('type')!r}")


def raw_json(value: Any, why: str) -> str:
    """What the sandbox shows for something it cannot render: why, and the JSON itself."""
    try:
        dumped = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    except ValueError:  # circular structures
        dumped = repr(value)
    return (
        f'<div class="bk-unknown"><div class="bk-unknown-why">{html.escape(why)}: shown as JSON'
        f"</div><pre>{html.escape(dumped)}</pre></div>"
    )


def _attr(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _block_id(block: Block, index: int) -> str:
    return str(block.get("block_id") or f"b{index}")


def _header(block: Block, index: int, ctx: TextContext, form: FormState) -> str:
    return f'<div class="bk-header">{text_object(block["text"], ctx)}</div>'


def _section(block: Block, index: int, ctx: TextContext, form: FormState) -> str:
    parts = []
    if block.get("text") is not None:
        parts.append(f'<div class="bk-text">{text_object(block["text"], ctx)}</div>')
    if block.get("fields") is not None:
        fields = "".join(
            f'<div class="bk-field">{text_object(f, ctx)}</div>' for f in block["fields"]
        )
        parts.append(f'<div class="bk-fields">{fields}</div>')
    if not parts:
        raise ValueError("a section needs text or fields")
    body = "".join(parts)
    accessory = block.get("accessory")
    if accessory is not None:
        side = _element(accessory, _block_id(block, index), ctx)
        body = f'<div class="bk-section-main">{body}</div><div class="bk-accessory">{side}</div>'
    return f'<div class="bk-section">{body}</div>'


def _context(block: Block, index: int, ctx: TextContext, form: FormState) -> str:
    items = []
    for element in block["elements"]:
        if isinstance(element, dict) and element.get("type") == "image":
            items.append(_image_tag(element, "bk-context-image"))
        elif isinstance(element, dict) and element.get("type") in ("mrkdwn", "plain_text"):
            items.append(f"<span>{text_object(element, ctx)}</span>")
        else:
            items.append(raw_json(element, "unsupported context element"))
    return f'<div class="bk-context">{"".join(items)}</div>'


def _actions(block: Block, index: int, ctx: TextContext, form: FormState) -> str:
    block_id = _block_id(block, index)
    elements = "".join(_element(e, block_id, ctx) for e in block["elements"])
    return f'<div class="bk-actions">{elements}</div>'


def _divider(block: Block, index: int, ctx: TextContext, form: FormState) -> str:
    return '<hr class="bk-divider">'


def _image(block: Block, index: int, ctx: TextContext, form: FormState) -> str:
    title = block.get("title")
    caption = f"<figcaption>{text_object(title, ctx)}</figcaption>" if title else ""
    return f'<figure class="bk-image">{caption}{_image_tag(block, "")}</figure>'


def _input(block: Block, index: int, ctx: TextContext, form: FormState) -> str:
    block_id = _block_id(block, index)
    optional = ' <span class="bk-optional">(optional)</span>' if block.get("optional") else ""
    label = f'<label class="bk-label">{text_object(block["label"], ctx)}{optional}</label>'
    field_html = _input_element(block["element"], block_id, form)
    hint = block.get("hint")
    hint_html = f'<div class="bk-hint">{text_object(hint, ctx)}</div>' if hint else ""
    error = form.errors.get(block_id)
    error_html = f'<div class="bk-error">{html.escape(error)}</div>' if error else ""
    css = "bk-input has-error" if error else "bk-input"
    inner = f"{label}{field_html}{hint_html}{error_html}"
    return f'<div class="{css}" data-block-id="{_attr(block_id)}">{inner}</div>'


def _input_element(element: Any, block_id: str, form: FormState) -> str:
    """A text, number or select input; the page sends its state as Slack's ``state.values``."""
    kind = element.get("type") if isinstance(element, dict) else None
    if kind not in _INPUTS:
        return raw_json(element, f"unsupported input element {kind!r}")
    action_id = str(element.get("action_id") or "value")
    typed = form.values.get(block_id, {}).get(action_id)
    attrs = (
        f'data-input="{kind}" data-block-id="{_attr(block_id)}" data-action-id="{_attr(action_id)}"'
        f' name="{_attr(block_id)}"'
    )
    return _INPUTS[kind](element, attrs, typed)


def _text_input(element: Block, attrs: str, typed: str | None) -> str:
    value = typed if typed is not None else element.get("initial_value") or ""
    if element.get("max_length"):
        attrs += f' maxlength="{int(element["max_length"])}"'
    placeholder = element.get("placeholder")
    if isinstance(placeholder, dict) and isinstance(placeholder.get("text"), str):
        attrs += f' placeholder="{_attr(placeholder["text"])}"'
    if element.get("multiline"):
        text = html.escape(str(value))
        return f'<textarea class="bk-textarea" rows="4" {attrs}>{text}</textarea>'
    return f'<input class="bk-textinput" type="text" {attrs} value="{_attr(value)}">'


def _number_input(element: Block, attrs: str, typed: str | None) -> str:
    value = typed if typed is not None else element.get("initial_value") or ""
    step = "any" if element.get("is_decimal_allowed") else "1"
    for bound in ("min_value", "max_value"):
        if element.get(bound) is not None:
            attrs += f' {bound[:3]}="{_attr(element[bound])}"'
    return (
        f'<input class="bk-textinput" type="number" step="{step}" {attrs} value="{_attr(value)}">'
    )


def _select(element: Block, attrs: str, typed: str | None) -> str:
    initial = element.get("initial_option")
    chosen = typed if typed is not None else initial.get("value") if initial else None
    options = ['<option value="">Select an option</option>'] if chosen is None else []
    for option in element["options"]:
        value = str(option["value"])
        selected = " selected" if value == chosen else ""
        label = html.escape(str(option["text"]["text"]))
        options.append(f'<option value="{_attr(value)}"{selected}>{label}</option>')
    return f'<select class="bk-select" {attrs}>{"".join(options)}</select>'


_INPUTS: dict[str, Callable[[Block, str, str | None], str]] = {
    "plain_text_input": _text_input,
    "number_input": _number_input,
    "static_select": _select,
}


def _element(element: Any, block_id: str, ctx: TextContext) -> str:
    """An interactive element: buttons are clickable; images shown; anything else raw."""
    kind = element.get("type") if isinstance(element, dict) else None
    try:
        if kind == "button":
            return _button(element, block_id, ctx)
        if kind == "static_select":
            return _action_select(element, block_id, ctx)
        if kind == "checkboxes":
            return _checkboxes(element, block_id, ctx)
        if kind == "image":
            return _image_tag(element, "bk-accessory-image")
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return raw_json(element, f"could not render this {kind} ({type(exc).__name__})")
    return raw_json(element, f"unsupported element type {kind!r}")


def _element_attrs(element: Block, block_id: str) -> str:
    return (
        f'data-action-id="{_attr(element.get("action_id", ""))}" data-block-id="{_attr(block_id)}"'
    )


def _action_select(element: Block, block_id: str, ctx: TextContext) -> str:
    """A select in a message: choosing an option sends a ``block_actions`` at once, as Slack."""
    placeholder = element.get("placeholder")
    label = html.escape(str(placeholder["text"])) if isinstance(placeholder, dict) else "Choose"
    options = [f'<option value="" selected disabled>{label}</option>']
    for option in element["options"]:
        text = html.escape(str(option["text"]["text"]))
        options.append(f'<option value="{_attr(option["value"])}">{text}</option>')
    attrs = _element_attrs(element, block_id)
    return (
        f'<select class="bk-action-select" data-action-select {attrs}>{"".join(options)}</select>'
    )


def _checkboxes(element: Block, block_id: str, ctx: TextContext) -> str:
    """Checkboxes in a message: ticking sends nothing; a button of the same message sends
    what is ticked as the payload's ``state``, as Slack does."""
    attrs = _element_attrs(element, block_id)
    boxes = [
        f'<label class="bk-checkbox"><input type="checkbox" data-checkbox {attrs} '
        f'value="{_attr(option["value"])}"> {text_object(option["text"], ctx)}</label>'
        for option in element["options"]
    ]
    return f'<span class="bk-checkboxes">{"".join(boxes)}</span>'


def _button(element: Block, block_id: str, ctx: TextContext) -> str:
    style = element.get("style")
    css = "bk-button" + (f" bk-{style}" if style in ("primary", "danger") else "")
    attrs = (
        f'data-action-id="{_attr(element.get("action_id", ""))}" '
        f'data-block-id="{_attr(block_id)}" data-value="{_attr(element.get("value", ""))}"'
    )
    if element.get("url"):
        attrs += f' data-url="{_attr(element["url"])}"'
    label = text_object(element["text"], ctx)
    button = f'<button type="button" class="{css}" {attrs}>{label}</button>'
    confirm = element.get("confirm")
    if confirm is None:
        return button
    return f'<span class="bk-button-wrap">{button}{_confirm(confirm, ctx)}</span>'


def _confirm(confirm: Block, ctx: TextContext) -> str:
    """The confirm dialog Slack shows before sending a click."""
    ok_style = " bk-danger" if confirm.get("style") == "danger" else " bk-primary"
    deny = text_object(confirm["deny"], ctx) if confirm.get("deny") else "Cancel"
    ok = text_object(confirm["confirm"], ctx) if confirm.get("confirm") else "Yes"
    return (
        '<dialog class="bk-confirm">'
        f'<h3 class="bk-confirm-title">{text_object(confirm["title"], ctx)}</h3>'
        f'<div class="bk-confirm-text">{text_object(confirm["text"], ctx)}</div>'
        '<div class="bk-confirm-buttons">'
        f'<button type="button" class="bk-button" data-confirm-deny>{deny}</button>'
        f'<button type="button" class="bk-button{ok_style}" data-confirm-ok>{ok}</button>'
        "</div></dialog>"
    )


def _image_tag(element: Block, css: str) -> str:
    url = element.get("image_url")
    if not isinstance(url, str):
        raise ValueError("an image needs an image_url")
    return f'<img class="{css}" src="{_attr(url)}" alt="{_attr(element.get("alt_text", ""))}">'


_BLOCKS: dict[str, Callable[[Block, int, TextContext, FormState], str]] = {
    "header": _header,
    "section": _section,
    "context": _context,
    "actions": _actions,
    "divider": _divider,
    "image": _image,
    "input": _input,
}

#: The block types rendered natively (everything else is shown as raw JSON).
SUPPORTED_BLOCKS = frozenset(_BLOCKS)
