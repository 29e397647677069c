//go:build !coilydev

package main

// buildTags are the tags the tests build coily with: none.
const buildTags = ""
