package headscaletest

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func TestManualHold(t *testing.T) {
	out := os.Getenv("HS_MANUAL")
	if out == "" {
		t.Skip()
	}
	s := Start(t, Options{Policy: os.Getenv("HS_POLICY")})
	alice := s.CreateUser(t, "alice")
	env := fmt.Sprintf("URL=%s\nCA=%s\nCONFIG=%s\nBIN=%s\nALICE=%s\nCOILY=%s\nAGENT=%s\nSTRANGER=%s\nBRIDGE=%s\n", s.URL, s.CAFile, s.config, s.bin,
		s.AuthKey(t, Key{User: alice.ID, Reusable: true}),
		s.AuthKey(t, Key{Tags: []string{"tag:coily"}, Reusable: true}),
		s.AuthKey(t, Key{Tags: []string{"tag:agent"}, Reusable: true}),
		s.AuthKey(t, Key{Tags: []string{"tag:stranger"}, Reusable: true}),
		s.AuthKey(t, Key{Tags: []string{"tag:bridge"}, Reusable: true}))
	os.WriteFile(out, []byte(env), 0o600)
	for {
		if _, err := os.Stat(out); err != nil {
			break
		}
		time.Sleep(time.Second)
	}
	os.WriteFile(out+".log", []byte(s.Log()), 0o600)
}
