// Package freeport picks loopback ports for the servers finale starts in
// tests and the demo (etcd, kube-apiserver, PostgreSQL), and starts such a
// server again on fresh ports when another process bound one between the
// pick and the server's bind (Retry), instead of failing a test run that
// shares the machine with others.
package freeport
