package testserver

import "time"

// WebPolicy gives the console's callers (WebNodes) the console's roles;
// the local operator runs the commands the tests stop or confirm.
const WebPolicy = `version: 1
limits: {concurrency: 4}
roles:
  operator:
    permissions: [exec, lockout, unlock, pause, resume, status, approve]
    commands: ["*"]
  owner:
    permissions: [lockout, pause, resume, status, approve, audit-read]
  watcher:
    permissions: [status]
  agent:
    permissions: [exec]
    commands: [echo]
grants:
  - {principals: ["tag:owner"], roles: [owner]}
  - {principals: ["tag:watch"], roles: [watcher]}
  - {principals: ["tag:agent"], roles: [agent]}
commands:
  - {name: confirm-echo, binary: /bin/echo, args: [confirm, "**"], sandbox: native, confirm: true, confirm_timeout: 5m}
  - {name: confirm-printf, binary: /usr/bin/printf, args: ["**"], flags: any, sandbox: native, confirm: true, confirm_timeout: 5m}
  - {name: echo, binary: /bin/echo, args: ["**"], flags: any, sandbox: native}
  - {name: sh, binary: /bin/sh, args: ["**"], flags: any, sandbox: native, timeout: 5m}
`

// The console's callers on the fake tailnet of WebNodes, by remote
// address, with their roles in WebPolicy.
const (
	WebOwner    = "100.64.0.1:40001" // tag:owner: the owner's phone
	WebWatcher  = "100.64.0.2:40002" // tag:watch: sees the status only
	WebAgent    = "100.64.0.3:40003" // tag:agent: runs echo, may pause itself
	WebStranger = "100.64.0.4:40004" // tag:stranger: a node with no role
	WebUnknown  = "100.64.0.9:40009" // not a node of the tailnet
)

// WebNodes are the fake tailnet's nodes (WhoIsTags) at the callers'
// addresses.
var WebNodes = map[string]FakeNode{
	"100.64.0.1": {Name: "phone", Tags: []string{"tag:owner"}},
	"100.64.0.2": {Name: "tv", Tags: []string{"tag:watch"}},
	"100.64.0.3": {Name: "ci", Tags: []string{"tag:agent"}},
	"100.64.0.4": {Name: "guest", Tags: []string{"tag:stranger"}},
}

// WebOptions serve WebPolicy to the callers of WebNodes, with a short
// kill grace for the tests that kill commands.
func WebOptions() Options {
	return Options{Policy: WebPolicy, WhoIs: WhoIsTags(WebNodes), KillGrace: 200 * time.Millisecond}
}
