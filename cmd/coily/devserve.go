//go:build coilydev

package main

import (
	"fmt"

	"github.com/spf13/pflag"
)

// devServeFlags adds coily serve's development-build flags, hidden from
// help and docs/cli.md: --dev-audit-max-file-size rotates the audit log's
// files at that many bytes (0: audit.DefaultMaxFileSize, 64 MiB), so that
// end-to-end tests of a real server see rotations (and attacks on a log of
// several files) within a few records. A release build refuses the flag
// as unknown: no production configuration can carry it.
func devServeFlags(fs *pflag.FlagSet) func() (int64, error) {
	size := fs.Int64("dev-audit-max-file-size", 0, "development builds: rotate the audit log's files at this many bytes (0: 64 MiB)")
	_ = fs.MarkHidden("dev-audit-max-file-size")
	return func() (int64, error) {
		if *size < 0 {
			return 0, fmt.Errorf("--dev-audit-max-file-size %d: must be 0 or more", *size)
		}
		return *size, nil
	}
}
