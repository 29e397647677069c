// Package standin holds test stand-ins for real services: local servers
// that the real clients (git, gh, npm, pip, aws) talk to unchanged, so that
// tests can run those clients directly or through coily's egress proxy.
//
// Every stand-in listens on 127.0.0.1 only, is stopped (with every
// process it started) at the test's cleanup, and returns what a client
// needs to reach it: a URL, the PEM file of the CA that signed its
// certificate, and any token it checks.
//
// The package is imported only by _test.go files, never by production
// code; TestNotImportedByProduction asserts that no command of the module
// depends on it.
package standin
