package hero

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hero-coordinator/hero/lib/model"
)

// Run and rate limits of the client's context (docs/scheduling.md), over JSON-RPC.

// SetLimit sets the limit of l.Scope (limit.set; admins): at most l.MaxRunning of the
// scope's jobs run at once, at most l.Rate start per l.Per. It replaces the scope's
// limit and holds from the next claim. It returns the limit as stored (defaults
// filled in).
func (c *Client) SetLimit(ctx context.Context, l model.RunLimit) (*model.RunLimit, error) {
	raw, err := c.Call(ctx, "limit.set", map[string]any{"context_id": c.cfg.Context, "scope": l.Scope,
		"max_running": l.MaxRunning, "rate": l.Rate, "per": l.Per, "burst": l.Burst})
	if err != nil {
		return nil, err
	}
	var out model.RunLimit
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("limit.set: %w", err)
	}
	return &out, nil
}

// Limits lists the context's limits (limit.list), each with the runs it counts now.
func (c *Client) Limits(ctx context.Context) ([]model.RunLimit, error) {
	raw, err := c.Call(ctx, "limit.list", map[string]any{"context_id": c.cfg.Context})
	if err != nil {
		return nil, err
	}
	var page struct {
		Items []model.RunLimit `json:"items"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, fmt.Errorf("limit.list: %w", err)
	}
	return page.Items, nil
}

// DeleteLimit removes the limit of a scope (limit.delete; admins); false when there
// was none.
func (c *Client) DeleteLimit(ctx context.Context, scope string) (bool, error) {
	raw, err := c.Call(ctx, "limit.delete", map[string]any{"context_id": c.cfg.Context, "scope": scope})
	if err != nil {
		return false, err
	}
	var r struct {
		Deleted bool `json:"deleted"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return false, fmt.Errorf("limit.delete: %w", err)
	}
	return r.Deleted, nil
}
