package lifecycle_test

import "github.com/finale-dev/finale/internal/widget"

// Widget is the managed kind of these tests and examples (internal/widget,
// shared with the real-stack tests in examples/postgres/stacktest).
type (
	Widget     = widget.Widget
	WidgetList = widget.WidgetList
)

var widgetGV = widget.GroupVersion
