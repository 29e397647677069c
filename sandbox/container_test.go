package sandbox

import (
	"strings"
	"testing"
)

func TestDetectRuntime(t *testing.T) {
	for _, tc := range []struct {
		files []string
		env   map[string]string
		want  Runtime
	}{
		{nil, nil, ""},
		{[]string{"/run/.containerenv"}, nil, "podman"},
		{nil, map[string]string{"container": "podman"}, "podman"},
		{[]string{"/.dockerenv"}, nil, "docker"},
		{[]string{"/.dockerenv"}, map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "kubernetes"},
		{nil, map[string]string{"container": "lxc"}, "container"},
	} {
		got := detectRuntime(func(p string) bool {
			for _, f := range tc.files {
				if f == p {
					return true
				}
			}
			return false
		}, func(k string) string { return tc.env[k] })
		if got != tc.want {
			t.Errorf("%v %v: %q, want %q", tc.files, tc.env, got, tc.want)
		}
	}
}

func TestContainerFlag(t *testing.T) {
	const (
		bwrapProc   = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
		unshareProc = "unshare: mount /proc failed: Operation not permitted"
		userns      = "bwrap: Creating new namespace failed: Operation not permitted"
		unshareNS   = "unshare: unshare failed: Operation not permitted"
		tmpfs       = "bwrap: Failed to mount tmpfs: Permission denied"
	)
	for _, tc := range []struct {
		r      Runtime
		stderr string
		want   string // "" : no flag
	}{
		{"", bwrapProc, ""},
		{"podman", bwrapProc, "--security-opt unmask=/proc/*"},
		{"podman", unshareProc, "--security-opt unmask=/proc/*"},
		{"docker", bwrapProc, "systempaths=unconfined"},
		{"kubernetes", unshareProc, "procMount: Unmasked"},
		{"container", bwrapProc, "a /proc without masked paths"},
		{"docker", userns, "seccomp=deploy/container/seccomp.json"},
		{"docker", unshareNS, "seccomp=deploy/container/seccomp.json"},
		{"podman", userns, "default seccomp profile"},
		{"container", userns, "seccomp profile allowing user namespaces"},
		{"docker", tmpfs, "apparmor=unconfined"},
		{"podman", tmpfs, "apparmor=unconfined"},
		{"podman", "bwrap: execvp /bin/nope: No such file or directory", ""},
		{"podman", "", ""},
		// Hostile or odd output names no flag it does not explain.
		{"podman", "proc", ""},
		{"kubernetes", strings.Repeat("x", 1<<16), ""},
	} {
		got := ContainerFlag(tc.r, tc.stderr)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%q %q: %q, want %q", tc.r, tc.stderr, got, tc.want)
		}
	}
}

func FuzzContainerFlag(f *testing.F) {
	f.Add("podman", "bwrap: Can't mount proc on /newroot/proc: Operation not permitted")
	f.Add("docker", "bwrap: Creating new namespace failed: Operation not permitted")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, r, stderr string) {
		got := ContainerFlag(Runtime(r), stderr)
		if r == "" && got != "" {
			t.Fatalf("no runtime, flag %q", got)
		}
	})
}
