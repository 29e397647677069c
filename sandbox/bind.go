package sandbox

import (
	"fmt"
	"os"
)

// ProxyAddrBind is the At of a Bind that gives the egress proxy's
// loopback address (Profile.ProxyAddr) rather than a file.
const ProxyAddrBind = "proxy-addr"

// Bind is one thing an exec's attachment makes visible inside the
// sandbox, at the place reserved for it (At): a host socket or file by
// Path (ProxySocketPath, KnownHostsPath, SSHAgentPath), a file already
// open (CAPath), or the egress proxy's loopback address in Path
// (ProxyAddrBind). Validate refuses any other place.
type Bind struct {
	At   string
	Path string
	File *os.File
}

// bind sets the profile's field of b's place.
func (p *Profile) bind(b Bind) {
	switch b.At {
	case ProxySocketPath:
		p.ProxySocket = b.Path
	case ProxyAddrBind:
		p.ProxyAddr = b.Path
	case KnownHostsPath:
		p.KnownHosts = b.Path
	case SSHAgentPath:
		p.SSHAgent = b.Path
	case CAPath:
		p.CAFile = b.File
	default:
		p.unknownBinds = append(p.unknownBinds, b.At)
	}
}

// checkBinds refuses a bind at a place no attachment has.
func (p *Profile) checkBinds() error {
	if len(p.unknownBinds) > 0 {
		return fmt.Errorf("no place for an attachment at %q", p.unknownBinds[0])
	}
	return nil
}
