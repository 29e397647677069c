package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	coilyv1 "coily.dev/coily/proto/coily/v1"
	coilyv1grpc "coily.dev/coily/proto/coily/v1/coilyv1grpc"
)

// listServer answers ListCommands with its list (a unit seam for the
// commands that print or act on it).
type listServer struct {
	coilyv1grpc.UnimplementedCoilyServiceServer
	list *coilyv1.ListCommandsResponse
}

func (s *listServer) ListCommands(context.Context, *coilyv1.ListCommandsRequest) (*coilyv1.ListCommandsResponse, error) {
	return s.list, nil
}

// serveList serves list on a local socket and returns its path.
func serveList(t *testing.T, list *coilyv1.ListCommandsResponse) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "coily-cli-") // short: a socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coilyv1grpc.RegisterCoilyServiceServer(g, &listServer{list: list})
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return sock
}
