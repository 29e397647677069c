package fastexec

// ReadEnv is what coily-exec reads itself: where the server's socket is.
var ReadEnv = []string{"COILY_SOCKET", "COILY_STATE_DIR"}

// HandOffEnv is every setting that changes what `coily exec` does beyond
// the plain call coily-exec makes: when one is set, coily-exec hands the
// command to coily exec. A test in cmd/coily checks that every COILY_*
// twin of exec's flags and of the global flags is here or in ReadEnv, so
// a new one cannot be ignored in silence.
var HandOffEnv = []string{
	// Other transports.
	"COILY_SERVER", "COILY_TSNET", "COILY_TSNET_STATE", "COILY_CONTROL_URL", "COILY_HOSTNAME", "COILY_DEV", "COILY_DEV_AS",
	"COILY_MOUNT", "COILY_KEY_FILE", "COILY_VERBOSE",
	// exec's flags.
	"COILY_TIMEOUT", "COILY_STDIN", "COILY_NOTE", "COILY_CWD", "COILY_EXEC_ENV", "COILY_JSON",
}
