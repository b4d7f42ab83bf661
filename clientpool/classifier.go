package clientpool

import (
	"time"

	"github.com/finale-dev/finale/errclass"
)

// Classifier is the classifier the pool decides eviction with
// (Options.Classifier, or errclass.Default). Whatever else classifies this
// pool's errors should use the same one, so that a class the pool evicts
// on is the class conditions and metrics report: lifecycle.New takes it
// from the pool by itself and refuses another.
func (p *Pool[K, C]) Classifier() *errclass.Classifier { return p.classifier }

// CallTimeout is the bound of each call (Options.CallTimeout); zero when
// calls are unbounded. Whatever must outlast a call abandoned at its bound
// (a ledger's create-in-doubt window) is sized from it.
func (p *Pool[K, C]) CallTimeout() time.Duration { return p.callTimeout }
