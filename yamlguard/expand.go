package yamlguard

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// CheckExpanded refuses a node tree (as go.yaml.in/yaml/v3 parsed it,
// aliases not followed) whose values, with every alias expanded as
// decoding into Go values expands it, are more than maxNodes: an alias
// bomb costs nothing to parse and everything to decode. The reader's own
// guard lets a bomb of wide fan-out through. Each anchored node is sized
// once, so the check is linear in the tree; an alias into its own anchor
// is refused.
func CheckExpanded(root *yaml.Node, maxNodes int) error {
	x := expander{max: maxNodes, sizes: map[*yaml.Node]int{}}
	if n := x.size(root); n > maxNodes {
		return x.err
	}
	return nil
}

type expander struct {
	max   int
	sizes map[*yaml.Node]int // anchored nodes sized so far; -1 while being sized
	err   *Error
}

// size returns n's expanded values, or more than x.max (with x.err set).
func (x *expander) size(n *yaml.Node) int {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		t := n.Alias
		s, seen := x.sizes[t]
		switch {
		case seen && s < 0:
			x.err = &Error{Line: n.Line, Column: n.Column, Msg: "an alias inside its own anchor"}
			return x.max + 1
		case !seen:
			x.sizes[t] = -1
			s = x.size(t)
			x.sizes[t] = s
		}
		if s > x.max {
			x.fail(n)
		}
		return s
	}
	total := 1
	for _, c := range n.Content {
		if total += x.size(c); total > x.max {
			x.fail(n)
			return total
		}
	}
	return total
}

func (x *expander) fail(n *yaml.Node) {
	if x.err == nil {
		x.err = &Error{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("more than %d values with aliases expanded", x.max)}
	}
}
