package policy

const defaultSandbox = SandboxBwrap
