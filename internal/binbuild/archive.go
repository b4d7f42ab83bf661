package binbuild

import (
	"fmt"
	"io/fs"
	"strings"

	"golang.org/x/tools/txtar"
)

// A build module cannot be embedded as it is: a directory holding a go.mod
// is another module, left out of this module's zip and out of go:embed's
// reach. So it is embedded as one txtar archive (the format the go command's
// own tests keep modules in): plain text, so a change to the build module
// shows in review line by line, and its fs.FS has the module's own file
// names, so the stamp is the same whether the files come from a checkout or
// from the archive.

// Files returns the build module's files that a Spec copies and hashes:
// go.mod, go.sum and the .go files of its packages, sorted.
func Files(src fs.FS) ([]string, error) { return sourceFiles(src) }

// Pack makes an archive of src's build files, led by comment.
func Pack(src fs.FS, comment string) ([]byte, error) {
	files, err := sourceFiles(src)
	if err != nil {
		return nil, err
	}
	a := &txtar.Archive{Comment: []byte(comment)}
	for _, p := range files {
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return nil, fmt.Errorf("binbuild: read %s: %w", p, err)
		}
		// The format cannot hold these faithfully; refusing them keeps
		// Unpack(Pack(src)) byte for byte equal to src.
		if len(b) > 0 && b[len(b)-1] != '\n' {
			return nil, fmt.Errorf("binbuild: %s does not end in a newline, which an archive cannot keep; add one", p)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "-- ") && strings.HasSuffix(line, " --") {
				return nil, fmt.Errorf("binbuild: %s has a line %q that reads as an archive file marker", p, line)
			}
		}
		a.Files = append(a.Files, txtar.File{Name: p, Data: b})
	}
	return txtar.Format(a), nil
}

// Unpack returns the build module held by an archive made by Pack, for
// Spec.Source (which checks that it has a go.mod).
func Unpack(archive []byte) (fs.FS, error) {
	fsys, err := txtar.FS(txtar.Parse(archive))
	if err != nil {
		return nil, fmt.Errorf("binbuild: %w", err)
	}
	return fsys, nil
}
