// Package replay is the JavaScript engine's fast replay: the run's log as
// the host sends it to a worker once (log.go), the Replayer that answers
// a replaying program's ops from it in the worker, as the host's handler
// would, and Check, with which the host passes the ops the worker
// answered to its handler, the judge, and checks that it answers the
// same. The frames that carry them are internal/proto's.
package replay
