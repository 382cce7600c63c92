// The sandbox page: long-polls /sandbox/state for HTML the server rendered, and sends what a
// person does (clicks, modal submissions, the composer) to /sandbox/*, which signs it the way
// Slack does and forwards it to the bot. No rendering of Block Kit happens here.
"use strict";

const $ = (id) => document.getElementById(id);
const view = { user: null, channel: null, thread: null, tab: "channel" };
let revision = -1;
let dirty = false;
let controller = null;
let deferred = null;
let modalKey = null;
const shown = new Map();

function refresh() {
  dirty = true;
  if (controller) controller.abort();
}

async function post(path, body) {
  let data;
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ user: view.user, ...body }),
    });
    data = await response.json();
  } catch (error) {
    data = { ok: false, error: String(error) };
  }
  if (!data.ok && data.error) toast(data.error);
  refresh();
  return data;
}

function toast(text) {
  const box = $("toast");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 6000);
}

async function poll() {
  for (;;) {
    const since = dirty ? -1 : revision;
    dirty = false;
    controller = new AbortController();
    const query = new URLSearchParams({
      since, user: view.user, channel: view.channel, tab: view.tab, thread: view.thread || "",
    });
    try {
      const response = await fetch("/sandbox/state?" + query, { signal: controller.signal });
      const state = await response.json();
      if (dirty) continue;
      revision = state.revision;
      apply(state);
    } catch (error) {
      if (error.name !== "AbortError") await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

function setPane(element, html) {
  if (shown.get(element.id) === html) return;
  const atBottom = element.scrollHeight - element.scrollTop - element.clientHeight < 40;
  shown.set(element.id, html);
  element.innerHTML = html;
  if (atBottom) element.scrollTop = element.scrollHeight;
}

function apply(state) {
  // Redrawing would close an open confirm dialog: wait until it is answered.
  if (document.querySelector("dialog[open]")) {
    deferred = state;
    return;
  }
  deferred = null;
  $("title").textContent = state.title;
  $("bot-status").textContent = state.bot ? "bot connected" : "waiting for the bot…";
  $("bot-status").classList.toggle("down", !state.bot);
  $("composer").hidden = view.tab === "home";
  setPane($("messages"), state.main);
  $("thread-pane").hidden = !view.thread;
  if (view.thread) setPane($("thread"), state.thread);
  renderChannels(state.channels);
  renderModal(state.modal);
}

function renderChannels(channels) {
  const nav = $("channels");
  nav.replaceChildren(...channels.map((c) => {
    const item = document.createElement("button");
    item.type = "button";
    item.className = "nav-item" + (c.current && view.tab === "channel" ? " current" : "");
    item.dataset.channelId = c.id;
    item.textContent = "# " + c.name;
    return item;
  }));
  $("home-link").classList.toggle("current", view.tab === "home");
}

function renderModal(modal) {
  const layer = $("modal-layer");
  if (!modal) {
    layer.hidden = true;
    layer.innerHTML = "";
    modalKey = null;
    return;
  }
  if (modal.key === modalKey) return; // keep what is being typed
  modalKey = modal.key;
  layer.innerHTML = modal.html;
  layer.hidden = false;
  const first = layer.querySelector(".has-error [data-input]") || layer.querySelector("[data-input]");
  if (first) first.focus();
}

function containerOf(element) {
  const holder = element.closest("[data-container], .bk-home, .bk-modal");
  if (!holder) return null;
  if (holder.dataset.container === "message") {
    return { type: "message", channel: holder.dataset.channel, ts: holder.dataset.ts };
  }
  if (holder.dataset.container === "ephemeral") return { type: "ephemeral", id: holder.dataset.id };
  return { type: "view", view_id: holder.dataset.viewId };
}

// What is ticked in the checkboxes beside an element, as Slack's state.values.
function ticked(element) {
  const holder = element.closest("[data-container]") || document;
  const values = {};
  for (const box of holder.querySelectorAll("input[data-checkbox]")) {
    const block = (values[box.dataset.blockId] = values[box.dataset.blockId] || {});
    const state = (block[box.dataset.actionId] = block[box.dataset.actionId] || {
      type: "checkboxes",
      selected_options: [],
    });
    if (box.checked) {
      const text = box.parentElement.textContent.trim();
      state.selected_options.push({ text: { type: "mrkdwn", text }, value: box.value });
    }
  }
  return values;
}

async function sendClick(button, chosen) {
  const container = containerOf(button);
  if (!container) return;
  if (button.dataset.url) window.open(button.dataset.url, "_blank", "noopener");
  button.disabled = true;
  button.classList.add("busy");
  await post("/sandbox/click", {
    container,
    state: ticked(button),
    action: {
      action_id: button.dataset.actionId,
      block_id: button.dataset.blockId,
      value: chosen ? chosen.value : button.dataset.value,
      text: chosen ? chosen.text : button.textContent,
      selected_option: chosen || null,
    },
  });
  button.disabled = false;
  button.classList.remove("busy");
}

document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-action-select]");
  if (!select || !select.value) return;
  const option = select.selectedOptions[0];
  sendClick(select, { value: option.value, text: option.text });
});

// view.state.values as Slack sends it: an empty input is null, a select sends its option.
function inputState(input) {
  const type = input.dataset.input;
  if (type === "static_select") {
    const option = input.selectedOptions[0];
    const chosen = option && option.value !== "" ? option : null;
    return {
      type,
      selected_option: chosen && { text: { type: "plain_text", text: chosen.text }, value: chosen.value },
    };
  }
  return { type, value: input.value === "" ? null : input.value };
}

function modalValues() {
  const values = {};
  for (const input of $("modal-layer").querySelectorAll("[data-input]")) {
    values[input.dataset.blockId] = values[input.dataset.blockId] || {};
    values[input.dataset.blockId][input.dataset.actionId] = inputState(input);
  }
  return values;
}

document.addEventListener("click", (event) => {
  const target = event.target.closest("button");
  if (!target) return;
  if (target.matches("[data-confirm-ok]")) {
    const dialog = target.closest("dialog");
    dialog.close();
    sendClick(dialog.previousElementSibling);
  } else if (target.matches("[data-confirm-deny]")) {
    target.closest("dialog").close();
  } else if (target.matches(".bk-button[data-action-id]")) {
    const confirm = target.nextElementSibling;
    if (confirm && confirm.matches("dialog.bk-confirm")) confirm.showModal();
    else sendClick(target);
  } else if (target.matches("[data-modal-submit]")) {
    post("/sandbox/submit", { values: modalValues() });
  } else if (target.matches("[data-modal-close]")) {
    post("/sandbox/close", {});
  } else if (target.matches("[data-open-thread]")) {
    view.thread = target.dataset.openThread;
    refresh();
  } else if (target.matches("#close-thread")) {
    view.thread = null;
    $("thread-pane").hidden = true;
    refresh();
  } else if (target.matches("[data-dismiss]")) {
    post("/sandbox/dismiss", { id: Number(target.dataset.dismiss) });
  } else if (target.matches("[data-channel-id]")) {
    Object.assign(view, { channel: target.dataset.channelId, tab: "channel", thread: null });
    refresh();
  } else if (target.matches("#home-link")) {
    Object.assign(view, { tab: "home", thread: null });
    post("/sandbox/home", {});
  }
});

document.addEventListener("keydown", (event) => {
  // Escape closes the modal, as in Slack (an open confirm dialog closes itself first).
  if (event.key === "Escape" && !$("modal-layer").hidden && !document.querySelector("dialog[open]")) {
    post("/sandbox/close", {});
  }
});

document.addEventListener("close", () => {
  if (deferred) apply(deferred);
}, true);

function composer(formId, inputId, thread) {
  $(formId).addEventListener("submit", (event) => {
    event.preventDefault();
    const input = $(inputId);
    const text = input.value.trim();
    if (!text) return;
    input.value = "";
    post("/sandbox/send", { channel: view.channel, text, thread: thread() });
  });
}

async function start() {
  const config = await (await fetch("/sandbox/config")).json();
  const select = $("user");
  for (const user of config.users) select.add(new Option(user.name, user.id));
  const saved = localStorage.getItem("sandbox-user");
  view.user = config.users.some((u) => u.id === saved) ? saved : config.users[0].id;
  select.value = view.user;
  select.addEventListener("change", () => {
    view.user = select.value;
    localStorage.setItem("sandbox-user", view.user);
    if (view.tab === "home") post("/sandbox/home", {});
    refresh();
  });
  view.channel = config.channel;
  composer("composer", "composer-input", () => null);
  composer("thread-composer", "thread-input", () => view.thread);
  poll();
}

start();
