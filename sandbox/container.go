package sandbox

import (
	"os"
	"strings"
	"sync"
)

// containerRuntime is DetectRuntime, asked once.
var containerRuntime = sync.OnceValue(DetectRuntime)

// Runtime is the container runtime coily runs under, as far as it can
// tell: "podman", "docker", "kubernetes", "container" (some other), or ""
// (none: a host, or a VM).
type Runtime string

// DetectRuntime tells which container runtime, if any, this process runs
// under: podman writes /run/.containerenv, Docker /.dockerenv, Kubernetes
// sets KUBERNETES_SERVICE_HOST, and most runtimes set $container.
func DetectRuntime() Runtime {
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	return detectRuntime(exists, os.Getenv)
}

func detectRuntime(exists func(string) bool, getenv func(string) string) Runtime {
	switch {
	case getenv("KUBERNETES_SERVICE_HOST") != "":
		return "kubernetes"
	case exists("/run/.containerenv") || getenv("container") == "podman":
		return "podman"
	case exists("/.dockerenv") || getenv("container") == "docker":
		return "docker"
	case getenv("container") != "":
		return "container"
	}
	return ""
}

// ContainerFlag names, for a sandbox that failed to start under runtime r
// with bwrap's (or unshare's) error output stderr, the runtime setting the
// container lacks, or "" when the failure is not one a container setting
// explains (or r is no container).
func ContainerFlag(r Runtime, stderr string) string {
	if r == "" {
		return ""
	}
	switch {
	case strings.Contains(stderr, "mount proc") || strings.Contains(stderr, "mount /proc") ||
		strings.Contains(stderr, "Can't mount proc"):
		// The runtime masks parts of /proc (/proc/kcore, /proc/sys, …)
		// with mounts over them: the kernel then refuses a new proc in a
		// user namespace ("mount too revealing").
		return map[Runtime]string{
			"podman":     "--security-opt unmask=/proc/*",
			"docker":     "--security-opt systempaths=unconfined",
			"kubernetes": "securityContext.procMount: Unmasked (with hostUsers: false)",
		}[r] + orAny(r, "a /proc without masked paths")
	case strings.Contains(stderr, "namespace") || strings.Contains(stderr, "uid map") ||
		strings.Contains(stderr, "unshare failed"):
		// Docker's default seccomp profile refuses CLONE_NEWUSER to a
		// process without CAP_SYS_ADMIN; podman's (containers-common)
		// allows it.
		return map[Runtime]string{
			"podman":     "the default seccomp profile (a custom --security-opt seccomp=… refuses user namespaces)",
			"docker":     "--security-opt seccomp=deploy/container/seccomp.json",
			"kubernetes": "securityContext.seccompProfile: Localhost deploy/container/seccomp.json",
		}[r] + orAny(r, "a seccomp profile allowing user namespaces")
	case strings.Contains(stderr, "Permission denied") && (strings.Contains(stderr, "mount") || strings.Contains(stderr, "tmpfs")):
		// AppArmor's docker-default (and SELinux's container_t) deny mount.
		return map[Runtime]string{
			"podman":     "--security-opt apparmor=unconfined (or label=type:spc_t under SELinux)",
			"docker":     "--security-opt apparmor=unconfined",
			"kubernetes": "securityContext.appArmorProfile: Unconfined",
		}[r] + orAny(r, "an AppArmor or SELinux profile allowing mount in a user namespace")
	}
	return ""
}

// orAny returns what for a runtime ContainerFlag has no specific flag for.
func orAny(r Runtime, what string) string {
	switch r {
	case "podman", "docker", "kubernetes":
		return ""
	}
	return what
}
