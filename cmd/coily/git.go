package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"tailscale.com/tsnet"

	"coily.dev/coily/access"
	"coily.dev/coily/client"
	"coily.dev/coily/client/statedir"
	"coily.dev/coily/gitproxy"
	"coily.dev/coily/httpserve"
	"coily.dev/coily/policy"
	"coily.dev/coily/server"
)

// gitServers serve the git proxy (package gitproxy) on the local socket
// git.sock beside coily.sock (callers identified by their peer
// credentials) and, with a tailnet node, on its port client.GitPort
// (callers identified by WhoIs).
type gitServers struct {
	servers []*httpserve.Server
	done    chan error
}

func startGit(log *slog.Logger, srv *server.Server, o serveOptions, node *tsnet.Server) (*gitServers, error) {
	gs := &gitServers{done: make(chan error, 2)}
	h, err := srv.GitProxy(o.gitCacheMax, o.gitCacheRemoteMax)
	if err != nil {
		// Without git on this host there is no proxy; the rest serves.
		log.Warn("not serving the git proxy", "err", err)
		return gs, nil
	}
	sock := statedir.GitSocket(filepath.Dir(o.socket))
	local, err := access.ListenLocal(sock, o.group)
	if err != nil {
		return nil, fmt.Errorf("git socket: %w", err)
	}
	ls := httpserve.New(h, gitproxy.Limits, nil)
	ls.ConnContext = access.LocalConnContext(access.HostUsers{})
	gs.serve(local, ls)
	addr := ""
	if node != nil {
		tl, err := node.Listen("tcp", ":"+strconv.Itoa(client.GitPort))
		if err != nil {
			gs.close()
			return nil, fmt.Errorf("git tailnet listener: %w", err)
		}
		gs.serve(tl, srv.GitHTTPServer(h))
		addr = net.JoinHostPort(node.Hostname, strconv.Itoa(client.GitPort))
	}
	total, perRemote := h.CacheBudgets()
	log.Info("serving the git proxy", "socket", sock, "tailnet", addr, "cache_max", total, "cache_remote_max", perRemote)
	return gs, nil
}

func (gs *gitServers) serve(l net.Listener, hs *httpserve.Server) {
	gs.servers = append(gs.servers, hs)
	go func() { gs.done <- hs.Serve(l) }()
}

// close stops the servers, letting requests in flight finish for a
// moment, and waits for them.
func (gs *gitServers) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range gs.servers {
		if hs.Shutdown(ctx) != nil {
			hs.Close()
		}
	}
	for range gs.servers {
		<-gs.done
	}
}

// gitCacheBudgets reads --git-cache-max and --git-cache-remote-max: byte
// counts with units (policy.ParseSize), the remote's at most the total.
func gitCacheBudgets(total, perRemote string) (int64, int64, error) {
	t, err := policy.ParseSize(total)
	if err != nil {
		return 0, 0, fmt.Errorf("--git-cache-max: %w", err)
	}
	r, err := policy.ParseSize(perRemote)
	if err != nil {
		return 0, 0, fmt.Errorf("--git-cache-remote-max: %w", err)
	}
	if r > t {
		return 0, 0, fmt.Errorf("--git-cache-remote-max %s is more than --git-cache-max %s", perRemote, total)
	}
	return t, r, nil
}
