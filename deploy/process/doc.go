// Package process is the process runtime every floor may use: runners
// started and stopped in ordered stages, readiness checks, and a
// background runner's health with its dependency retry.
package process
