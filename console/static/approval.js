// One approval: everything the approver needs, and the decision.
"use strict";

(() => {
  const { $, el, api, whoami, can, setText, showError, onClick } = coily;
  const parts = location.pathname.split("/");
  let id = "";
  try { id = decodeURIComponent(parts[2] || ""); } catch (e) { id = ""; }
  let decided = false;

  function gone(text) {
    $("approval").hidden = true;
    $("gone").textContent = text;
    $("gone").hidden = false;
  }

  function render(a) {
    $("approval").hidden = false;
    $("argv").textContent = a.argv_text;
    setText("requester", a.requester);
    setText("rule", a.allowed_by ? a.rule + " (its obligation; admitted by rule " + a.allowed_by + ")" : a.rule);
    setText("request-note", a.request_note);
    setText("cwd", a.cwd || "the workspace");
    const env = $("env");
    env.replaceChildren();
    for (const kv of a.env || []) env.append(el("li", { text: kv }));
    if (!(a.env || []).length) env.append(el("li", { text: "none" }));
    if (a.stdin_bytes) {
      setText("stdin", a.stdin_bytes + " bytes, sha256 " + a.stdin_sha256 + (a.stdin_bytes > 512 ? "; the first 512:" : ":"));
      $("stdin-head").textContent = a.stdin_head;
      $("stdin-head").hidden = false;
    } else {
      setText("stdin", "none");
      $("stdin-head").hidden = true;
    }
    $("waited").setAttribute("data-since", a.created_at);
    setText("waited", coily.ago(a.created_at));
    setText("expires", coily.when(a.expires_at));
    setText("workspace", a.workspace);
    setText("sandbox", a.sandbox);
    setText("network", a.network);
    const eg = $("egress");
    eg.replaceChildren();
    if (a.egress) {
      eg.append(el("li", { text: "mode: " + a.egress.mode }));
      for (const h of a.egress.allow) eg.append(el("li", { class: "mono", text: h }));
      for (const p of a.egress.presets) eg.append(el("li", { text: "preset: " + p }));
      for (const c of a.egress.cidrs) eg.append(el("li", { class: "mono", text: "cidr: " + c }));
    } else {
      eg.append(el("li", { text: a.network === "proxied" ? "none" : "no egress proxy (network " + a.network + ")" }));
    }
    setText("credentials", (a.credentials || []).join("; "));
    setText("timeout", a.timeout);
    setText("request-id", a.request_id);
    $("decide").hidden = !can("approve");
    $("no-permission").hidden = can("approve");
  }

  async function load() {
    await whoami();
    if (!can("approve")) {
      gone("You may not see or decide approvals.");
      return;
    }
    const data = await api("GET", "/api/approvals");
    const a = data.approvals.find((x) => x.id === id);
    if (!a) {
      if (!decided) gone("This approval is no longer waiting: it was decided, expired or withdrawn.");
      return;
    }
    render(a);
  }

  async function decide(verdict) {
    const note = $("note").value;
    const r = await api("POST", "/api/approvals/" + encodeURIComponent(id) + "/" + verdict, note ? { note } : undefined);
    decided = true;
    gone(r.approval.state + " by " + r.approval.decided_by);
  }
  onClick($("approve"), () => decide("approve"));
  onClick($("deny"), () => decide("deny"));

  load().then(() => {
    if (!can("approve")) return;
    const es = new EventSource("/api/approvals/stream");
    es.addEventListener("approval", (ev) => {
      const a = JSON.parse(ev.data);
      if (a.id === id && a.state !== "pending" && !decided) {
        decided = true;
        gone(a.state + (a.decided_by ? " by " + a.decided_by : ""));
        es.close();
      }
    });
    es.addEventListener("refused", () => es.close());
  }).catch((e) => showError(e.message));
})();
