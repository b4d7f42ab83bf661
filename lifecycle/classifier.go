package lifecycle

import (
	"fmt"

	"github.com/finale-dev/finale/errclass"
)

// classifying is a Pool that tells which classifier it evicts with
// (*clientpool.Pool does).
type classifying interface {
	Classifier() *errclass.Classifier
}

// classifierFor is the classifier a reconciler over p uses: the pool's
// when p tells it, so that what the pool evicts as Auth the conditions,
// the watchdog and the metrics call Auth too. A given classifier must be
// that one: two classifiers are how an adopter's extension ends up in one
// and silently missing from the other. Without either it is
// errclass.Default.
func classifierFor(p any, given *errclass.Classifier) (*errclass.Classifier, error) {
	var pools *errclass.Classifier
	if c, ok := p.(classifying); ok {
		pools = c.Classifier()
	}
	switch {
	case pools == nil && given == nil:
		return errclass.Default, nil
	case pools == nil:
		return given, nil
	case given == nil || given == pools:
		return pools, nil
	}
	return nil, fmt.Errorf("%w: Options.Classifier differs from the pool's (clientpool.Options.Classifier): give the classifier once, to the pool, and leave Options.Classifier nil (the reconciler takes the pool's), or pass the same *errclass.Classifier to both", ErrConfig)
}
