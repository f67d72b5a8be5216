// Package config is the typed reader behind cfgd's settings: it parses named
// values (addresses, URLs, durations, lists, secrets) from a Source and
// collects every problem, one line per variable, so start-up reports them
// all at once. Secret keeps a value out of logs, errors and JSON.
package config
