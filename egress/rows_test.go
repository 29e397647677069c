package egress

import (
	"strconv"
	"testing"
	"time"
)

// A command naming ever new hosts cannot grow the table without bound:
// past MaxRows, its connections are counted in one row per decision.
func TestRowsBounded(t *testing.T) {
	var r rows
	now := time.Unix(0, 0)
	for i := range MaxDenyRows + 100 {
		k, _ := r.start(rowKey{host: "h" + strconv.Itoa(i) + ".example", port: 443, decision: Deny}, "not-allowlisted", "msg", now)
		r.finish(k, 1, 2, time.Millisecond, false, now)
	}
	// Refusals past their bound never crowd out where the command went.
	for i := range MaxRows {
		k, fresh := r.start(rowKey{host: "a" + strconv.Itoa(i) + ".example", port: 443, decision: Allow}, "", "", now)
		if !fresh || k.host == OtherHosts {
			t.Fatalf("allow row %d counted under %+v (fresh %v)", i, k, fresh)
		}
		r.finish(k, 10, 20, 0, false, now)
	}
	k, fresh := r.start(rowKey{host: "late.example", port: 443, decision: Allow}, "", "", now)
	if !fresh || k.host != OtherHosts {
		t.Fatalf("allow row past MaxRows: %+v, fresh %v", k, fresh)
	}
	r.finish(k, 10, 20, 0, false, now)
	list := r.list(nil)
	if want := MaxDenyRows + 1 + MaxRows + 1; len(list) != want {
		t.Fatalf("%d rows, want %d", len(list), want)
	}
	var conns, up int64
	for _, row := range list {
		conns += int64(row.Conns)
		up += row.BytesUp
	}
	if wantConns, wantUp := int64(MaxDenyRows+100+MaxRows+1), int64(MaxDenyRows+100+10*(MaxRows+1)); conns != wantConns || up != wantUp {
		t.Fatalf("counted %d connections and %d bytes up, want %d and %d", conns, up, wantConns, wantUp)
	}
	for _, row := range list {
		if row.Host.String() == OtherHosts && row.Decision == Deny && (row.Conns != 100 || row.Port != 0 || row.Message.String() != "msg") {
			t.Fatalf("overflow row: %+v", row)
		}
	}
	// A key already in the table keeps its own row.
	if got, fresh := r.start(rowKey{host: "h0.example", port: 443, decision: Deny}, "", "", now); got.host != "h0.example" || fresh {
		t.Fatalf("existing key counted under %+v (fresh %v)", got, fresh)
	}
}
