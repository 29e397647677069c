package notify

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"coily.dev/coily/policy"
)

// content is a notification as every sink renders it.
type content struct {
	event    string // the webhook's event name
	title    string
	message  string
	priority int      // ntfy's 1 (min) … 5 (max)
	tags     []string // ntfy tags (emoji names)
	click    string   // the console page to open, "" when unknown
	actions  []action
	payload  Payload // the webhook body, without id
}

// action is a button: view opens url; post POSTs to it.
type action struct {
	label string
	url   string
	post  bool
}

// Webhook event names.
const (
	EventApproval = "approval.request"
	EventLockout  = "lockout"
	EventPause    = "pause"
	EventRefusals = "refusals"
	// EventCheckpoint is a copy of a signed audit checkpoint.
	EventCheckpoint = "audit.checkpoint"
)

// render builds ev's notification. console is the console's base URL
// ("" when unknown); now dates the expiry.
func render(ev Event, n *policy.Notify, console string, now time.Time) content {
	var c content
	switch {
	case ev.Kind == KindApproval && ev.Approval != nil:
		c = renderApproval(ev.Approval, n.IncludeArgv, console, now)
	case ev.Kind == KindLockout && ev.Stop != nil:
		c = renderLockout(ev.Stop, console)
	case ev.Kind == KindPause && ev.Stop != nil:
		c = renderPause(ev.Stop, console)
	case ev.Kind == KindRefusals && ev.Refusals != nil:
		c = renderRefusals(ev.Refusals, console)
	case ev.Kind == KindCheckpoint && len(ev.Checkpoint) > 0 && len(ev.Checkpoint) <= maxMessage:
		c = content{event: EventCheckpoint, title: "coily: audit checkpoint", message: string(ev.Checkpoint), priority: 1,
			payload: Payload{Checkpoint: string(ev.Checkpoint)}}
	default:
		c = content{event: string(ev.Kind), title: "coily", message: "event " + clean(string(ev.Kind), maxName), priority: 3}
	}
	c.message = cut(c.message, maxMessage)
	c.payload.Version, c.payload.Event, c.payload.Time = PayloadVersion, c.event, ev.Time.UTC()
	c.payload.Title, c.payload.Message, c.payload.URL = c.title, c.message, c.click
	return c
}

func renderApproval(a *Approval, withArgv bool, console string, now time.Time) content {
	rule, who, id := clean(a.Rule, maxName), clean(a.Requester, maxName), clean(a.ID, maxName)
	left := max(a.Expires.Sub(now).Round(time.Second), 0)
	msg := fmt.Sprintf("%s asks to run rule %s.\nApproval %s expires in %s.", who, rule, id, left)
	p := &PayloadApproval{ID: a.ID, Rule: a.Rule, Requester: a.Requester, Created: a.Created.UTC(), Expires: a.Expires.UTC()}
	if withArgv {
		line := argvLine(a.Argv)
		msg += "\n$ " + line
		p.Argv = slices.Clone(a.Argv)
	}
	c := content{event: EventApproval, title: "coily: approval waiting: " + rule, priority: 4, tags: []string{"key"},
		payload: Payload{Approval: p}}
	if console == "" {
		// No console to open or POST to: the commands that decide.
		c.message = msg + "\nApprove: coily approvals approve " + id + "\nDeny: coily approvals deny " + id
		return c
	}
	page := console + "/approvals/" + url.PathEscape(a.ID)
	api := console + "/api/approvals/" + url.PathEscape(a.ID)
	c.message, c.click = msg, page
	c.actions = []action{{label: "Open", url: page}, {label: "Approve", url: api + "/approve", post: true},
		{label: "Deny", url: api + "/deny", post: true}}
	p.URL, p.ApproveURL, p.DenyURL = page, api+"/approve", api+"/deny"
	return c
}

func renderLockout(s *Stop, console string) content {
	msg := fmt.Sprintf("Locked out by %s", clean(s.By, maxName))
	if s.Reason != "" {
		msg += ": " + clean(s.Reason, maxReason)
	}
	msg += fmt.Sprintf(".\n%d running commands killed, %d waiting approvals rejected. Every call is refused until an unlock.",
		s.Killed, s.Rejected)
	c := content{event: EventLockout, title: "coily: LOCKED OUT", message: msg, priority: 5, tags: []string{"rotating_light"},
		payload: Payload{Lockout: stopPayload(s)}}
	withConsole(&c, console, "Unlock: coily unlock")
	return c
}

func renderPause(s *Stop, console string) content {
	msg := fmt.Sprintf("Paused by %s", clean(s.By, maxName))
	if s.Reason != "" {
		msg += ": " + clean(s.Reason, maxReason)
	}
	msg += fmt.Sprintf(".\nNew commands are refused; %d running commands finish.", s.Running)
	c := content{event: EventPause, title: "coily: paused", message: msg, priority: 3, tags: []string{"pause_button"},
		payload: Payload{Pause: stopPayload(s)}}
	withConsole(&c, console, "Resume: coily resume")
	return c
}

func renderRefusals(r *Refusals, console string) content {
	codes := make([]string, 0, len(r.Codes))
	for _, code := range slices.Sorted(maps.Keys(r.Codes)) {
		codes = append(codes, clean(code, 32)+"="+strconv.Itoa(r.Codes[code]))
	}
	msg := fmt.Sprintf("%s was refused %d times in %s (%s).\nThe audit log has each refusal.",
		clean(r.Caller, maxName), r.Count, r.Last.Sub(r.First).Round(time.Second), strings.Join(codes, ", "))
	c := content{event: EventRefusals, title: "coily: repeated refusals", message: msg, priority: 3, tags: []string{"no_entry"},
		payload: Payload{Refusals: &PayloadRefusals{Caller: r.Caller, Count: r.Count, Codes: maps.Clone(r.Codes),
			First: r.First.UTC(), Last: r.Last.UTC(), WindowSeconds: int64(r.Window / time.Second)}}}
	withConsole(&c, console, "")
	return c
}

// withConsole links the console's front page; without a console, the
// message ends with command, the CLI's way to act on it ("" for none).
func withConsole(c *content, console, command string) {
	if console == "" {
		if command != "" {
			c.message += "\n" + command
		}
		return
	}
	c.click = console + "/"
	c.actions = []action{{label: "Open console", url: c.click}}
}

func stopPayload(s *Stop) *PayloadStop {
	return &PayloadStop{By: s.By, Reason: s.Reason, Killed: s.Killed, ApprovalsRejected: s.Rejected, Running: s.Running}
}
