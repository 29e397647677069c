package console

import (
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"coily.dev/coily/audit"
	"coily.dev/coily/policy"
	coilyv1 "coily.dev/coily/proto/coily/v1"
	"coily.dev/coily/visible"
	"coily.dev/coily/webapi"
)

// The API's views. Every text field is for display: it went through
// visible.Text (argv through visible.Argv as argv_text), so control,
// bidi and other invisible characters arrive escaped. Only "argv" carries
// the words as they are, for programs; the pages never show it.

type stopView struct {
	Active bool   `json:"active"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since,omitempty"`
	// Principal is set on a pause a principal set on itself.
	Principal string `json:"principal,omitempty"`
}

type callerView struct {
	Principal   string   `json:"principal"`
	Peer        string   `json:"peer,omitempty"`
	Roles       []string `json:"roles"`
	Permissions []string `json:"permissions"`
}

type execView struct {
	RequestID  string   `json:"request_id"`
	Principal  string   `json:"principal"`
	Rule       string   `json:"rule,omitempty"`
	Argv       []string `json:"argv"`
	ArgvText   string   `json:"argv_text"`
	Admitted   string   `json:"admitted"`
	Running    bool     `json:"running"`
	ApprovalID string   `json:"approval_id,omitempty"`
}

type statusView struct {
	Dev              bool       `json:"dev"`
	Now              string     `json:"now"`
	Caller           callerView `json:"caller"`
	Lockout          stopView   `json:"lockout"`
	Pause            stopView   `json:"pause"`
	SelfPauses       []stopView `json:"self_pauses"` // principals that paused themselves (Principal set)
	Running          int32      `json:"running"`
	PendingApprovals int32      `json:"pending_approvals"`
	Version          string     `json:"version"`
	StartedAt        string     `json:"started_at,omitempty"`
	PolicySHA256     string     `json:"policy_sha256,omitempty"`
	ExecsShown       bool       `json:"execs_shown"`
	Execs            []execView `json:"execs"`
}

type egressRuleView struct {
	Mode    string   `json:"mode"`
	Allow   []string `json:"allow"`
	Presets []string `json:"presets"`
	CIDRs   []string `json:"cidrs"`
}

type approvalView struct {
	ID          string          `json:"id"`
	RequestID   string          `json:"request_id"`
	Requester   string          `json:"requester"`
	Rule        string          `json:"rule"`
	AllowedBy   string          `json:"allowed_by,omitempty"`
	Argv        []string        `json:"argv"`
	ArgvText    string          `json:"argv_text"`
	Note        string          `json:"request_note,omitempty"`
	State       string          `json:"state"`
	DecidedBy   string          `json:"decided_by,omitempty"`
	DecideNote  string          `json:"note,omitempty"`
	CreatedAt   string          `json:"created_at"`
	ExpiresAt   string          `json:"expires_at"`
	WaitedMS    int64           `json:"waited_ms"`
	Workspace   string          `json:"workspace,omitempty"`
	Sandbox     string          `json:"sandbox,omitempty"`
	Network     string          `json:"network,omitempty"`
	Timeout     string          `json:"timeout,omitempty"`
	Egress      *egressRuleView `json:"egress,omitempty"`
	Credentials []string        `json:"credentials,omitempty"`
	// The rest of what will run, as the request gives it (escaped).
	Cwd         string   `json:"cwd,omitempty"`
	Env         []string `json:"env,omitempty"` // NAME=value, sorted
	StdinBytes  int64    `json:"stdin_bytes,omitempty"`
	StdinSHA256 string   `json:"stdin_sha256,omitempty"`
	StdinHead   string   `json:"stdin_head,omitempty"`
}

type egressRowView struct {
	Host       string  `json:"host"`
	Port       int     `json:"port"`
	Decision   string  `json:"decision"`
	Reason     string  `json:"reason,omitempty"`
	Conns      int     `json:"connections"`
	Failures   int     `json:"failures,omitempty"`
	BytesUp    int64   `json:"bytes_up"`
	BytesDown  int64   `json:"bytes_down"`
	DurationMS float64 `json:"duration_ms"`
}

type recordView struct {
	ID         string              `json:"id"`
	Seq        uint64              `json:"seq"`
	Time       string              `json:"time"`
	Host       string              `json:"host,omitempty"`
	Event      string              `json:"event"`
	Method     string              `json:"method,omitempty"`
	RequestID  string              `json:"request_id,omitempty"`
	RelayID    string              `json:"relay_id,omitempty"`
	Principal  string              `json:"principal,omitempty"`
	Transport  string              `json:"transport,omitempty"`
	Peer       string              `json:"peer,omitempty"`
	Argv       []string            `json:"argv,omitempty"`
	ArgvText   string              `json:"argv_text,omitempty"`
	Decision   string              `json:"decision,omitempty"`
	Code       string              `json:"code,omitempty"`
	Reason     string              `json:"reason,omitempty"`
	Rule       string              `json:"rule,omitempty"`
	Sandbox    string              `json:"sandbox,omitempty"`
	ExitCode   *int                `json:"exit_code,omitempty"`
	Signal     int                 `json:"signal,omitempty"`
	DurationMS float64             `json:"duration_ms,omitempty"`
	Killed     int                 `json:"killed,omitempty"`
	Details    map[string]string   `json:"details,omitempty"`
	Lists      map[string][]string `json:"lists,omitempty"`
	Egress     []egressRowView     `json:"egress,omitempty"`
	// CredentialsUsed are what the run used of its credentials (the
	// configured ones are in Lists and Details, as recorded).
	CredentialsUsed []string `json:"credentials_used,omitempty"`
}

var vt = visible.Text

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func pbStamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return stamp(t.AsTime())
}

// visibleLines is text for a <pre>: line breaks kept, every other
// control character escaped as in vt.
func visibleLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = vt(l)
	}
	return strings.Join(lines, "\n")
}

func texts(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = vt(s)
	}
	return out
}

func stopOf(s *coilyv1.StopState) stopView {
	return stopView{Active: s.GetActive(), By: vt(s.GetBy()), Reason: vt(s.GetReason()), Since: pbStamp(s.GetSince()),
		Principal: vt(s.GetPrincipal())}
}

func newStatusView(v *webapi.StatusView, dev bool, now time.Time) statusView {
	st := v.Status
	out := statusView{Dev: dev, Now: stamp(now),
		Caller: callerView{Principal: vt(st.GetCaller().GetPrincipal()), Peer: vt(st.GetCaller().GetPeer()),
			Roles: texts(st.GetCaller().GetRoles()), Permissions: texts(st.GetCaller().GetPermissions())},
		Lockout: stopOf(st.GetLockout()), Pause: stopOf(st.GetPause()), Running: st.GetRunning(),
		PendingApprovals: st.GetPendingApprovals(), Version: vt(st.GetVersion()), StartedAt: pbStamp(st.GetStartedAt()),
		PolicySHA256: vt(st.GetPolicySha256()), ExecsShown: v.ExecsShown, Execs: []execView{}, SelfPauses: []stopView{}}
	for _, p := range st.GetSelfPauses() {
		out.SelfPauses = append(out.SelfPauses, stopOf(p))
	}
	for _, e := range v.Execs {
		out.Execs = append(out.Execs, execView{RequestID: vt(e.RequestID), Principal: vt(e.Principal), Rule: vt(e.Rule),
			Argv: e.Argv, ArgvText: visible.Argv(e.Argv), Admitted: stamp(e.Admitted), Running: e.Running,
			ApprovalID: vt(e.ApprovalID)})
	}
	return out
}

func newApprovalView(a *coilyv1.Approval, rule *policy.Rule, now time.Time) approvalView {
	state := a.GetState().String()
	out := approvalView{ID: vt(a.GetId()), RequestID: vt(a.GetRequestId()), Requester: vt(a.GetRequester()),
		Rule: vt(a.GetRule()), AllowedBy: vt(a.GetAllowedBy()), Argv: a.GetArgv(), ArgvText: visible.Argv(a.GetArgv()), Note: vt(a.GetRequestNote()),
		State: stateName(state), DecidedBy: vt(a.GetDecidedBy()), DecideNote: vt(a.GetNote()),
		CreatedAt: pbStamp(a.GetCreatedAt()), ExpiresAt: pbStamp(a.GetExpiresAt())}
	if c := a.GetCreatedAt(); c != nil {
		out.WaitedMS = max(0, now.Sub(c.AsTime()).Milliseconds())
	}
	out.Cwd = vt(a.GetCwd())
	for _, k := range slices.Sorted(maps.Keys(a.GetEnv())) {
		out.Env = append(out.Env, vt(k+"="+a.GetEnv()[k]))
	}
	if n := a.GetStdinBytes(); n > 0 {
		out.StdinBytes, out.StdinSHA256, out.StdinHead = n, vt(a.GetStdinSha256()), visibleLines(string(a.GetStdinHead()))
	}
	if rule == nil {
		return out
	}
	out.Workspace, out.Sandbox, out.Network = vt(rule.Workspace), vt(rule.Sandbox), vt(rule.Network)
	if out.Network == "" {
		out.Network = policy.NetworkDeny
	}
	if rule.Timeout > 0 {
		out.Timeout = rule.Timeout.String()
	}
	if e := rule.Egress; e != nil {
		ev := &egressRuleView{Mode: vt(e.Mode), Allow: []string{}, Presets: texts(e.Presets), CIDRs: []string{}}
		for _, h := range e.Allow {
			ev.Allow = append(ev.Allow, vt(h.String()))
		}
		for _, p := range e.CIDRs {
			ev.CIDRs = append(ev.CIDRs, p.String())
		}
		out.Egress = ev
	}
	out.Credentials = ruleCredentials(rule)
	return out
}

// stateName is "pending", "approved", … from APPROVAL_STATE_PENDING.
func stateName(s string) string {
	const prefix = "APPROVAL_STATE_"
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		s = s[len(prefix):]
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func newRecordView(r audit.Record) recordView {
	out := recordView{ID: vt(r.ID), Seq: r.Seq, Time: stamp(r.Time), Host: vt(r.Host), Event: vt(r.Event), Method: vt(r.Method),
		RequestID: vt(r.RequestID), RelayID: vt(r.RelayID), Principal: vt(r.Principal), Transport: vt(r.Transport), Peer: vt(r.Peer),
		Argv: r.Argv, Decision: vt(r.Decision), Code: vt(r.Code), Reason: vt(r.Reason), Rule: vt(r.Rule),
		Sandbox: vt(r.Sandbox), ExitCode: r.ExitCode, Signal: r.Signal, DurationMS: r.DurationMS, Killed: r.Killed}
	if len(r.Argv) > 0 {
		out.ArgvText = visible.Argv(r.Argv)
	}
	if len(r.CredentialsUsed) > 0 {
		out.CredentialsUsed = texts(r.CredentialsUsed)
	}
	if len(r.Lists) > 0 {
		out.Lists = make(map[string][]string, len(r.Lists))
		for k, v := range r.Lists {
			out.Lists[vt(k)] = texts(v)
		}
	}
	if len(r.Details) > 0 {
		out.Details = make(map[string]string, len(r.Details))
		for k, v := range r.Details {
			out.Details[vt(k)] = vt(v)
		}
	}
	for _, e := range r.Egress {
		out.Egress = append(out.Egress, egressRowView{Host: vt(e.Host), Port: e.Port, Decision: vt(e.Decision),
			Reason: vt(e.Reason), Conns: e.Conns, Failures: e.Failures, BytesUp: e.BytesUp, BytesDown: e.BytesDown,
			DurationMS: e.DurationMS})
	}
	return out
}
