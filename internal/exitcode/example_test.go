package exitcode_test

import (
	"errors"
	"fmt"

	"github.com/finale-dev/finale/internal/exitcode"
)

func Example() {
	fmt.Println(exitcode.Of(nil))
	fmt.Println(exitcode.Of(exitcode.Usagef("unknown command %q", "chek")))
	fmt.Println(exitcode.Of(errors.New("no cluster")))
	// Output:
	// 0
	// 64
	// 1
}
