package gitproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// report is upstream's answer to a push the proxy forwarded (forward.go):
// git's report-status, carried on side band 1, and the last line of what
// upstream said on side band 2 (its hooks' messages, its errors).
type report struct {
	unpack string            // "ok", or why upstream could not take the pack
	refs   map[string]string // each reported ref: "" when updated, else why not
	said   string            // the last line upstream said, if any
}

// Bounds of what readReport keeps of upstream's answer: the report itself
// (band 1) and the tail of what upstream said (band 2). What upstream says
// is read whatever its length, and only its tail kept: a hook that prints
// a lot must not make a push upstream applied read as refused. The time
// it may take is the upstream timeout's to bound.
const (
	maxReportBytes = 64 << 10
	maxSaidBytes   = 4096
)

// readReport reads a receive-pack result with side-band-64k: pkt-lines,
// each a band byte and its data, up to a flush. Band 1 carries the
// report's own pkt-lines ("unpack ok", then "ok REF" or "ng REF WHY" per
// ref, then a flush), band 2 messages, band 3 a fatal error. Anything
// else, a report that does not end, or a report (band 1) of more than
// maxReportBytes, is an error: the push is then not known to have happened.
func readReport(r io.Reader) (*report, error) {
	var status, said []byte
	for {
		pkt, flush, err := readPkt(r)
		if err != nil {
			return nil, fmt.Errorf("upstream's answer: %w", err)
		}
		if flush {
			break
		}
		if len(pkt) == 0 {
			return nil, errors.New("upstream's answer: a packet without a band")
		}
		switch pkt[0] {
		case 1:
			if len(status)+len(pkt)-1 > maxReportBytes {
				return nil, fmt.Errorf("upstream's report is longer than %d bytes", maxReportBytes)
			}
			status = append(status, pkt[1:]...)
		case 2:
			said = append(said, pkt[1:]...)
			if len(said) > maxSaidBytes {
				said = said[len(said)-maxSaidBytes:]
			}
		case 3:
			return nil, fmt.Errorf("upstream failed: %s", oneLine(strings.TrimSpace(string(pkt[1:]))))
		default:
			return nil, fmt.Errorf("upstream's answer: band %d", pkt[0])
		}
	}
	rep, err := parseStatus(status)
	if err != nil {
		return nil, fmt.Errorf("upstream's report: %w", err)
	}
	rep.said = lastLine(said)
	return rep, nil
}

// parseStatus reads report-status: "unpack …", then one line per ref, then
// a flush that ends the data.
func parseStatus(b []byte) (*report, error) {
	r := bytes.NewReader(b)
	rep := &report{refs: map[string]string{}}
	for n := 0; ; n++ {
		pkt, flush, err := readPkt(r)
		switch {
		case err != nil:
			return nil, err
		case flush && n == 0:
			return nil, errors.New("no unpack status")
		case flush && r.Len() != 0:
			return nil, errors.New("data after the report")
		case flush:
			return rep, nil
		}
		line := strings.TrimSuffix(string(pkt), "\n")
		if n == 0 {
			u, ok := strings.CutPrefix(line, "unpack ")
			if !ok {
				return nil, fmt.Errorf("%q is no unpack status", oneLine(line))
			}
			rep.unpack = u
			continue
		}
		if err := rep.refLine(line); err != nil {
			return nil, err
		}
	}
}

// refLine reads "ok REF" or "ng REF WHY"; a ref reported twice is an error.
func (rep *report) refLine(line string) error {
	verb, rest, _ := strings.Cut(line, " ")
	ref, why, _ := strings.Cut(rest, " ")
	switch {
	case verb == "ok" && why == "" && ref != "":
	case verb == "ng" && ref != "":
		if why == "" {
			why = "refused"
		}
	default:
		return fmt.Errorf("%q is no ref status", oneLine(line))
	}
	if _, dup := rep.refs[ref]; dup {
		return fmt.Errorf("%s reported twice", oneLine(ref))
	}
	rep.refs[ref] = why
	return nil
}

// readPkt reads one pkt-line: its data, or a flush ("0000").
func readPkt(r io.Reader) ([]byte, bool, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, false, fmt.Errorf("pkt-line: %w", err)
	}
	l, err := strconv.ParseUint(string(size[:]), 16, 16)
	switch {
	case err != nil || bytes.ContainsAny(size[:], "+-"):
		return nil, false, fmt.Errorf("pkt-line length %q is not hex", size[:])
	case l == 0:
		return nil, true, nil
	case l < 4:
		return nil, false, fmt.Errorf("pkt-line length %d", l)
	}
	pkt := make([]byte, l-4)
	if _, err := io.ReadFull(r, pkt); err != nil {
		return nil, false, fmt.Errorf("pkt-line: %w", err)
	}
	return pkt, false, nil
}

// lastLine is the last line of b that is not blank, made visible.
func lastLine(b []byte) string {
	lines := strings.FieldsFunc(string(b), func(c rune) bool { return c == '\n' || c == '\r' })
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return oneLine(l)
		}
	}
	return ""
}
