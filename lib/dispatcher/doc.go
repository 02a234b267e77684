// Package dispatcher implements the Hero Dispatcher Redis protocol (seed 000): jobs
// as hashes <prefix>job:<id>, work queues <prefix>work_queue:<worker_id>, stop queues
// <prefix>stop_queue:<worker_id> and reply lists <prefix>reply:<id>, with the seed's
// field names and value formats (timestamps ISO 8601, lists and maps JSON).
//
// Client is the dispatcher side (create, list, status, logs, stop, run and await).
// Worker is the worker side: it serves worker ids with an interpreter each, claims
// jobs reliably (BLMOVE into a per-process processing list), runs them with
// procrun in a clean environment, honours timeout, retries, env_vars, log_path
// (confined to a log directory), dependencies and stop requests, and pushes the
// reply. Its own bookkeeping (heartbeats, claims, waiting jobs, the Redis copy of the
// output) lives under <prefix>coord:, which no seed key pattern matches.
// docs/dispatcher.md describes every key and choice.
package dispatcher
