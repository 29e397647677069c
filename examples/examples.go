// Package examples carries the example policies, embedded so that
// `coily dev` runs without a checkout.
package examples

import _ "embed"

// DevPolicy is examples/dev.yaml, the policy of `coily dev`.
//
//go:embed dev.yaml
var DevPolicy []byte
