package errclass_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/finale-dev/finale/errclass"
)

var errnos = []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, syscall.ENOENT, syscall.EACCES, 0}

// build turns fuzz input into a real error value of one of the recognised
// shapes (or a plain one), with fuzzed codes and messages.
func build(kind uint8, code int, text string) error {
	switch kind % 10 {
	case 0:
		return status.Error(codes.Code(1+uint32(code)%19), text) // 0 is OK: no error
	case 1:
		return &sqlError{code: text}
	case 2:
		return &apierrors.StatusError{ErrStatus: metav1.Status{Code: int32(code), Reason: metav1.StatusReason(text), Message: text}}
	case 3:
		return &httpError{code: code}
	case 4:
		return &net.OpError{Op: text, Net: "tcp", Err: &os.SyscallError{Syscall: text, Err: errnos[uint(code)%uint(len(errnos))]}}
	case 5:
		return &net.DNSError{Err: text, Name: text, IsTimeout: code%2 == 0}
	case 6:
		return []error{context.Canceled, context.DeadlineExceeded, io.EOF, io.ErrUnexpectedEOF}[uint(code)%4]
	case 7:
		return errors.Join(errors.New(text), build(uint8(code), code/3, text))
	case 8:
		var nilStatus *apierrors.StatusError
		if code%2 == 0 {
			return fmt.Errorf("%s: %w", text, nilStatus)
		}
		return &timeoutError{timeout: code%3 == 0}
	}
	return errors.New(text)
}

// timeoutError says whether it is a timeout, as many SDKs' errors do
// without being net errors.
type timeoutError struct{ timeout bool }

func (e *timeoutError) Error() string { return "timeout?" }
func (e *timeoutError) Timeout() bool { return e.timeout }

func FuzzClassify(f *testing.F) {
	for k := range 10 {
		f.Add(uint8(k), 503, "08006", false)
		f.Add(uint8(k), 14, "x", true)
	}
	f.Fuzz(func(t *testing.T, kind uint8, code int, text string, callerDone bool) {
		ctx := context.Background()
		if callerDone {
			c, cancel := context.WithCancel(ctx)
			cancel()
			ctx = c
		}
		err := build(kind, code, text)
		got := classifySafely(t, ctx, err)
		if got == "" {
			t.Fatalf("non-nil %T classified as empty", err)
		}
		if !known(got) {
			t.Fatalf("unknown class %q", got)
		}
		for _, wrap := range []error{fmt.Errorf("cleanup: %w", err), fmt.Errorf("a: %w", fmt.Errorf("b: %w", err))} {
			if w := classifySafely(t, ctx, wrap); w != got {
				t.Fatalf("%T %v: bare %q, wrapped %q", err, err, got, w)
			}
		}
	})
}

func classifySafely(t *testing.T, ctx context.Context, err error) (cl errclass.Class) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Classify(%T %#v) panicked: %v", err, err, r)
		}
	}()
	return errclass.Of(ctx, err)
}

func known(c errclass.Class) bool {
	for _, k := range errclass.Classes {
		if c == k {
			return true
		}
	}
	return false
}
