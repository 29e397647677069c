// coily console: what every page shares. Text from the server is already
// made visible (control and bidi characters escaped); it is inserted with
// textContent only, never as markup (the page's Trusted Types policy
// would refuse markup anyway).
"use strict";

const coily = (() => {
  let status = null;
  let who = null;
  let clockSkew = 0; // server time minus local time, in ms

  function $(id) { return document.getElementById(id); }

  // el builds an element: el("li", {class: "card"}, "text", child, …).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else if (k === "title" || k === "type" || k === "href" || k === "aria-label") e.setAttribute(k, v);
      else throw new Error("el: attribute " + k + " not allowed");
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }

  function setText(id, text) { $(id).textContent = text === undefined || text === null || text === "" ? "—" : text; }

  function showError(msg) {
    const e = $("error");
    if (!msg) { e.hidden = true; e.textContent = ""; return; }
    e.textContent = msg;
    e.hidden = false;
  }

  // api calls the console's API: GET, or POST with an optional JSON body.
  async function api(method, path, body) {
    const init = { method, credentials: "omit", cache: "no-store", headers: {} };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new Error("coily is not reachable: " + e.message);
    }
    let data;
    try {
      data = await resp.json();
    } catch (e) {
      throw new Error("unexpected answer (HTTP " + resp.status + ")");
    }
    if (!data.ok) {
      const err = new Error(data.error.code + ": " + data.error.message);
      err.code = data.error.code;
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  // whoami learns who the page's caller is and what it may do: the page
  // asks for nothing its caller may not have (each refusal is audited).
  async function whoami() {
    const w = await api("GET", "/api/whoami");
    who = w.caller;
    clockSkew = Date.parse(w.now) - Date.now();
    $("dev-banner").hidden = !w.dev;
    $("who").textContent = who.principal;
    $("who").setAttribute("title", (who.permissions || []).join(", "));
    return who;
  }

  async function loadStatus() {
    const s = await api("GET", "/api/status");
    status = s;
    clockSkew = Date.parse(s.now) - Date.now();
    return s;
  }

  function can(perm) { return !!who && (who.permissions || []).includes(perm); }

  function now() { return Date.now() + clockSkew; }

  // ago is how long since an RFC 3339 time, in words.
  function ago(since) {
    const ms = Math.max(0, now() - Date.parse(since));
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min " + (s % 60) + " s";
    const h = Math.floor(m / 60);
    return h + " h " + (m % 60) + " min";
  }

  function when(t) {
    if (!t) return "";
    const d = new Date(t);
    return d.toLocaleString();
  }

  // tick refreshes every element carrying data-since with its age.
  function tick() {
    for (const e of document.querySelectorAll("[data-since]")) {
      e.textContent = ago(e.getAttribute("data-since"));
    }
  }
  setInterval(tick, 1000);

  // button runs an action on click, disabling it meanwhile and showing a
  // refusal.
  function onClick(btn, action) {
    btn.addEventListener("click", async () => {
      btn.disabled = true;
      try {
        showError("");
        await action();
      } catch (e) {
        showError(e.message);
      } finally {
        btn.disabled = false;
      }
    });
  }

  return { $, el, setText, showError, api, whoami, loadStatus, can, ago, when, tick, onClick,
    get status() { return status; } };
})();
