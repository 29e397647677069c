// Package deploy holds no code: its tests check the deployment files
// beside it. The Termux:Widget scripts (termux/) run against a stand-in
// coily on PATH; scripts/release.sh builds a release whose archives,
// binaries and checksums are read back; and the Debian package it makes
// is installed with dpkg into a Debian root made by debootstrap, where the
// unit is verified and its ExecStart runs as the user coily. The image
// (container/) is built twice to the same digest and run with podman: the
// sandbox inside it, the socket on its volume, a lockout across a restart;
// the compose file and the Kubernetes manifests are parsed and their flags
// checked against coily serve --help. CI's entry
// point, .ci/run, is checked against the README's test command.
package deploy
