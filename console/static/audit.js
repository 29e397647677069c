// The live audit log: an event stream of records, filtered by the server.
"use strict";

(() => {
  const { $, el, whoami, can, showError } = coily;
  const maxRows = 500;
  let es = null;

  function fmtBytes(n) {
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }

  // kinds titles every kind of record (audit.Kinds): a record of a kind
  // not here is shown as one, and the browser test fails on it.
  const kinds = {
    "exec.decision": "request decided", "exec.result": "command ended", "exec.kill": "command killed",
    "approval.request": "approval asked", "approval.decide": "approval decided",
    "call": "call refused", "refusal.summary": "refusals counted",
    "lockout": "lockout", "lockout.remote": "lockout from another host", "unlock": "unlock", "pause": "pause", "resume": "resume",
    "unlock.remote": "unlock from another host", "resume.remote": "resume from another host",
    "relay": "relayed request", "relay.teardown": "relay ended", "key.issue": "bridge key issued", "key.rotate": "bridge keys rotated",
    "git.fetch": "git fetch", "git.push": "git push", "policy.reload": "policy reloaded", "lease.revoke": "lease revoked",
    "workspace.refused": "workspace refused", "workspace.repair": "workspace repaired",
    "audit.checkpoint": "new log file", "audit.repair": "torn line cut", "state.restore": "stop state restored",
    "state.rebuild": "state file rebuilt", "audit.key": "new checkpoint key", "audit.witness": "witness outage or refusal",
  };

  // configured are the credentials the record says the rule gives
  // (names and references, as recorded).
  function configured(r) {
    const out = [];
    for (const k of ["credentials", "git_credentials", "ssh_keys"]) {
      for (const item of (r.lists || {})[k] || []) out.push(k + " " + item);
    }
    const d = r.details || {};
    if (d.github_app) out.push("github_app " + d.github_app);
    return out;
  }

  // shown are the details and lists a card shows on their own lines.
  const shown = new Set(["approved_by", "approval_id", "credentials", "git_credentials", "ssh_keys", "github_app"]);

  function row(r) {
    const title = kinds[r.event];
    const head = el("p", { class: "meta" },
      el("span", { class: "time", text: coily.when(r.time) }), " ",
      el("span", { class: "event" + (title ? "" : " unknown-kind"), text: r.event }), " ",
      el("span", { class: "kind", text: title || "unknown kind of record" }));
    if (r.decision || r.code) {
      head.append(" ", el("span", { class: "decision " + (r.decision === "refuse" ? "refuse" : "allow"),
        text: [r.decision, r.code].filter(Boolean).join(" ") }));
    }
    const li = el("li", { class: "card record", "data-seq": String(r.seq), "data-host": r.host || "",
      "data-time": r.time, "data-event": r.event }, head);
    const facts = [];
    if (r.host) facts.push("on " + r.host);
    if (r.principal) facts.push(r.principal + (r.transport ? " via " + r.transport : ""));
    if (r.rule) facts.push("rule " + r.rule);
    if (r.exit_code !== undefined && r.exit_code !== null) facts.push("exit " + r.exit_code);
    if (r.signal) facts.push("signal " + r.signal);
    if (r.killed) facts.push(r.killed + " killed");
    if (r.duration_ms) facts.push(Math.round(r.duration_ms) + " ms");
    if (facts.length) li.append(el("p", { class: "facts-line", text: facts.join(" · ") }));
    if (r.argv_text) li.append(el("pre", { class: "argv", text: r.argv_text }));
    if (r.reason) li.append(el("p", { class: "reason", text: r.reason }));
    const d = r.details || {};
    if (d.approval_id) {
      li.append(el("p", { class: "approval-line", text: "approval " + d.approval_id +
        (d.approved_by ? " · approved by " + d.approved_by : "") }));
    }
    const conf = configured(r);
    if (conf.length) li.append(el("p", { class: "creds-configured small", text: "credentials (rule): " + conf.join("; ") }));
    if ((r.credentials_used || []).length) {
      li.append(el("p", { class: "creds-used small", text: "credentials used: " + r.credentials_used.join("; ") }));
    }
    const more = [];
    for (const k of Object.keys(d).sort()) if (!shown.has(k)) more.push(k + "=" + d[k]);
    for (const k of Object.keys(r.lists || {}).sort()) {
      if (!shown.has(k)) for (const item of r.lists[k]) more.push(k + ": " + item);
    }
    if (more.length) {
      const ul = el("ul", { class: "plain small muted record-details" });
      for (const m of more) ul.append(el("li", { class: "mono", text: m }));
      li.append(ul);
    }
    li.append(el("p", { class: "muted small", text: [r.peer, r.request_id, r.id].filter(Boolean).join(" · ") }));
    if (r.egress && r.egress.length) {
      const ul = el("ul", { class: "egress" });
      for (const e of r.egress) {
        ul.append(el("li", { class: "egress-row " + e.decision },
          el("span", { class: "mono", text: e.host + ":" + e.port }), " ",
          el("span", { text: e.decision }), " ",
          el("span", { text: e.connections + " conn · ↑" + fmtBytes(e.bytes_up) + " ↓" + fmtBytes(e.bytes_down) }),
          e.reason ? el("span", { class: "muted", text: " " + e.reason }) : null));
      }
      li.append(ul);
    }
    return li;
  }

  // after reports whether record element a comes after b: by Seq on one
  // host, by time then host across a fleet's hosts (each counts its own).
  function after(a, b) {
    const ha = a.getAttribute("data-host"), hb = b.getAttribute("data-host");
    if (ha === hb) return Number(a.getAttribute("data-seq")) > Number(b.getAttribute("data-seq"));
    const ta = Date.parse(a.getAttribute("data-time")), tb = Date.parse(b.getAttribute("data-time"));
    return ta !== tb ? ta > tb : ha > hb;
  }

  // insert keeps the newest record first, each record once.
  function insert(li) {
    const list = $("records");
    let before = null;
    for (const c of list.children) {
      if (c.getAttribute("data-host") === li.getAttribute("data-host") &&
          c.getAttribute("data-seq") === li.getAttribute("data-seq")) return;
      if (after(li, c)) { before = c; break; }
    }
    list.insertBefore(li, before);
    while (list.children.length > maxRows) list.lastElementChild.remove();
  }

  function query() {
    const q = new URLSearchParams();
    for (const f of ["principal", "rule", "decision", "event"]) {
      const v = $("f-" + f).value.trim();
      if (v) q.set(f, v);
    }
    return q;
  }

  function connect() {
    if (es) es.close();
    $("records").replaceChildren();
    $("stream-state").textContent = "Connecting…";
    const q = query().toString();
    es = new EventSource("/api/audit/stream" + (q ? "?" + q : ""));
    es.addEventListener("record", (ev) => insert(row(JSON.parse(ev.data))));
    es.addEventListener("ready", (ev) => {
      const d = JSON.parse(ev.data);
      $("stream-state").textContent = d.dropped > 0
        ? "Live. " + d.dropped + " or more older records not shown: the fleet's view is bounded in size."
        : "Live.";
      showError("");
    });
    es.addEventListener("refused", (ev) => {
      const e = JSON.parse(ev.data);
      showError(e.code + ": " + e.message);
      es.close();
    });
    es.onerror = () => {
      $("stream-state").textContent = "Reconnecting…";
      if (es.readyState === EventSource.CLOSED) {
        // The server answered with an error, not a stream.
        fetch(es.url, { credentials: "omit", signal: AbortSignal.timeout(5000) }).then((r) => r.json()).then((d) => {
          if (d && !d.ok) { showError(d.error.code + ": " + d.error.message); $("stream-state").textContent = "Stopped."; }
        }).catch(() => {});
      }
    };
  }

  $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); connect(); });
  const params = new URLSearchParams(location.search);
  for (const f of ["principal", "rule", "decision", "event"]) {
    if (params.has(f)) $("f-" + f).value = params.get(f);
  }
  whoami().then(() => {
    if (!can("audit-read")) {
      $("stream-state").textContent = "You may not read the audit log (the audit-read permission).";
      return;
    }
    connect();
  }).catch((e) => showError(e.message));
})();
