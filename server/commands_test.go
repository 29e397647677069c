package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"coily.dev/coily/internal/testserver"
	coilyv1 "coily.dev/coily/proto/coily/v1"
)

const commandsPolicy = `version: 1
roles:
  operator:
    permissions: [exec, status]
    commands: [echo, sh-confirm, env]
commands:
  - {name: echo-no-secret, effect: deny, binary: /bin/echo, args: [secret, "**"], reason: not that}
  - {name: echo, binary: /bin/echo, args: ["**"], flags: {-n: true}, sandbox: native, rate: {per_minute: 10}}
  - {name: sh-confirm, binary: /bin/sh, args: ["-c", "*"], sandbox: native, confirm: true, confirm_timeout: 2m}
  - {name: env, binary: /usr/bin/env, sandbox: native, credentials: {TOKEN: "file:very-secret-ref"}}
  - {name: cat, binary: /bin/cat, args: ["**"], sandbox: native}
`

// ListCommands tells a caller the rules it may run, in policy order, and
// the deny rules for the same commands, and nothing it may not see: no
// other rule, no credential reference.
func TestListCommands(t *testing.T) {
	in := testserver.Start(t, testserver.Options{Policy: commandsPolicy})
	resp, err := in.Client.API.ListCommands(context.Background(), &coilyv1.ListCommandsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range resp.GetCommands() {
		names = append(names, c.GetRule())
	}
	if strings.Join(names, ",") != "echo,sh-confirm,env" {
		t.Fatalf("commands %q, want echo, sh-confirm, env", names)
	}
	echo, sh := resp.GetCommands()[0], resp.GetCommands()[1]
	if echo.GetCommand() != "echo" || echo.GetBinary() != "/bin/echo" || strings.Join(echo.GetFlags(), ",") != "-n" ||
		echo.GetRatePerMinute() != 10 || !echo.GetPresent() || echo.GetConfirm() {
		t.Errorf("echo = %v", echo)
	}
	if !sh.GetConfirm() || sh.GetConfirmTimeout().AsDuration().String() != "2m0s" || strings.Join(sh.GetArgs(), " ") != "-c *" {
		t.Errorf("sh-confirm = %v", sh)
	}
	if len(resp.GetDenied()) != 1 || resp.GetDenied()[0].GetRule() != "echo-no-secret" || resp.GetDenied()[0].GetReason() != "not that" {
		t.Errorf("denied = %v", resp.GetDenied())
	}
	if resp.GetPolicySha256() == "" {
		t.Error("no policy sha256")
	}
	if b, _ := protojson.Marshal(resp); strings.Contains(string(b), "very-secret-ref") || strings.Contains(string(b), "TOKEN") {
		t.Errorf("the answer names a credential: %s", b)
	}
}
