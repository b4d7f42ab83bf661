// Package model model-checks finale's deletion protocol.
package model
