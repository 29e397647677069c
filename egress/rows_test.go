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
	for i := range MaxRows + 100 {
		k := r.start(rowKey{host: "h" + strconv.Itoa(i) + ".example", port: 443, decision: Deny}, "not-allowlisted", "msg", now)
		r.finish(k, 1, 2, time.Millisecond, false, now)
	}
	k := r.start(rowKey{host: "late.example", port: 443, decision: Allow}, "", "", now)
	r.finish(k, 10, 20, 0, false, now)
	list := r.list()
	if len(list) != MaxRows+2 {
		t.Fatalf("%d rows, want %d", len(list), MaxRows+2)
	}
	var conns, up int64
	for _, row := range list {
		conns += int64(row.Conns)
		up += row.BytesUp
	}
	if conns != MaxRows+101 || up != MaxRows+100+10 {
		t.Fatalf("counted %d connections and %d bytes up, want %d and %d", conns, up, MaxRows+101, MaxRows+110)
	}
	for _, row := range list {
		if row.Host == OtherHosts && row.Decision == Deny && (row.Conns != 100 || row.Port != 0 || row.Message != "msg") {
			t.Fatalf("overflow row: %+v", row)
		}
	}
	// A key already in the table keeps its own row.
	if got := r.start(rowKey{host: "h0.example", port: 443, decision: Deny}, "", "", now); got.host != "h0.example" {
		t.Fatalf("existing key counted under %+v", got)
	}
}
