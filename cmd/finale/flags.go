package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/finale-dev/finale/internal/exitcode"
)

// msgBadFlag is a flag the flag package refused, and where its flags are
// listed.
const msgBadFlag = "%s: %w (finale help %s lists the flags)"

// parseFlags parses a command's flags. -h prints text and the flags to out
// (asked for: stdout) and reports helped; a wrong flag is a usage error
// naming the flag and the command, and prints nothing itself: main prints
// the error on stderr, once, without the page of usage that flag would
// print there.
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer, text string) (helped bool, err error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err = fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(out, text)
		fs.SetOutput(out)
		fs.PrintDefaults()
		return true, nil
	case err != nil:
		return false, exitcode.With(exitcode.Usage, fmt.Errorf(msgBadFlag, fs.Name(), err, fs.Name()))
	}
	return false, nil
}
