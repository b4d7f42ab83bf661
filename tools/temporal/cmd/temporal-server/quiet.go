package main

import "go.temporal.io/api/workflowservice/v1"

// quiet drops the SDK's log lines of the readiness probe, which would
// otherwise interleave with the server's output on every retry.
type quiet struct{}

func (quiet) Debug(string, ...interface{}) {}
func (quiet) Info(string, ...interface{})  {}
func (quiet) Warn(string, ...interface{})  {}
func (quiet) Error(string, ...interface{}) {}

func describeNamespace(name string) *workflowservice.DescribeNamespaceRequest {
	return &workflowservice.DescribeNamespaceRequest{Namespace: name}
}
