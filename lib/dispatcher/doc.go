// Package dispatcher implements the Hero Dispatcher Redis protocol (seed 000): jobs
// as hashes <prefix>job:<id>, work queues <prefix>work_queue:<worker_id>, stop queues
// <prefix>stop_queue:<worker_id> and reply lists <prefix>reply:<id>, with the seed's
// field names and value formats (timestamps ISO 8601, lists and maps JSON).
//
// This package is the protocol (Job, Keys, the formats, log_path confinement) and
// Client, the dispatcher side (create, list, status, logs, stop, run and await): what
// supervisor-daemon and heroctl use. The worker side, which runs scripts, is
// lib/dispatcher/worker; nothing here links it, so they link no execution code.
// docs/dispatcher.md describes every key and choice.
package dispatcher
