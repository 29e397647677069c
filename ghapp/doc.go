// Package ghapp mints GitHub App installation tokens for one command:
// scoped to one repository and to the permissions a rule lists, revoked
// when the command ends.
//
// The App's private key signs a short JSON Web Token (RS256, the standard
// library's crypto/rsa; iat 60 s in the past, exp at most 10 minutes
// ahead, iss the App's id), with which the client asks the GitHub API
// (POST /app/installations/{id}/access_tokens) for a token of the one
// repository and the listed permissions. The answer is checked before the
// token is used: the one repository asked for, no permission beyond those
// asked for (GitHub adds metadata: read to every token), an expiry within
// the hour. A token that fails a check is revoked at once
// (DELETE /installation/token) and refused.
//
// Invariants: no error, log line or String method of this package holds a
// token, a JWT or a key; every request is bounded by a timeout; redirects
// are never followed (the JWT goes to the configured API alone).
package ghapp
