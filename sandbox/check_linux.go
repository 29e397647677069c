package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// CheckUserNamespaces reports whether this user may create user
// namespaces (bubblewrap needs them), and when not, the cause and the fix.
func CheckUserNamespaces() error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
	}
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if r := containerRuntime(); r != "" {
		return fmt.Errorf("%w: user namespaces are refused (%v): in a %s container, run it with %s", ErrUnavailable, err, r,
			ContainerFlag(r, "unshare failed"))
	}
	return fmt.Errorf("%w: user namespaces are refused (%v): %s", ErrUnavailable, err, usernsCause())
}

// usernsCause reads the sysctls distributions use to restrict user
// namespaces and names the one in the way.
func usernsCause() string {
	return usernsCauseFrom(func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	})
}

// usernsCauseFrom is usernsCause over read, which returns a /proc file's
// content ("" when absent).
func usernsCauseFrom(read func(path string) string) string {
	switch {
	case read("/proc/sys/user/max_user_namespaces") == "0":
		return "user.max_user_namespaces is 0: sysctl -w user.max_user_namespaces=15000"
	case read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
		return "Debian's kernel.unprivileged_userns_clone is 0: sysctl -w kernel.unprivileged_userns_clone=1"
	case read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
		return "Ubuntu's AppArmor restricts them: install the AppArmor profile granting coily `userns` " +
			"(deploy/apparmor/coily: coily makes the sandbox's outer namespace itself; Ubuntu's bwrap-userns-restrict " +
			"profile covers /usr/bin/bwrap), or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
	}
	return UsernsHint
}
