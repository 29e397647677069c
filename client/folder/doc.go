// Package folder is the client of the filesystem transport: a
// network-less sandbox's `coily exec` through the shared folder that
// coily's bridge serves (docs/protocol.md). Client writes a request
// signed with the sandbox's key (KeyFile, which `coily key` writes) into
// the folder and waits for the bridge's response; FindMount and KeyPath
// find the folder and the key from the environment.
//
// It is apart from package client so that the clients which never use a
// shared folder (coily-exec and the shims) link no descriptor parser.
package folder
