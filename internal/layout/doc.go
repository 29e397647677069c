// Package layout holds the checks of the repository's shape that anyone
// can run (go test ./internal/layout): which packages may import the
// server, how large the server package may grow, that no binary links the
// embedded etcd server, and that no code or doc cites a file outside the
// repository. It has no code of its own.
package layout
