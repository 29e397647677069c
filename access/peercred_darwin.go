package access

import (
	"net"

	"golang.org/x/sys/unix"
)

func readPeerCred(c *net.UnixConn) (localPeer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return localPeer{}, err
	}
	var cred *unix.Xucred
	var credErr error
	err = raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	})
	if err != nil {
		return localPeer{}, err
	}
	if credErr != nil {
		return localPeer{}, credErr
	}
	p := localPeer{UID: int(cred.Uid), PID: -1}
	if cred.Ngroups > 0 {
		p.GID = int(cred.Groups[0])
	}
	return p, nil
}
