// Package apikeys holds the command handlers of the API key aggregate
// (stream apikey-<id>): create and revoke.
package apikeys
