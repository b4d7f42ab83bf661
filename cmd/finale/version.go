package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

const versionUsage = `usage: finale version

Prints the version of the finale module this binary was built from (the
release, v0.1.0, when installed with go install ...@v0.1.0; a pseudo-version
or (devel) when built in a checkout), the commit and whether the tree had
uncommitted changes (when the build recorded them), and the Go version.
`

// Messages of finale version.
const (
	msgVersionArgs = "unexpected arguments %q: finale version takes none"
	develVersion   = "(devel)"
	// revisionLen shortens a commit hash as git does for humans.
	revisionLen = 12
)

// printVersion prints the build's version line.
func printVersion(out io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		// Only a binary built without module support has none.
		bi = &debug.BuildInfo{}
	}
	_, err := fmt.Fprintln(out, versionLine(bi))
	return err
}

// versionLine is "finale VERSION (commit REV[, modified], GOVERSION)": the
// module version the go command stamped (a tag or a pseudo-version, or
// "(devel)" when it had none), and the vcs settings it recorded, which a
// go install from the module proxy does not have (the version names the
// commit then).
func versionLine(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = develVersion
	}
	var details []string
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		details = append(details, "commit "+rev[:min(len(rev), revisionLen)])
	}
	if settings["vcs.modified"] == "true" {
		details = append(details, "modified")
	}
	if bi.GoVersion != "" {
		details = append(details, bi.GoVersion)
	}
	if len(details) == 0 {
		return "finale " + v
	}
	return "finale " + v + " (" + strings.Join(details, ", ") + ")"
}
