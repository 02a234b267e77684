package main

import (
	"context"
	"strings"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Actors: actor.create, actor.load, actor.update and their gRPC methods.

type actorIn struct {
	ID      uint32   `json:"id"`
	Pubkey  string   `json:"pubkey"`
	Address []string `json:"address"`
}

type actorCreateParams struct {
	Actor *actorIn `json:"actor"`
}

type actorUpdateParams struct {
	ID      uint32    `json:"id"`
	Pubkey  *string   `json:"pubkey"`
	Address *[]string `json:"address"`
}

func (s *service) actorCreate(ctx context.Context, p Principal, in actorCreateParams) (*model.Actor, error) {
	if err := requireOperator(p, "actor.create"); err != nil {
		return nil, err
	}
	if in.Actor == nil {
		return nil, invalidParams("actor", "actor is required")
	}
	pk := strings.ToLower(strings.TrimSpace(in.Actor.Pubkey))
	a, _, err := s.store.CreateActor(ctx, &model.Actor{ID: in.Actor.ID, Pubkey: pk, Address: in.Actor.Address})
	return a, err
}

func (s *service) actorLoad(ctx context.Context, _ Principal, in idParams) (*model.Actor, error) {
	if in.ID == 0 {
		return nil, invalidParams("id", "id must be at least 1")
	}
	return s.store.LoadActor(ctx, in.ID)
}

// actorUpdate replaces an actor's key or addresses: the operator may change any
// actor, an actor only itself (its request was signed with its current key). From
// the next request on, only the new key verifies.
func (s *service) actorUpdate(ctx context.Context, p Principal, in actorUpdateParams) (*model.Actor, error) {
	if in.ID == 0 {
		return nil, invalidParams("id", "id must be at least 1")
	}
	if !p.Operator && p.Actor != in.ID {
		return nil, permissionDenied("actor %d may update only itself; actor.update of actor %d needs the operator secret", p.Actor, in.ID)
	}
	if in.Pubkey == nil && in.Address == nil {
		return nil, invalidParams("pubkey", "give pubkey and/or address to change")
	}
	if in.Pubkey != nil {
		pk := strings.ToLower(strings.TrimSpace(*in.Pubkey))
		in.Pubkey = &pk
	}
	a, err := s.store.UpdateActor(ctx, in.ID, in.Pubkey, in.Address)
	if err != nil {
		return nil, err
	}
	s.log.Info().Uint32("actor", in.ID).Str("by", p.Name()).Bool("pubkey_changed", in.Pubkey != nil).Msg("actor updated")
	return a, nil
}

func (c *coordinatorServer) CreateActor(ctx context.Context, r *herov1.CreateActorRequest) (*herov1.CreateActorResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateActorResponse, error) {
		var in actorCreateParams
		if r.Actor != nil {
			in.Actor = &actorIn{ID: r.Actor.Id, Pubkey: r.Actor.Pubkey, Address: r.Actor.Address}
		}
		a, err := c.s.actorCreate(ctx, p, in)
		return &herov1.CreateActorResponse{Actor: protoconv.ActorToPB(a)}, err
	})
}

func (c *coordinatorServer) GetActor(ctx context.Context, r *herov1.GetActorRequest) (*herov1.GetActorResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetActorResponse, error) {
		a, err := c.s.actorLoad(ctx, p, idParams{ID: r.Id})
		return &herov1.GetActorResponse{Actor: protoconv.ActorToPB(a)}, err
	})
}

func (c *coordinatorServer) UpdateActor(ctx context.Context, r *herov1.UpdateActorRequest) (*herov1.UpdateActorResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.UpdateActorResponse, error) {
		in := actorUpdateParams{ID: r.Id, Pubkey: r.Pubkey}
		if r.Address != nil {
			in.Address = &r.Address.Values
		}
		a, err := c.s.actorUpdate(ctx, p, in)
		return &herov1.UpdateActorResponse{Actor: protoconv.ActorToPB(a)}, err
	})
}
