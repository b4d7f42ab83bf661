package exitcode

import (
	"errors"
	"fmt"
)

// The exit statuses (the table in the package documentation).
const (
	OK             = 0
	Failed         = 1
	Violation      = 2
	Pending        = 3
	Usage          = 64
	BadDescription = 65
)

// Error carries the exit status of the error it wraps.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// With marks err with code; a nil err stays nil.
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Usagef is a usage error: the command line is wrong.
func Usagef(format string, args ...any) error {
	return With(Usage, fmt.Errorf(format, args...))
}

// Of is the exit status for err: 0 for nil, the code of the outermost
// Error in its chain, else Failed.
func Of(err error) int {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Failed
}
