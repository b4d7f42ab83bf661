package controlplane

import "crypto/tls"

// insecureTLS is for readiness probes only: they run before the serving
// certificate is on disk, and they send nothing but the admin token to a
// loopback port this process just chose.
func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback readiness probe, see above
}
