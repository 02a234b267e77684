// Package worker is the worker side of the Hero Dispatcher protocol (lib/dispatcher,
// seed 000), which the runner serves: it serves worker ids with an interpreter each,
// claims jobs reliably (BLMOVE into a per-process processing list), runs them with
// procrun in a clean environment, honours timeout, retries, env_vars, log_path
// (confined to a log directory), dependencies and stop requests, and pushes the
// reply. Its own bookkeeping (heartbeats, claims, waiting jobs, the Redis copy of the
// output) lives under <prefix>coord:, which no seed key pattern matches.
// docs/dispatcher.md describes every key and choice.
package worker
