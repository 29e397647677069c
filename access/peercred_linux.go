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
	var cred *unix.Ucred
	var credErr error
	err = raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return localPeer{}, err
	}
	if credErr != nil {
		return localPeer{}, credErr
	}
	return localPeer{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}
