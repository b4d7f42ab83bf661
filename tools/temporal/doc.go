// Package temporal is the build module for the Temporal server finale's
// tests run against (the G1 seed's own stack). It exists so that finale's
// own go.mod never requires go.temporal.io/server and its 200 modules;
// internal/temporalbin builds cmd/temporal-server from here.
package temporal
