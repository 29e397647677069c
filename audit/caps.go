package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Size caps of one record, so that no caller (and no refused request) can
// make a line large: argv keeps a prefix, with the length and SHA-256 of
// the whole in Details; long text is cut, with the SHA-256 of the whole.
const (
	maxArgvBytes  = 4 << 10 // all of argv
	maxArgBytes   = 1 << 10 // one argument
	maxTextBytes  = 1 << 10 // reason, principal, peer, one detail value
	maxDetailKeys = 32
	maxLists      = 16  // keys of Lists
	maxListItems  = 64  // items of one list
	maxItemBytes  = 512 // one item
)

// capRecord cuts r's caller-supplied fields to the caps.
func capRecord(r *Record) {
	total := 0
	for _, a := range r.Argv {
		total += len(a)
	}
	if total > maxArgvBytes || anyLonger(r.Argv, maxArgBytes) {
		full := sha256.New()
		for _, a := range r.Argv {
			full.Write([]byte(a))
			full.Write([]byte{0})
		}
		var kept []string
		used := 0
		for _, a := range r.Argv {
			if used >= maxArgvBytes {
				break
			}
			a = cutText(a, min(maxArgBytes, maxArgvBytes-used))
			kept = append(kept, a)
			used += len(a)
		}
		r.SetDetail("argv_cut", strconv.Itoa(len(r.Argv))+" args, "+strconv.Itoa(total)+" bytes, sha256 "+hex.EncodeToString(full.Sum(nil)))
		r.Argv = kept
	}
	if n := len(r.Egress); n > MaxEgressRows {
		// Where the command went is kept before what it was refused:
		// refusals cost it nothing and must not push the rest out.
		slices.SortStableFunc(r.Egress, func(a, b EgressRow) int {
			return cmp.Compare(btoi(a.Decision == "deny"), btoi(b.Decision == "deny"))
		})
		r.Egress = r.Egress[:MaxEgressRows]
		r.SetDetail("egress_cut", strconv.Itoa(n)+" rows, "+strconv.Itoa(MaxEgressRows)+" kept")
	}
	if n := len(r.EgressRequests); n > MaxEgressRequests {
		r.EgressRequests = r.EgressRequests[:MaxEgressRequests]
		r.SetDetail("egress_requests_cut", strconv.Itoa(n)+" requests, "+strconv.Itoa(MaxEgressRequests)+" kept")
	}
	for i := range r.EgressRequests {
		q := &r.EgressRequests[i]
		q.Host, q.Method, q.Path = cutText(q.Host, 256), cutText(q.Method, 32), cutText(q.Path, 1024)
	}
	r.Leases = slices.Clone(r.Leases)
	if n := len(r.Leases); n > MaxLeases {
		r.Leases = r.Leases[:MaxLeases]
		r.SetDetail("leases_cut", strconv.Itoa(n)+" leases, "+strconv.Itoa(MaxLeases)+" kept")
	}
	for i := range r.Leases {
		r.Leases[i] = cutText(r.Leases[i], 256)
	}
	for i := range r.Egress {
		r.Egress[i].Host = cutText(r.Egress[i].Host, 256)
		r.Egress[i].Reason = cutText(r.Egress[i].Reason, maxTextBytes)
	}
	capLists(r)
	capCredentialsUsed(r)
	r.Reason = capText(r, "reason", r.Reason)
	r.Principal = capText(r, "principal", r.Principal)
	r.Peer = capText(r, "peer", r.Peer)
	if len(r.Details) > maxDetailKeys {
		n := len(r.Details)
		for k := range r.Details {
			if len(r.Details) <= maxDetailKeys-1 {
				break
			}
			if k != "argv_cut" {
				delete(r.Details, k)
			}
		}
		r.Details["details_cut"] = strconv.Itoa(n) + " keys"
	}
	// Values cut first, then long keys renamed after the loop (a key added
	// while ranging over the map may or may not be visited), in the order
	// of the original keys, never overwriting another: a numbered suffix
	// when the cut key is taken.
	renamed := map[string]string{} // original key → value
	for k, v := range r.Details {
		if len(v) > maxTextBytes {
			v = cutText(v, maxTextBytes) + "… (" + strconv.Itoa(len(v)) + " bytes, sha256 " + sha256Hex(v) + ")"
			r.Details[k] = v
		}
		if len(k) > 64 {
			delete(r.Details, k)
			renamed[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(renamed)) {
		key := cutText(k, 64)
		for i := 2; ; i++ {
			if _, taken := r.Details[key]; !taken {
				break
			}
			suffix := "~" + strconv.Itoa(i)
			key = cutText(k, 64-len(suffix)) + suffix
		}
		r.Details[key] = renamed[k]
	}
}

// capLists bounds the lists: keys, items per list, bytes per item; what
// was cut is counted in Details["<key>_cut"] (lists past maxLists in
// Details["lists_cut"]). The lists are copied, never changed in place.
func capLists(r *Record) {
	if len(r.Lists) == 0 {
		return
	}
	out := make(map[string][]string, min(len(r.Lists), maxLists))
	for i, k := range slices.Sorted(maps.Keys(r.Lists)) {
		if i == maxLists {
			r.SetDetail("lists_cut", strconv.Itoa(len(r.Lists))+" lists, "+strconv.Itoa(maxLists)+" kept")
			break
		}
		items := r.Lists[k]
		key := cutText(k, 64)
		if n := len(items); n > maxListItems {
			r.SetDetail(key+"_cut", strconv.Itoa(n)+" items, "+strconv.Itoa(maxListItems)+" kept")
			items = items[:maxListItems]
		}
		kept := make([]string, len(items))
		for j, it := range items {
			kept[j] = cutText(it, maxItemBytes)
		}
		out[key] = kept
	}
	r.Lists = out
}

// capCredentialsUsed bounds CredentialsUsed (copied, never changed in
// place) as capLists bounds one list.
func capCredentialsUsed(r *Record) {
	if n := len(r.CredentialsUsed); n > MaxCredentialsUsed {
		r.SetDetail("credentials_used_cut", strconv.Itoa(n)+" items, "+strconv.Itoa(MaxCredentialsUsed)+" kept")
		r.CredentialsUsed = r.CredentialsUsed[:MaxCredentialsUsed]
	}
	if r.CredentialsUsed == nil {
		return
	}
	kept := make([]string, len(r.CredentialsUsed))
	for i, it := range r.CredentialsUsed {
		kept[i] = cutText(it, maxItemBytes)
	}
	r.CredentialsUsed = kept
}

// UseCredential adds what a run used of its credentials to
// CredentialsUsed (never a value).
func (r *Record) UseCredential(item string) { r.CredentialsUsed = append(r.CredentialsUsed, item) }

func anyLonger(list []string, n int) bool {
	for _, s := range list {
		if len(s) > n {
			return true
		}
	}
	return false
}

// capText cuts one text field, noting the whole's length and hash.
func capText(r *Record, name, s string) string {
	if len(s) <= maxTextBytes {
		return s
	}
	r.SetDetail(name+"_cut", strconv.Itoa(len(s))+" bytes, sha256 "+sha256Hex(s))
	return cutText(s, maxTextBytes)
}

// SetDetail sets one detail of r.
func (r *Record) SetDetail(k, v string) {
	if r.Details == nil {
		r.Details = map[string]string{}
	}
	r.Details[k] = v
}

// SetList sets one list of r, unless it has no items.
func (r *Record) SetList(k string, items []string) {
	if len(items) == 0 {
		return
	}
	if r.Lists == nil {
		r.Lists = map[string][]string{}
	}
	r.Lists[k] = items
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// cutText keeps at most n bytes of s, on a UTF-8 boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// A rune cut in half at the end is dropped.
	return strings.ToValidUTF8(s[:n], "")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
