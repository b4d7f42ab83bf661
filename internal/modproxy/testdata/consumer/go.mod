// A module of finale's user, outside finale's tree. modproxy's
// TestConsumer copies it to a temporary directory, points the requirement
// below at the version it just published to a file-based GOPROXY, runs
// go mod tidy, then go test.
module example.com/keysoperator

go 1.26.0

require github.com/finale-dev/finale v0.0.0-00010101000000-000000000000
