// Package freeport picks loopback ports for the servers finale starts in
// tests and the demo (etcd, kube-apiserver, PostgreSQL), and tells a start
// that lost its port to another process from one that failed, so that the
// caller retries on fresh ports instead of failing a test run that shares
// the machine with others.
package freeport
