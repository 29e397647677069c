package gitproxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// maxCommandBytes bounds the command list at the head of a push.
const maxCommandBytes = 2 << 20

// checkCommands reads the command list at the head of a receive-pack
// request, the pkt-lines up to the first flush, and returns a reader of
// the whole body, which copies what follows the list to pack as it is
// read (forward.go sends it upstream). A command line holding a newline
// anywhere but at its end is refused: git hands its pre-receive hook one
// update per line, so a ref name with a newline would hand it two, the
// second the agent's own. The pack that follows is not read here (git
// reads it).
func checkCommands(body io.Reader, pack io.Writer) (io.Reader, error) {
	br := bufio.NewReader(body)
	head, err := readCommands(br)
	if err != nil {
		return nil, err
	}
	return io.MultiReader(bytes.NewReader(head), io.TeeReader(br, pack)), nil
}

// readCommands reads pkt-lines up to and with the first flush, and
// returns their bytes as read.
func readCommands(r io.Reader) ([]byte, error) {
	var head []byte
	for n := 0; ; n++ {
		var size [4]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return nil, fmt.Errorf("command list: %w", err)
		}
		head = append(head, size[:]...)
		l, err := strconv.ParseUint(string(size[:]), 16, 16)
		switch {
		case err != nil || bytes.ContainsAny(size[:], "+-"):
			return nil, fmt.Errorf("command list: pkt-line length %q is not hex", size[:])
		case l == 0:
			return head, nil
		case l < 5:
			return nil, fmt.Errorf("command list: pkt-line length %d", l)
		case len(head)+int(l) > maxCommandBytes || n >= maxUpdates+maxCertLines:
			return nil, fmt.Errorf("command list longer than %d bytes or %d lines", maxCommandBytes, maxUpdates+maxCertLines)
		}
		line := make([]byte, l-4)
		if _, err := io.ReadFull(r, line); err != nil {
			return nil, fmt.Errorf("command list: %w", err)
		}
		head = append(head, line...)
		text, _, _ := bytes.Cut(line, []byte{0})
		if i := bytes.IndexByte(text, '\n'); i >= 0 && i != len(text)-1 {
			return nil, fmt.Errorf("command %q holds a newline", oneLine(string(text)))
		}
	}
}

// maxCertLines bounds the lines of a push certificate, which comes in the
// command list.
const maxCertLines = 64
