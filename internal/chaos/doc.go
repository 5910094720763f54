// Package chaos is a crash harness for sandflow serve. It builds the
// sandflow binary, serves a fresh data directory, uploads a test tool,
// drives a population of runs over the HTTP API (steps that count their
// side effects outside the store, questions answered with wait=0, hooks,
// durable sleeps, webhooks, external agent turns and workflow programs),
// kills the server with SIGKILL at moments picked by a seeded generator,
// restarts it, and repeats. Then it checks, from what the server
// acknowledged and what the runs' logs hold:
//
//   - every write acknowledged with a 2xx (a call started, an answer, a
//     hook resume, a webhook request, an agent turn completed, a cancel)
//     is in its run's log (an answer or agent turn of a run the harness
//     cancelled, whose question or turn the cancel settled first, is
//     counted as superseded instead);
//   - every run ended exactly once, and every run ended by the end (a run
//     left waiting or running after the last restart was not resumable);
//   - no step ran more often than the attempts its log records (the
//     side-effect counter of a step is at most its recorded attempts), and
//     no step recorded as completed left no side effect;
//   - no timer fired twice;
//   - the store verifies clean with sandflow doctor (exit 0).
//
// A failed invariant is a Finding naming its run; Run returns them all in
// a Report, with counts for a summary line. The seed picks the runs' plans
// and the kill moments; a seed reproduces those, though not the exact
// interleaving with the server's own timing.
package chaos
