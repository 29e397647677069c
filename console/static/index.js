// The status page: stop state, controls, approvals waiting, execs in flight.
"use strict";

(() => {
  const { $, el, api, whoami, loadStatus, can, showError, onClick } = coily;
  let approvalStream = null;
  let lockedOut = false;

  function stopLine(name, st) {
    if (!st.active) return name + ": off";
    let s = name.toUpperCase() + " since " + coily.when(st.since) + " by " + st.by;
    if (st.reason) s += " (" + st.reason + ")";
    return s;
  }

  function renderStatus(s) {
    lockedOut = s.lockout.active;
    $("lockout-state").textContent = stopLine("lockout", s.lockout);
    $("lockout-state").className = "state" + (s.lockout.active ? " alarm" : "");
    const selfPaused = (s.self_pauses || []).filter((p) => p.active);
    let pause = stopLine("pause", s.pause);
    for (const p of selfPaused) pause += "\n" + p.principal + " paused itself since " + coily.when(p.since) + (p.reason ? " (" + p.reason + ")" : "");
    $("pause-state").textContent = pause;
    $("pause-state").className = "state" + (s.pause.active || selfPaused.length ? " warn" : "");
    $("lockout").hidden = !can("lockout") || s.lockout.active;
    $("pause").hidden = !(can("pause") || can("exec")) || s.pause.active || s.lockout.active;
    $("pause").textContent = can("pause") ? "Pause" : "Pause my commands";
    $("resume").hidden = !can("resume") || !(s.pause.active || selfPaused.length) || s.lockout.active;
    $("execs-section").hidden = !s.execs_shown;
    reconcile($("execs"), s.execs, "data-request-id", (x) => x.request_id, execCard, updateExec);
    $("execs-none").hidden = s.execs.length > 0;
  }

  // reconcile makes list's children the cards of items, in order, keeping
  // the cards already there (a button is never replaced under a finger):
  // new items get a card, gone ones lose theirs, others are updated.
  function reconcile(list, items, attr, keyOf, make, update) {
    const existing = new Map([...list.children].map((c) => [c.getAttribute(attr), c]));
    const wanted = new Set();
    let prev = null;
    for (const it of items) {
      const key = keyOf(it);
      wanted.add(key);
      let card = existing.get(key);
      if (!card) card = make(it);
      else if (update) update(card, it);
      const next = prev ? prev.nextElementSibling : list.firstElementChild;
      if (card !== next) list.insertBefore(card, next);
      prev = card;
    }
    for (const [key, card] of existing) {
      if (!wanted.has(key)) card.remove();
    }
  }

  function execState(x) { return x.running ? "running" : (x.approval_id ? "waiting for approval" : "waiting"); }

  function updateExec(card, x) {
    card.querySelector(".exec-state").textContent = execState(x);
    card.querySelector(".exec-rule").textContent = x.rule || "(no rule yet)";
  }

  function execCard(x) {
    const li = el("li", { class: "card exec", "data-request-id": x.request_id },
      el("pre", { class: "argv", text: x.argv_text }),
      el("p", { class: "meta" }, el("span", { text: x.principal }), " · ", el("span", { class: "exec-rule", text: x.rule || "(no rule yet)" }),
        " · ", el("span", { class: "exec-state", text: execState(x) }), " · ", el("span", { "data-since": x.admitted, text: coily.ago(x.admitted) })));
    if (can("lockout")) {
      const kill = el("button", { type: "button", class: "danger kill", text: "Kill" });
      onClick(kill, async () => {
        await api("POST", "/api/execs/" + encodeURIComponent(x.request_id) + "/kill");
        await refreshStatus();
      });
      li.append(kill);
    }
    return li;
  }

  function approvalCard(a) {
    const li = el("li", { class: "card approval", "data-approval-id": a.id },
      el("pre", { class: "argv", text: a.argv_text }),
      el("p", { class: "meta" }, el("span", { text: a.requester }), " · ", el("span", { text: a.rule }),
        " · waiting ", el("span", { "data-since": a.created_at, text: coily.ago(a.created_at) })));
    if (a.request_note) li.append(el("p", { class: "note", text: a.request_note }));
    const details = el("a", { href: "/approvals/" + encodeURIComponent(a.id), class: "details", text: "Details" });
    const approve = el("button", { type: "button", class: "approve", text: "Approve" });
    const deny = el("button", { type: "button", class: "danger", text: "Deny" });
    onClick(approve, () => decide(a.id, "approve"));
    onClick(deny, () => decide(a.id, "deny"));
    li.append(el("div", { class: "row" }, approve, deny, details));
    return li;
  }

  async function decide(id, verdict) {
    await api("POST", "/api/approvals/" + encodeURIComponent(id) + "/" + verdict);
    await refreshApprovals();
  }

  function renderApprovals(list) {
    reconcile($("approvals"), list, "data-approval-id", (a) => a.id, approvalCard, null);
    $("approvals-none").hidden = list.length > 0;
  }

  async function refreshApprovals() {
    if (lockedOut) {
      renderApprovals([]);
      $("approvals-none").textContent = "Locked out: every approval is rejected.";
      return;
    }
    $("approvals-none").textContent = "Nothing waits.";
    const data = await api("GET", "/api/approvals");
    renderApprovals(data.approvals);
  }

  // watchApprovals keeps the approvals live: the stream tells of every
  // change, and the list is fetched again. A stream that ends is opened
  // again a moment later (not under a lockout, which rejects them all).
  function watchApprovals() {
    if (!can("approve") || lockedOut) return;
    if (approvalStream && approvalStream.readyState !== EventSource.CLOSED) return;
    approvalStream = new EventSource("/api/approvals/stream");
    approvalStream.addEventListener("approval", () => {
      refreshApprovals().catch((e) => showError(e.message));
      refreshStatus().catch(() => {});
    });
    approvalStream.addEventListener("refused", () => approvalStream.close());
    refreshApprovals().catch((e) => showError(e.message));
  }

  async function refreshStatus() {
    if (!(can("status") || can("exec"))) return;
    renderStatus(await loadStatus());
  }

  onClick($("lockout"), async () => {
    const r = await api("POST", "/api/lockout");
    await refreshStatus();
    await refreshApprovals();
    $("lockout-state").textContent += " — " + r.killed + " killed";
  });
  onClick($("pause"), async () => { await api("POST", "/api/pause"); await refreshStatus(); });
  onClick($("resume"), async () => { await api("POST", "/api/resume"); await refreshStatus(); });

  let lastPollError = null;
  async function poll() {
    if (!document.hidden) {
      try {
        await refreshStatus();
        watchApprovals();
        if (lastPollError) { showError(""); lastPollError = null; }
      } catch (e) {
        showError(e.message);
        lastPollError = e;
      }
    }
    setTimeout(poll, 1000);
  }

  whoami().then(() => {
    $("approvals-section").hidden = !can("approve");
    if (!(can("status") || can("exec"))) {
      $("lockout-state").textContent = "You may not see the server's state (the status permission).";
    }
    poll();
  }).catch((e) => showError(e.message));
})();
