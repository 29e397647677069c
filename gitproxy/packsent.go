package gitproxy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A forwarded push (forward.go) sends upstream exactly what git push
// would: the objects of the agent's pack are each one the update needs —
// reachable from its new value and from none of upstream's refs — and the
// bytes sent end with the pack's own checksum. An agent's pack holding an
// object the update does not need (a blob no ref reaches, which upstream
// would keep and serve by its id, unseen by the approver and the audit),
// or bytes after its end, goes by git push instead, which sends only what
// the update reaches.

// maxForwardObjects bounds the objects of a pack the proxy forwards; a
// larger push goes by git push.
const maxForwardObjects = 20000

// sendLength returns how many bytes of the agent's pack (ps.pack) go
// upstream with the push's one update, or why the push must go by git
// push. The quarantine holds the one pack git received and checked; env
// reads it.
func (p *Proxy) sendLength(ctx context.Context, env []string, ps *push) (int64, error) {
	u := ps.updates[0]
	if zero(u.new) {
		return 0, nil // a delete sends no pack
	}
	hashLen := len(u.new) / 2
	f, err := os.Open(ps.pack)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var head [12]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return 0, fmt.Errorf("the pack's header: %w", err)
	}
	n := binary.BigEndian.Uint32(head[8:])
	if string(head[:4]) != "PACK" || n == 0 || n > maxForwardObjects {
		return 0, fmt.Errorf("a pack of %d objects", n)
	}
	sent, end, err := receivedObjects(ps.quarantine, hashLen, int(n))
	if err != nil {
		return 0, err
	}
	if err := checkTrailer(f, end, hashLen); err != nil {
		return 0, err
	}
	need, err := p.neededObjects(ctx, env, u, ps.refs)
	if err != nil {
		return 0, err
	}
	for _, oid := range sent {
		if !need[oid] {
			return 0, fmt.Errorf("the pack holds %s, which the update does not need", short(oid))
		}
	}
	return end + int64(hashLen), nil
}

// receivedObjects reads the index of the one pack in quarantine, which
// git wrote from the agent's n objects (the bases of a thin pack appended
// after them), and returns those n objects' ids and where the agent's
// pack's entries end (its checksum follows).
func receivedObjects(quarantine string, hashLen, n int) ([]string, int64, error) {
	idxs, err := filepath.Glob(filepath.Join(quarantine, "pack", "pack-*.idx"))
	if err != nil || len(idxs) != 1 {
		return nil, 0, fmt.Errorf("%d pack indexes in the quarantine", len(idxs))
	}
	data, err := os.ReadFile(idxs[0])
	if err != nil {
		return nil, 0, err
	}
	ids, offs, err := parseIndex(data, hashLen)
	if err != nil {
		return nil, 0, err
	}
	if len(ids) < n {
		return nil, 0, fmt.Errorf("the index holds %d of the pack's %d objects", len(ids), n)
	}
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(offs[a], offs[b]) })
	sent := make([]string, n)
	for i, j := range order[:n] {
		sent[i] = ids[j]
	}
	if len(ids) > n {
		return sent, int64(offs[order[n]]), nil
	}
	st, err := os.Stat(strings.TrimSuffix(idxs[0], ".idx") + ".pack")
	if err != nil {
		return nil, 0, err
	}
	return sent, st.Size() - int64(hashLen), nil
}

// parseIndex reads a version 2 pack index: each object's id (hex) and
// offset in the pack.
func parseIndex(d []byte, hashLen int) ([]string, []uint64, error) {
	const head = 8 + 256*4
	if len(d) < head+2*hashLen || !bytes.Equal(d[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		return nil, nil, errors.New("not a version 2 pack index")
	}
	count := int(binary.BigEndian.Uint32(d[head-4 : head]))
	ids := head
	offs := ids + count*(hashLen+4)
	large := offs + count*4
	if count > maxForwardObjects*2 || len(d) < large+2*hashLen {
		return nil, nil, fmt.Errorf("a pack index of %d objects in %d bytes", count, len(d))
	}
	nLarge := (len(d) - large - 2*hashLen) / 8
	oids := make([]string, count)
	at := make([]uint64, count)
	for i := range count {
		oids[i] = fmt.Sprintf("%x", d[ids+i*hashLen:ids+(i+1)*hashLen])
		o := binary.BigEndian.Uint32(d[offs+i*4:])
		at[i] = uint64(o)
		if o&0x80000000 != 0 {
			k := int(o &^ 0x80000000)
			if k >= nLarge {
				return nil, nil, errors.New("a pack index's large offset out of range")
			}
			at[i] = binary.BigEndian.Uint64(d[large+k*8:])
		}
	}
	return oids, at, nil
}

// checkTrailer checks that the agent's pack, read from f, ends at end
// with its checksum: the bytes forwarded are a whole pack, and nothing
// after it.
func checkTrailer(f *os.File, end int64, hashLen int) error {
	var h hash.Hash = sha1.New()
	if hashLen == sha256.Size {
		h = sha256.New()
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.CopyN(h, f, end); err != nil {
		return fmt.Errorf("the pack is shorter than git read: %w", err)
	}
	sum := make([]byte, hashLen)
	if _, err := io.ReadFull(f, sum); err != nil {
		return fmt.Errorf("the pack's checksum: %w", err)
	}
	if !bytes.Equal(sum, h.Sum(nil)) {
		return errors.New("the pack's checksum does not match what git read")
	}
	return nil
}

// neededObjects is the set of objects u's new value reaches that none of
// upstream's refs (as advertised to the agent) reaches: what git push
// sends.
func (p *Proxy) neededObjects(ctx context.Context, env []string, u *update, refs map[string]string) (map[string]bool, error) {
	var in strings.Builder
	in.WriteString(u.new + "\n")
	for _, oid := range refs {
		in.WriteString("^" + oid + "\n")
	}
	out, err := p.runInput(ctx, env, strings.NewReader(in.String()), "rev-list", "--objects", "--stdin")
	if err != nil {
		return nil, err
	}
	need := map[string]bool{}
	for l := range strings.SplitSeq(string(out), "\n") {
		if oid, _, _ := strings.Cut(l, " "); len(oid) == len(u.new) {
			need[oid] = true
		}
	}
	return need, nil
}
