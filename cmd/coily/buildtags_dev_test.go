//go:build coilydev

package main

// buildTags are the tags the tests build coily with: the dev build.
const buildTags = "coilydev"
