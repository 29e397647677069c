package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Files rotate by size; the chain continues across them, Verify checks them
// all, Tail reads across them, and every new file begins with a checkpoint.
func TestRotateBySize(t *testing.T) {
	dir := t.TempDir()
	c := newClock(oct)
	l, err := Open(Config{Dir: dir, Now: c.Now, MaxFileSize: 2 << 10,
		Checkpoint: func() map[string]string { return map[string]string{"lockout": "inactive"} }})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 40)
	l.Close()
	files, _ := logFiles(dir)
	if len(files) < 5 {
		t.Fatalf("%d files after 40 records with a 2 KiB limit", len(files))
	}
	for i, f := range files {
		if want := (logFile{month: "2026-10", part: i}).fileName(); f.name != want {
			t.Errorf("file %d is %s, want %s", i, f.name, want)
		}
		first, _, err := firstRecord(filepath.Join(dir, f.name))
		if err != nil || first.Event != EventCheckpoint {
			t.Errorf("%s begins with %q (%v)", f.name, first.Event, err)
		}
		if fi, _ := os.Stat(filepath.Join(dir, f.name)); fi.Size() > 3<<10 {
			t.Errorf("%s is %d bytes", f.name, fi.Size())
		}
	}
	rep := mustVerify(t, dir)
	if rep.Files != len(files) || rep.Lines != 40+len(files) {
		t.Fatalf("verify: %+v", rep)
	}
	recs, err := Tail(dir, rep.Lines)
	if err != nil || len(recs) != rep.Lines || recs[len(recs)-1].Seq != uint64(rep.Lines) {
		t.Fatalf("tail across parts: %d records, %v", len(recs), err)
	}
	// Reopened, it goes on in the newest part.
	l = openLog(t, dir, c)
	appendN(t, l, 1)
	mustVerify(t, dir)
}

// A full disk: the write fails (the request is refused) but the log does
// not wedge; once there is room again the next record is written, chained
// to the last whole line. Run on a real, small filesystem (tmpfs).
func TestFullDiskRecovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs this as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	c := newClock(oct)
	l := openLog(t, dir, c)
	appendN(t, l, 5)
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	_, fillErr := f.Write(make([]byte, 1<<20))
	f.Close()
	if !errors.Is(fillErr, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", fillErr)
	}
	ctx := context.Background()
	// The last page of the log may still take a few lines.
	written := uint64(5)
	for i := 0; ; i++ {
		_, err := l.Append(ctx, sampleRecord(9))
		if errors.Is(err, ErrBroken) && errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("Append on a full disk = %v after %d lines", err, i)
		}
		written++
	}
	for range 3 {
		if _, err := l.Append(ctx, sampleRecord(9)); !errors.Is(err, ErrBroken) {
			t.Fatalf("Append on a full disk = %v, want ErrBroken", err)
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	r, err := l.Append(ctx, sampleRecord(10))
	if err != nil {
		t.Fatalf("Append after the disk has room: %v", err)
	}
	if r.Seq != written+1 {
		t.Fatalf("seq %d after recovery, want %d", r.Seq, written+1)
	}
	if rep := mustVerify(t, dir); rep.Lines != int(written+1) {
		t.Fatalf("%d lines, want %d", rep.Lines, written+1)
	}
}

// A torn last line is refused by Open, cut by Repair, which records what
// it cut; Verify then accepts the log. Repair does not mend anything else.
func TestRepairTornLine(t *testing.T) {
	dir, path := validLog(t, 3)
	data := readFile(t, path)
	writeFile(t, path, append(data, []byte(`{"id":"A000000000004","seq":4,"ti`)...))
	_, err := Open(Config{Dir: dir})
	var be *BrokenError
	if !errors.As(err, &be) || !be.Torn {
		t.Fatalf("Open of a torn log = %v, want a torn *BrokenError", err)
	}
	rep, err := Repair(Config{Dir: dir}, "local:root")
	if err != nil {
		t.Fatal(err)
	}
	if rep.CutBytes != 33 || rep.Record.Event != EventRepair || rep.Record.Seq != 4 || rep.Record.Details["cut_bytes"] != "33" {
		t.Fatalf("repair: %+v", rep)
	}
	if r := mustVerify(t, dir); r.Lines != 4 {
		t.Fatalf("after repair: %+v", r)
	}
	if _, err := Repair(Config{Dir: dir}, "x"); !errors.Is(err, ErrNotTorn) {
		t.Fatalf("second repair: %v", err)
	}
	// A damaged whole line before the torn one is not a torn write.
	_, path = validLog(t, 3)
	dir = filepath.Dir(path)
	data = readFile(t, path)
	i := strings.LastIndex(string(data), `"principal":"agent"`)
	if i < 0 {
		t.Fatal("nothing to tamper")
	}
	tampered := string(data[:i]) + `"principal":"evil!"` + string(data[i+len(`"principal":"agent"`):])
	writeFile(t, path, []byte(tampered+"{torn"))
	if _, err := Repair(Config{Dir: dir}, "x"); err == nil || !strings.Contains(err.Error(), "not a torn write") {
		t.Fatalf("repair of a tampered log: %v", err)
	}
}

// No record is large, whatever the caller gives: argv keeps a prefix with
// the whole's length and hash, text is cut with its hash.
func TestRecordCaps(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	big := strings.Repeat("A", 100<<10)
	argv := []string{"/bin/echo"}
	for range 200 {
		argv = append(argv, big[:900])
	}
	r, err := l.Append(context.Background(), Record{Event: "exec.decision", Argv: append(argv, big), Reason: big,
		Principal: big, Details: map[string]string{"note": big}})
	if err != nil {
		t.Fatal(err)
	}
	line := splitLines(readFile(t, filepath.Join(dir, "2026-10.jsonl")))[0]
	if len(line) > 12<<10 {
		t.Fatalf("a %d-byte line", len(line))
	}
	if !strings.Contains(r.Details["argv_cut"], "202 args") || !strings.Contains(r.Details["argv_cut"], "sha256 ") ||
		!strings.Contains(r.Details["reason_cut"], "102400 bytes") {
		t.Fatalf("details %v", r.Details)
	}
	mustVerify(t, dir)
}

var _ = time.Second

// A record keeps at most MaxEgressRows egress rows, where the command
// went before what it was refused, and says how many were cut.
func TestRecordCapsEgress(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	var rows []EgressRow
	for i := range MaxEgressRows + 40 {
		rows = append(rows, EgressRow{Host: fmt.Sprintf("%04d.junk", i), Port: 443, Decision: "deny", Reason: "not-allowlisted", Conns: 1})
	}
	rows = append(rows, EgressRow{Host: "zz-exfil.example", Port: 443, Decision: "allow", Conns: 1, BytesUp: 1 << 20})
	r, err := l.Append(context.Background(), Record{Event: "exec.result", Egress: rows})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Egress) != MaxEgressRows || r.Egress[0].Host != "zz-exfil.example" || !strings.Contains(r.Details["egress_cut"], "105 rows") {
		t.Fatalf("kept %d rows, first %+v, details %v", len(r.Egress), r.Egress[0], r.Details)
	}
	mustVerify(t, dir)
}

// Lease ids are kept in order up to MaxLeases, each cut to 256 bytes, and
// the record still verifies.
func TestRecordCapsLeases(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, newClock(oct))
	leases := []string{"aws/sts/coily/" + strings.Repeat("x", 400)}
	for i := range MaxLeases + 3 {
		leases = append(leases, fmt.Sprintf("aws/sts/coily/%04d", i))
	}
	r, err := l.Append(context.Background(), Record{Event: "exec.result", Leases: leases})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Leases) != MaxLeases || len(r.Leases[0]) > 256 || r.Leases[1] != "aws/sts/coily/0000" ||
		!strings.Contains(r.Details["leases_cut"], "36 leases") || len(leases[0]) != 414 {
		t.Fatalf("kept %d leases, first %d bytes, details %v", len(r.Leases), len(r.Leases[0]), r.Details)
	}
	mustVerify(t, dir)
}
