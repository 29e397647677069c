package sandbox

// CAPath is where a rule's CA bundle (Profile.CAFile) appears inside the
// sandbox.
const CAPath = "/run/coily/ca.pem"

// CAEnv are the variables that point TLS clients at a CA bundle: set to
// CAPath when the profile has one. Each replaces the system's roots for
// its tool, but NODE_EXTRA_CA_CERTS, which node adds to them.
var CAEnv = []string{"SSL_CERT_FILE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT",
	"NODE_EXTRA_CA_CERTS", "AWS_CA_BUNDLE"}
