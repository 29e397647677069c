package access

import (
	"slices"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"coily.dev/coily/policy"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
)

// AnyPermission marks actions open to every caller that holds at least
// one permission (health, reflection, the console's pages): a caller with
// no grant at all is refused everywhere.
const AnyPermission policy.Permission = "*"

// Locked says what a lockout does to an action.
type Locked int

const (
	// RefusedWhileLocked actions are refused with lockout-active at
	// admission while a lockout is in force.
	RefusedWhileLocked Locked = iota
	// ServedWhileLocked actions stay open under a lockout.
	ServedWhileLocked
	// HandlerChecksLockout actions check the lockout in their handler,
	// atomically with what they admit (Exec and its job); admission does
	// not.
	HandlerChecksLockout
)

// Rule is an action's entry in the table.
type Rule struct {
	// Need lists the permissions any one of which admits a caller.
	Need []policy.Permission
	// Locked is what a lockout does to the action.
	Locked Locked
	// Denied is the refusal's message, %s the caller's principal; empty
	// means "<principal> may not call <method>".
	Denied string
}

// The table's names of the console's own actions ("web:" is no gRPC
// method's form, so none can be mistaken for one), also their method in
// the audit.
const (
	WebMethodPage  = "web:page"
	WebMethodKill  = "web:kill"
	WebMethodAudit = "web:audit"
)

// The git proxy's actions (package gitproxy): fetching from and pushing
// to a remote of the policy's git section.
const (
	GitMethodFetch = "git:fetch"
	GitMethodPush  = "git:push"
)

// OpsEndpoints names the operations endpoints (/metrics, /healthz,
// /readyz, and any other path of that handler) in the table: one rule
// for all of them.
const OpsEndpoints = "http:*"

// table is the one authorization table: every gRPC method the server
// serves, every console action without a gRPC twin and the operations
// endpoints. A caller needs any one of an entry's permissions. An action
// absent from the table is refused (default deny).
var table = map[string]Rule{
	coilyv1grpc.CoilyService_Exec_FullMethodName:    {Need: perms(policy.PermExec), Locked: HandlerChecksLockout},
	coilyv1grpc.CoilyService_Lockout_FullMethodName: {Need: perms(policy.PermLockout), Locked: ServedWhileLocked},
	coilyv1grpc.CoilyService_Unlock_FullMethodName:  {Need: perms(policy.PermUnlock), Locked: ServedWhileLocked},
	// Any caller allowed to exec may pause itself (its own new commands:
	// see Server.Pause); the pause permission pauses the server.
	coilyv1grpc.CoilyService_Pause_FullMethodName:  {Need: perms(policy.PermPause, policy.PermExec)},
	coilyv1grpc.CoilyService_Resume_FullMethodName: {Need: perms(policy.PermResume)},
	coilyv1grpc.CoilyService_Status_FullMethodName: {Need: perms(policy.PermStatus, policy.PermExec), Locked: ServedWhileLocked},
	// A caller allowed to exec may see what it may run.
	coilyv1grpc.CoilyService_ListCommands_FullMethodName: {Need: perms(policy.PermExec)},
	// The audit log's latest checkpoint, for a witness that pulls it (the
	// bridge's): what the log commits to, readable under a lockout.
	coilyv1grpc.CoilyService_AuditCheckpoint_FullMethodName: {Need: perms(policy.PermRelay, policy.PermAuditRead), Locked: ServedWhileLocked},

	coilyv1grpc.CoilyService_ListApprovals_FullMethodName:  {Need: perms(policy.PermApprove)},
	coilyv1grpc.CoilyService_WatchApprovals_FullMethodName: {Need: perms(policy.PermApprove)},
	coilyv1grpc.CoilyService_Decide_FullMethodName:         {Need: perms(policy.PermApprove)},

	// Relaying also needs the sandbox in the role's list, checked per call.
	coilyv1grpc.CoilyService_Relay_FullMethodName:         {Need: perms(policy.PermRelay)},
	coilyv1grpc.CoilyService_RelayTeardown_FullMethodName: {Need: perms(policy.PermRelay)},
	coilyv1grpc.CoilyService_IssueKey_FullMethodName:      {Need: perms(policy.PermKeys)},
	coilyv1grpc.CoilyService_RotateKeys_FullMethodName:    {Need: perms(policy.PermKeys)},

	healthpb.Health_Check_FullMethodName: {Need: perms(AnyPermission), Locked: ServedWhileLocked},
	healthpb.Health_Watch_FullMethodName: {Need: perms(AnyPermission), Locked: ServedWhileLocked},
	healthpb.Health_List_FullMethodName:  {Need: perms(AnyPermission), Locked: ServedWhileLocked},

	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      {Need: perms(AnyPermission), Locked: ServedWhileLocked},
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: {Need: perms(AnyPermission), Locked: ServedWhileLocked},

	// The console's own actions. A lockout leaves them open: the pages
	// (they show the lockout), killing (nothing runs, but a kill refused
	// for that would be a lie) and the audit (what happened).
	WebMethodPage: {Need: perms(AnyPermission), Locked: ServedWhileLocked},
	// Killing one command is a narrow lockout: whoever may stop every
	// command may stop one.
	WebMethodKill:  {Need: perms(policy.PermLockout), Locked: ServedWhileLocked},
	WebMethodAudit: {Need: perms(policy.PermAuditRead), Locked: ServedWhileLocked},

	// The git proxy: a caller allowed to exec may use git, on the remotes
	// whose roles it holds (checked by the proxy). A lockout refuses
	// both; a pause refuses pushes (the proxy asks the stop controls).
	GitMethodFetch: {Need: perms(policy.PermExec)},
	GitMethodPush:  {Need: perms(policy.PermExec)},

	// The operations endpoints on the tailnet (the local listener asks no
	// identity): readable under a lockout, as the state they report.
	OpsEndpoints: {Need: perms(policy.PermMetrics), Locked: ServedWhileLocked,
		Denied: "%s may not read the metrics (the metrics permission)"},
}

func perms(p ...policy.Permission) []policy.Permission { return p }

// Lookup returns the table's rule for an action.
func Lookup(action string) (Rule, bool) {
	r, ok := table[action]
	return r, ok
}

// Actions lists every action the table names, sorted.
func Actions() []string {
	out := make([]string, 0, len(table))
	for a := range table {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// WebAction is what one console request asks to do.
type WebAction string

// The console's actions.
const (
	// WebPage serves a page or one of its files: any caller that holds a
	// permission.
	WebPage      WebAction = "page"
	WebStatus    WebAction = "status"    // as Status
	WebApprovals WebAction = "approvals" // as ListApprovals
	WebDecide    WebAction = "decide"    // as Decide
	WebLockout   WebAction = "lockout"   // as Lockout
	WebPause     WebAction = "pause"     // as Pause
	WebResume    WebAction = "resume"    // as Resume
	// WebKill kills one command: the lockout permission (a narrow lockout).
	WebKill WebAction = "kill"
	// WebAudit streams the audit log: the audit-read permission.
	WebAudit WebAction = "audit"
	// WebWatchApprovals streams the approvals' changes, as WatchApprovals.
	WebWatchApprovals WebAction = "watch-approvals"
)

// webActions names the table entry of each console action: its gRPC
// twin's, or its own.
var webActions = map[WebAction]string{
	WebPage:      WebMethodPage,
	WebStatus:    coilyv1grpc.CoilyService_Status_FullMethodName,
	WebApprovals: coilyv1grpc.CoilyService_ListApprovals_FullMethodName,
	WebDecide:    coilyv1grpc.CoilyService_Decide_FullMethodName,
	WebLockout:   coilyv1grpc.CoilyService_Lockout_FullMethodName,
	WebPause:     coilyv1grpc.CoilyService_Pause_FullMethodName,
	WebResume:    coilyv1grpc.CoilyService_Resume_FullMethodName,
	WebKill:      WebMethodKill,
	WebAudit:     WebMethodAudit,

	WebWatchApprovals: coilyv1grpc.CoilyService_WatchApprovals_FullMethodName,
}

// WebActions lists every console action (for tests that walk them all).
func WebActions() []WebAction {
	out := make([]WebAction, 0, len(webActions))
	for a := range webActions {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
