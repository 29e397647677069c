package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"coily.dev/coily/cli"
)

// --tsnet without --server, or with a --server no node could dial, is a
// usage error (exit 2): nothing was tried, so it is not "unreachable" (69).
func TestTsnetSettingsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--tsnet", "status"}, "--tsnet needs --server"},
		{map[string]string{"COILY_TSNET": "1"}, []string{"status"}, "--tsnet needs --server"},
		{nil, []string{"--tsnet", "--server", "coily:abc", "status"}, `bad port "abc"`},
		{nil, []string{"--tsnet", "--server", "coily:0", "status"}, "bad port"},
		{nil, []string{"--tsnet", "--server", "coily:65536", "status"}, "bad port"},
		{nil, []string{"--tsnet", "--server", "coily:", "status"}, "bad port"},
		{nil, []string{"--tsnet", "--server", ":7443", "status"}, "want HOST[:PORT]"},
		{nil, []string{"--tsnet", "--server", "co ily", "exec", "--", "gh"}, "want HOST[:PORT]"},
		{map[string]string{"COILY_SERVER": "coily:-1"}, []string{"--tsnet", "exec", "--", "gh"}, "bad port"},
	} {
		var out, errb bytes.Buffer
		a := &cli.App{Name: "coily", Version: "t", Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			LookupEnv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }}
		tsnetDialer(a)
		code := a.Run(context.Background(), a.Root(), tc.args)
		if code != cli.ExitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v %q: exit %d, stderr %q; want 2 and %q", tc.env, tc.args, code, errb.String(), tc.want)
		}
	}
}
