package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/model"
)

// Page lists an index (a zset of member → creation time in ms) newest first.
// The cursor is "<score>:<member>" of the last item returned; members that share a
// score are ordered by member, descending, like ZREVRANGE orders them, so a page never
// repeats or skips an item, whatever is created meanwhile.
func (d *DB) Page(ctx context.Context, index, cursor string, limit int) (members []string, next string, err error) {
	max := "+inf"
	var curScore float64
	var curMember string
	if cursor != "" {
		s, m, ok := strings.Cut(cursor, ":")
		f, perr := strconv.ParseFloat(s, 64)
		if !ok || perr != nil {
			return nil, "", fmt.Errorf("cursor %q is not one this server returned", cursor)
		}
		curScore, curMember = f, m
		max = s
	}
	// Ties at the cursor's score are skipped below; fetch enough to fill the page.
	fetch := int64(limit) + 1
	for {
		var cmd *redis.ZSliceCmd
		if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = p.ZRevRangeByScoreWithScores(ctx, index, &redis.ZRangeBy{Max: max, Min: "-inf", Count: fetch})
			return nil
		}); err != nil {
			return nil, "", err
		}
		zs := cmd.Val()
		var out []redis.Z
		for _, z := range zs {
			m := fmt.Sprint(z.Member)
			if cursor != "" && z.Score == curScore && m >= curMember {
				continue
			}
			out = append(out, z)
		}
		if len(out) > limit || int64(len(zs)) < fetch {
			more := len(out) > limit
			if more {
				out = out[:limit]
			}
			for _, z := range out {
				members = append(members, fmt.Sprint(z.Member))
			}
			if more {
				last := out[len(out)-1]
				next = strconv.FormatFloat(last.Score, 'f', -1, 64) + ":" + fmt.Sprint(last.Member)
			}
			return members, next, nil
		}
		fetch *= 4 // many ties at the cursor's score
	}
}

// LoadJobMembers loads the jobs of index members "<caller>:<id>" in one round trip;
// members whose job is gone are skipped.
func (d *DB) LoadJobMembers(ctx context.Context, members []string) ([]*model.Job, error) {
	cmds := make([]*redis.MapStringStringCmd, len(members))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range members {
			cmds[i] = p.HGetAll(ctx, "job:"+m)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]*model.Job, 0, len(members))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		var j model.Job
		if err := model.FromHash("job:"+members[i], c.Val(), &j); err != nil {
			return nil, err
		}
		if j.ContextID == 0 {
			j.ContextID = d.ContextID
		}
		out = append(out, &j)
	}
	return out, nil
}

// LoadFlowMembers loads flows by index members (ids) in one round trip.
func (d *DB) LoadFlowMembers(ctx context.Context, members []string) ([]*model.Flow, error) {
	cmds := make([]*redis.MapStringStringCmd, len(members))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range members {
			cmds[i] = p.HGetAll(ctx, "flow:"+m)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]*model.Flow, 0, len(members))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		var f model.Flow
		if err := model.FromHash("flow:"+members[i], c.Val(), &f); err != nil {
			return nil, err
		}
		if f.ContextID == 0 {
			f.ContextID = d.ContextID
		}
		out = append(out, &f)
	}
	return out, nil
}
