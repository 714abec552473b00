// The chat page: the models come from /v1/models, answers stream from
// /v1/chat/completions as server-sent events, and conversations and
// settings stay in this browser's localStorage. Nothing is sent anywhere
// but to the server that served the page.
"use strict";

const $ = (id) => document.getElementById(id);
const STORE = "mllm.conversations";
const SETTINGS = "mllm.settings";
const MODEL = "mllm.model";

function load(key, fallback) {
  try {
    return JSON.parse(localStorage.getItem(key)) ?? fallback;
  } catch {
    return fallback;
  }
}

// Empty fields send nothing: the server's defaults apply.
const settings = Object.assign({ temperature: "", max_tokens: "", system: "", api_key: "" }, load(SETTINGS, {}));
let conversations = load(STORE, []);
let current = null; // the open conversation
let models = []; // the models served for chat
let pending = []; // images (data URLs) for the next message
let controller = null; // aborts the answer streaming now

function status(text) {
  $("status").textContent = text || "";
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(conversations));
  } catch {
    status("This browser's storage is full: the conversation is kept only until the page closes. Delete old conversations to make room.");
  }
}

// --- models -----------------------------------------------------------------

async function loadModels() {
  try {
    const r = await fetch("/v1/models");
    if (!r.ok) throw new Error(await errorText(r));
    const list = (await r.json()).data || [];
    models = list.filter((m) => !(m.meta && (m.meta.embedding || m.meta.rerank)));
  } catch (e) {
    status("Cannot list the models: " + e.message);
    return;
  }
  const select = $("model");
  select.replaceChildren(...models.map((m) => new Option(m.id + (isVision(m) ? " (vision)" : ""), m.id)));
  const last = localStorage.getItem(MODEL);
  if (models.some((m) => m.id === last)) select.value = last;
  if (!models.length) status("This server serves no model for chat (only embeddings or reranking).");
  modelChanged();
}

const isVision = (m) => Boolean(m && m.meta && m.meta.vision);

function modelChanged() {
  const m = models.find((m) => m.id === $("model").value);
  $("attach-label").hidden = !isVision(m);
  if (!isVision(m) && pending.length) {
    pending = [];
    renderAttachments();
  }
  if (m) localStorage.setItem(MODEL, m.id);
}

// --- conversations ------------------------------------------------------------

function renderList() {
  const items = conversations
    .slice()
    .sort((a, b) => b.updated - a.updated)
    .map((c) => {
      const li = document.createElement("li");
      li.dataset.id = c.id;
      if (current && c.id === current.id) li.className = "active";
      const open = document.createElement("button");
      open.type = "button";
      open.className = "open";
      open.textContent = c.title || "New chat";
      open.onclick = () => openConversation(c.id);
      const del = document.createElement("button");
      del.type = "button";
      del.className = "delete";
      del.textContent = "\u00d7";
      del.title = "Delete this conversation";
      del.onclick = () => deleteConversation(c.id);
      li.append(open, del);
      return li;
    });
  $("conversations").replaceChildren(...items);
}

function openConversation(id) {
  if (controller) return;
  current = conversations.find((c) => c.id === id) || null;
  if (current && models.some((m) => m.id === current.model)) {
    $("model").value = current.model;
    modelChanged();
  }
  renderList();
  renderMessages();
}

function deleteConversation(id) {
  if (controller && current && current.id === id) return;
  conversations = conversations.filter((c) => c.id !== id);
  if (current && current.id === id) current = null;
  save();
  renderList();
  renderMessages();
}

function newChat() {
  if (controller) return;
  current = null;
  renderList();
  renderMessages();
  $("prompt").focus();
}

// --- messages -------------------------------------------------------------------

function renderMessages() {
  const box = $("messages");
  box.replaceChildren(
    ...(current ? current.messages : []).map((m) => {
      const div = document.createElement("div");
      fillMessage(div, m);
      return div;
    })
  );
  box.scrollTop = box.scrollHeight;
}

function fillMessage(div, m) {
  const wasOpen = Boolean(div.querySelector("details.reasoning[open]"));
  div.className = "message " + m.role;
  div.dataset.state = m.state || "done";
  div.replaceChildren();
  for (const url of m.images || []) {
    const img = document.createElement("img");
    img.src = url;
    img.alt = "attached image";
    div.append(img);
  }
  if (m.reasoning) {
    // Folded unless the reader opened it.
    const details = document.createElement("details");
    details.className = "reasoning";
    details.open = wasOpen;
    const summary = document.createElement("summary");
    summary.textContent = m.state === "streaming" && !m.content ? "Reasoning\u2026" : "Reasoning";
    const body = document.createElement("div");
    body.innerHTML = window.mllmMarkdown(m.reasoning);
    details.append(summary, body);
    div.append(details);
  }
  const content = document.createElement("div");
  content.className = "content";
  // What the user typed is shown as typed; answers are Markdown.
  if (m.role === "user") content.textContent = m.content;
  else content.innerHTML = window.mllmMarkdown(m.content);
  div.append(content);
  if (m.stats && m.state === "done") {
    const p = document.createElement("p");
    p.className = "stats";
    p.textContent = m.stats;
    div.append(p);
  }
  const note = m.error || (m.state === "stopped" ? "(stopped)" : "");
  if (note) {
    const p = document.createElement("p");
    p.className = m.error ? "error" : "note";
    p.textContent = note;
    div.append(p);
  }
}

// The request's messages: images as OpenAI content parts, the system
// prompt first, failed answers left out.
function apiMessages(list) {
  const out = [];
  if (settings.system.trim()) out.push({ role: "system", content: settings.system });
  for (const m of list) {
    if (m.role === "assistant" && !m.content) continue;
    if (m.images && m.images.length) {
      const parts = m.images.map((url) => ({ type: "image_url", image_url: { url } }));
      parts.push({ type: "text", text: m.content });
      out.push({ role: m.role, content: parts });
    } else {
      out.push({ role: m.role, content: m.content });
    }
  }
  return out;
}

async function errorText(r) {
  const text = await r.text();
  try {
    const e = JSON.parse(text).error;
    const msg = (e && e.message) || text;
    return r.status === 401 ? msg + " (set the API key in Settings)" : msg;
  } catch {
    return "HTTP " + r.status + ": " + text;
  }
}

async function send(ev) {
  ev.preventDefault();
  if (controller) return;
  const text = $("prompt").value.trim();
  const model = $("model").value;
  if (!text && !pending.length) return;
  if (!model) {
    status("No model to send to.");
    return;
  }
  status("");
  if (!current) {
    current = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "", messages: [] };
    conversations.push(current);
  }
  current.model = model;
  current.title = current.title || text.slice(0, 48) || "Image";
  current.updated = Date.now();
  current.messages.push({ role: "user", content: text, images: pending });
  const answer = { role: "assistant", content: "", reasoning: "", state: "streaming" };
  current.messages.push(answer);
  pending = [];
  renderAttachments();
  $("prompt").value = "";
  save();
  renderList();
  renderMessages();
  await stream(model, current.messages.slice(0, -1), answer, $("messages").lastElementChild);
  save();
}

// Reads the answer's server-sent events into `answer`, repainting `view`
// at most once a frame; Stop aborts the request, which ends the answer on
// the server too.
async function stream(model, history, answer, view) {
  controller = new AbortController();
  busy(true);
  // The last chunk then carries the usage and llama-server's timings.
  const body = { model, messages: apiMessages(history), stream: true, stream_options: { include_usage: true } };
  const t = parseFloat(settings.temperature);
  if (!Number.isNaN(t)) body.temperature = t;
  const n = parseInt(settings.max_tokens, 10);
  if (n > 0) body.max_tokens = n;
  const headers = { "Content-Type": "application/json" };
  if (settings.api_key) headers.Authorization = "Bearer " + settings.api_key;
  let chunks = 0;
  let queued = false;
  const paint = () => {
    view.dataset.chunks = chunks;
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      fillMessage(view, answer);
      const box = $("messages");
      box.scrollTop = box.scrollHeight;
    });
  };
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!r.ok) throw new Error(await errorText(r));
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
          if (chunk.timings) answer.stats = stats(chunk.timings);
          const delta = (chunk.choices && chunk.choices[0] && chunk.choices[0].delta) || {};
          if (delta.reasoning_content) answer.reasoning += delta.reasoning_content;
          if (delta.content) answer.content += delta.content;
          if (delta.content || delta.reasoning_content) chunks++;
        }
      }
      paint();
    }
    answer.state = "done";
  } catch (e) {
    if (e.name === "AbortError") {
      answer.state = "stopped";
    } else {
      answer.state = "error";
      answer.error = e.message;
    }
  } finally {
    controller = null;
    busy(false);
    fillMessage(view, answer);
    view.dataset.chunks = chunks;
  }
}

// "12 tokens, 48.1 tokens/s (prompt: 20 tokens, 310.5 tokens/s)".
function stats(t) {
  const rate = (x) => (Number.isFinite(x) ? x.toFixed(1) : "?");
  return `${t.predicted_n} tokens, ${rate(t.predicted_per_second)} tokens/s (prompt: ${t.prompt_n} tokens, ${rate(t.prompt_per_second)} tokens/s)`;
}

function busy(on) {
  $("send").disabled = on;
  $("stop").hidden = !on;
  $("new-chat").disabled = on;
}

// --- images ------------------------------------------------------------------------

function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
}

function renderAttachments() {
  $("attachments").replaceChildren(
    ...pending.map((url, i) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "thumb";
      b.title = "Remove this image";
      const img = document.createElement("img");
      img.src = url;
      img.alt = "image to send";
      b.append(img);
      b.onclick = () => {
        pending.splice(i, 1);
        renderAttachments();
      };
      return b;
    })
  );
}

// --- start --------------------------------------------------------------------------

function start() {
  for (const [id, key] of [["temperature", "temperature"], ["max-tokens", "max_tokens"], ["system", "system"], ["api-key", "api_key"]]) {
    const el = $(id);
    el.value = settings[key];
    el.placeholder = el.placeholder || "server default";
    el.oninput = () => {
      settings[key] = el.value;
      localStorage.setItem(SETTINGS, JSON.stringify(settings));
    };
  }
  $("settings-toggle").onclick = () => {
    const form = $("settings");
    form.hidden = !form.hidden;
    $("settings-toggle").setAttribute("aria-expanded", String(!form.hidden));
  };
  $("settings").onsubmit = (e) => e.preventDefault();
  $("model").onchange = modelChanged;
  $("new-chat").onclick = newChat;
  $("composer").onsubmit = send;
  $("stop").onclick = () => controller && controller.abort();
  $("prompt").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) send(e);
  };
  $("attach").onchange = async () => {
    for (const f of $("attach").files) pending.push(await dataUrl(f));
    $("attach").value = "";
    renderAttachments();
  };
  // An answer cut off by closing the page is kept as stopped.
  for (const c of conversations) for (const m of c.messages) if (m.state === "streaming") m.state = "stopped";
  renderList();
  renderMessages();
  loadModels();
}

start();
