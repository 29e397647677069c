// Package gitproxy is coily's git proxy: git's smart HTTP (protocol v2
// and v0/v1) at /git/<host>[:<port>]/<repository path>, for agents that
// hold no credential. It serves the remotes of the policy's git section
// and nothing else.
//
// One request goes through ServeHTTP: the path is read strictly
// (ParsePath), the caller admitted by the gate (access: git:fetch or
// git:push, identified by the tailnet's WhoIs or the local socket's peer
// credentials), the remote found in the policy and the caller's roles
// checked against it. Then:
//
//   - a fetch (info/refs, git-upload-pack) is served by git itself (git
//     upload-pack, run as git http-backend runs it) from a per-remote
//     bare cache under the state directory, which is refreshed from
//     upstream (git fetch --prune, unless upstream's heads and tags, asked
//     first, are the cache's: lsrefs.go) on each fetch's ref advertisement
//     (protocol v2's, which holds no refs, runs beside it, and the
//     fetch's ls-refs waits for it) and a push's unless it was within
//     30 s; only objects upstream published ever enter it, and the caches
//     are bounded in bytes, the least recently used removed whole
//     (evict.go);
//   - a push (git-receive-pack) is received by git itself into a fresh
//     private bare repository whose objects borrow the cache and whose
//     refs are upstream's current values. git checks the pack (fsck,
//     connectivity, size), and its pre-receive hook hands the ref updates
//     and the quarantined objects to the proxy through two FIFOs (hook.go).
//     The proxy classifies each update with git (create, fast-forward,
//     force, delete, tag), applies the remote's push policy (the whole
//     push is refused if one update is), waits for an approval when the
//     policy asks for one, and pushes upstream: one ref over https as
//     the agent's own pack, after the proxy's own command whose old value
//     is the lease, in one receive-pack POST (forward.go); several refs,
//     or over ssh, by git push from the quarantine with a lease on each
//     ref's old value. The hook's exit status is upstream's answer.
//
// Invariants:
//   - upstream is only ever the host the remote names, over https, with
//     redirects refused, or over ssh, trusting only the host keys the
//     remote pins; the address classified as egress classifies it (a
//     private one needs the remote's allow_cidrs) and pinned;
//   - the credential goes to git in its environment (never argv), scoped
//     to the upstream's URL, and never to the agent; an ssh key is held
//     in memory and offered by an ssh agent that lives for one git run
//     (ssh.go), never written;
//   - no pack is parsed here: git reads every byte of it; the proxy reads
//     only a push's command list, before git (commands.go);
//   - every refusal answers a one-line text/plain body starting with its
//     refusal code, and is audited; one record per push, one per fetch.
package gitproxy
