package keystore

import "coily.dev/coily/keystore/credref"

// Ref is a parsed credential reference (see package credref).
type Ref = credref.Ref

// ParseRef parses a credential reference (credref.Parse).
func ParseRef(s string) (Ref, error) { return credref.Parse(s) }
