// shardjob console: live fragments over server-sent events, the job search, confirmations,
// local times. No framework; the pages work without it (but are not live).
"use strict";
(function () {
  const body = document.body;

  // One formatter for every time on the page (toLocaleString makes one per call: a list of a
  // thousand jobs would spend most of its loading there). The same fields as toLocaleString.
  const dateTime = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "numeric", day: "numeric",
    hour: "numeric", minute: "numeric", second: "numeric",
  });

  function localTimes(root) {
    const now = Date.now();
    root.querySelectorAll("time[data-ms]").forEach((t) => {
      const ms = Number(t.dataset.ms);
      if (!Number.isFinite(ms)) return;
      const d = new Date(ms);
      const diff = Math.round((ms - now) / 1000);
      const abs = Math.abs(diff);
      let rel = "";
      if (abs < 1) rel = "now";
      else if (abs < 90) rel = diff >= 0 ? "in " + abs + " s" : abs + " s ago";
      else if (abs < 5400) rel = diff >= 0 ? "in " + Math.round(abs / 60) + " min" : Math.round(abs / 60) + " min ago";
      else if (abs < 172800) rel = diff >= 0 ? "in " + Math.round(abs / 3600) + " h" : Math.round(abs / 3600) + " h ago";
      t.textContent = dateTime.format(d) + (rel ? " (" + rel + ")" : "");
      t.title = d.toISOString();
    });
  }

  function filterJobs() {
    const search = document.getElementById("job-search");
    const status = document.getElementById("job-status");
    const tbody = document.getElementById("jobs-body");
    if (!search || !tbody) return;
    const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    const want = status ? status.value : "";
    let shown = 0;
    tbody.querySelectorAll("tr[data-search]").forEach((tr) => {
      const hay = tr.dataset.search;
      const ok = words.every((w) => hay.includes(w)) && (!want || tr.dataset.status === want);
      tr.hidden = !ok;
      if (ok) shown++;
    });
    const count = document.getElementById("jobs-count");
    if (count) count.dataset.shown = String(shown);
  }

  // Brings `old` to what `fresh` shows, keeping the nodes that stay: a row (matched by its id)
  // or a cell, form or button that is still there keeps its DOM node, only its text and
  // attributes change. A button under the user's cursor does not move nor get replaced while
  // the table is redrawn around it. Returns whether anything changed.
  function morph(old, fresh) {
    if (old.nodeType !== Node.ELEMENT_NODE) {
      if (old.nodeValue === fresh.nodeValue) return false;
      old.nodeValue = fresh.nodeValue;
      return true;
    }
    let changed = false;
    // The page's own marks (a row hidden by the search, the glow of an update) are no change.
    const own = (name, value) => name === "hidden" ||
      (name === "class" && value !== null && value.replace("flash-update", "").trim() === "");
    for (const a of Array.from(old.attributes)) {
      if (!fresh.hasAttribute(a.name)) {
        old.removeAttribute(a.name);
        if (!own(a.name, a.value)) changed = true;
      }
    }
    for (const a of Array.from(fresh.attributes)) {
      const was = old.getAttribute(a.name);
      if (was !== a.value) {
        old.setAttribute(a.name, a.value);
        if (a.name !== "class" || (was || "").replace("flash-update", "").trim() !== a.value.trim()) changed = true;
      }
    }
    const byId = new Map();
    for (const c of old.children) if (c.id) byId.set(c.id, c);
    let cur = old.firstChild;
    for (const next of Array.from(fresh.childNodes)) {
      let match = null;
      if (next.nodeType === Node.ELEMENT_NODE && next.id) {
        match = byId.get(next.id) || null;
      } else if (cur && cur.nodeType === next.nodeType && cur.nodeName === next.nodeName && !cur.id) {
        match = cur;
      }
      if (match && match.nodeType === Node.ELEMENT_NODE && match.nodeName !== next.nodeName) match = null;
      if (!match) {
        old.insertBefore(next, cur);
        changed = true;
        continue;
      }
      if (match === cur) cur = cur.nextSibling;
      else { old.insertBefore(match, cur); changed = true; }
      const rowChanged = morph(match, next);
      if (rowChanged && match.tagName === "TR") {
        match.classList.add("flash-update");
        setTimeout(() => match.classList.remove("flash-update"), 900);
      }
      changed = rowChanged || changed;
    }
    while (cur) {
      const gone = cur;
      cur = cur.nextSibling;
      old.removeChild(gone);
      changed = true;
    }
    return changed;
  }

  function place(id, html) {
    const el = document.getElementById(id);
    if (!el) return;
    const focused = document.activeElement && el.contains(document.activeElement);
    if (focused && el.tagName !== "TBODY") return; // never under the user's cursor
    if (html === "") { el.remove(); return; }
    const tpl = document.createElement("template");
    tpl.innerHTML = html.trim();
    const fresh = tpl.content.firstElementChild;
    if (!fresh) return;
    if (fresh.nodeName !== el.nodeName) {
      el.replaceWith(fresh);
      localTimes(fresh);
      return;
    }
    // The page shows its times in local form: the fresh ones too, before they are compared.
    localTimes(fresh);
    const changed = morph(el, fresh);
    if (changed && el.tagName !== "TBODY") {
      el.classList.add("flash-update");
      setTimeout(() => el.classList.remove("flash-update"), 900);
    }
  }

  function live() {
    const url = body.dataset.events;
    const badge = document.getElementById("live");
    if (!url || !window.EventSource) return;
    const source = new EventSource(url);
    const set = (cls, text) => { if (badge) { badge.className = "live " + cls; badge.textContent = text; } };
    source.addEventListener("open", () => set("on", "● live"));
    source.addEventListener("error", () => set("off", "○ reconnecting"));
    source.addEventListener("link", (e) => {
      if (e.data === "live") set("on", "● live");
      else set("warn", "● " + e.data);
    });
    source.addEventListener("fragment", (e) => {
      let f;
      try { f = JSON.parse(e.data); } catch (_) { return; }
      place(f.id, f.html);
      filterJobs();
      body.dataset.updates = String(Number(body.dataset.updates || "0") + 1);
    });
  }

  document.addEventListener("submit", (e) => {
    const form = e.target;
    const ask = form.dataset && form.dataset.confirm;
    if (ask && !window.confirm(ask)) e.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", () => {
    localTimes(document);
    setInterval(() => localTimes(document), 15000);
    const search = document.getElementById("job-search");
    if (search) {
      search.addEventListener("input", filterJobs);
      const status = document.getElementById("job-status");
      if (status) status.addEventListener("change", filterJobs);
      filterJobs();
    }
    const sw = document.getElementById("registry-switch");
    if (sw) sw.addEventListener("change", () => { if (sw.value) location.href = "/r/" + sw.value + "/"; });
    live();
  });
})();
