package model

// DLQEntry is a dead-letter queue entry as the API lists it (dlq.list, dlq.show).
type DLQEntry struct {
	CallerID     uint32 `json:"caller_id"`
	ID           uint32 `json:"id"`
	FlowID       uint32 `json:"flow_id,omitempty"`
	Error        string `json:"error"`
	Attempt      uint32 `json:"attempt"`
	DLQAtMs      int64  `json:"dlq_at_ms"`
	ScriptType   string `json:"script_type"`
	FunctionName string `json:"function_name,omitempty"`
}

// OperatorSecret is an operator secret as the API shows it: its fingerprint, never
// the secret (secret.list, secret.revoke).
type OperatorSecret struct {
	Fingerprint string `json:"fingerprint"`
	Source      string `json:"source"` // generated, api or configured
	CreatedAtMs int64  `json:"created_at_ms,omitempty"`
	RevokedAtMs int64  `json:"revoked_at_ms,omitempty"`
	Reason      string `json:"reason,omitempty"` // why it was revoked
	Current     bool   `json:"current"`          // the secret of the call that lists it
}
