// Package projectors turns events into Postgres read models (the tables
// readmodels/ answers from): the identity projections (users, profiles,
// registration sources; session revocations), the API keys, and the task-
// queue views. Each is idempotent and checkpointed in the same transaction
// as its tables.
package projectors
