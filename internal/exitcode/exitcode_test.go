package exitcode

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOf(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"nil":               {nil, OK},
		"unclassified":      {errors.New("boom"), Failed},
		"usage":             {Usagef("unknown command %q", "x"), Usage},
		"wrapped usage":     {fmt.Errorf("check: %w", Usagef("bad flag")), Usage},
		"violation":         {With(Violation, errors.New("broke")), Violation},
		"bad description":   {fmt.Errorf("f.yaml: %w", With(BadDescription, errors.New("crds: required"))), BadDescription},
		"outermost decides": {With(Failed, With(Usage, errors.New("x"))), Failed},
		"with nil is nil":   {With(Usage, nil), OK},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Of(tc.err)); diff != "" {
				t.Errorf("Of(%v) (-want +got):\n%s", tc.err, diff)
			}
		})
	}
}

// The table is what scripts depend on: its numbers never change.
func TestTable(t *testing.T) {
	want := []int{0, 1, 2, 3, 64, 65}
	if diff := cmp.Diff(want, []int{OK, Failed, Violation, Pending, Usage, BadDescription}); diff != "" {
		t.Errorf("exit statuses (-want +got):\n%s", diff)
	}
}

func TestErrorKeepsMessageAndChain(t *testing.T) {
	base := errors.New("no cluster")
	err := With(Failed, base)
	if err.Error() != "no cluster" || !errors.Is(err, base) {
		t.Errorf("With(Failed, %v) = %q, Is base %v: want the message and the chain kept", base, err, errors.Is(err, base))
	}
}
