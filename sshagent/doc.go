// Package sshagent owns coily's ssh agent: the one each exec whose rule
// has `ssh_keys:` gets, which lets ssh inside the sandbox authenticate
// with the rule's private keys without ever holding them. The server
// serves it on a unix socket bound into the sandbox (SSH_AUTH_SOCK) for
// the exec's lifetime and closes it when the exec ends.
//
// It speaks the agent protocol (draft-ietf-sshm-ssh-agent, and OpenSSH's
// PROTOCOL.agent for session-bind@openssh.com) by hand, answering four
// requests and refusing everything else without parsing it:
//
//   - REQUEST_IDENTITIES: the public halves of the rule's keys;
//   - EXTENSION session-bind@openssh.com: binds the connection to an ssh
//     session, accepted only when the host key's signature over the
//     session id verifies, the host key is one the rule pins for a host of
//     one of its keys, and the bind is not for a forwarded agent;
//   - SIGN_REQUEST: signs only an ssh user authentication request
//     (methods publickey and publickey-hostbound-v00@openssh.com) for the
//     latest session bound on the same connection, with a key the rule
//     gives for a host whose pinned key is that session's host key;
//   - anything else (adding, removing or locking keys, smartcard keys,
//     protocol 1, other extensions): SSH_AGENT_FAILURE.
//
// Invariants:
//   - a private key never leaves the server: not in a reply, an error, a
//     log line or a report; signatures are made for bound sessions only.
//     It does stay in the server's memory: the signer holds the parsed
//     key for the agent's life, and ParsePrivateKey's clearing of the
//     buffers it decodes is a best effort (Go cannot wipe the string the
//     key came from, nor memory the garbage collector has freed);
//   - without a valid bind on its connection nothing is signed (OpenSSH
//     8.9 and later bind before authenticating); a refused bind ends
//     signing on that connection;
//   - the set of keys never changes, and the agent ends with its exec:
//     Close closes the listener and every connection;
//   - every input is bounded (message size, connections, binds, and
//     DefaultMaxSignatures signatures an agent), the log too (the first
//     signature of each key and host key, each distinct refusal once, a
//     summary at Close; the rest counted), and
//     what a refusal reports of the input is fixed text, a fingerprint or
//     a host the rule names.
package sshagent
