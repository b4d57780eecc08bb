package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/storeerr"
	"github.com/sluicehq/sluice/overrides"
)

// Overrides is the overrides.Backend on Redis: every override of a prefix in one hash,
//
//	<prefix>:overrides   field "<policy> <key>" (a policy name holds no space), value the
//	                     override's JSON
//
// and every change published, as a Change's JSON, on the channel <prefix>:overrides, by the same
// script that writes the hash: the scripts run one at a time, so subscribers get the changes in
// the order the hash took them. Watch subscribes with a connection of its own; when the
// connection is lost it subscribes again (backing off up to a second between tries) and then
// delivers Change{Op: OpReload}, since messages published meanwhile are lost. On a Cluster the
// hash lives in one slot, and a publication reaches every node.
//
// Overrides is safe for concurrent use. It uses its client and never closes it.
type Overrides struct {
	client  rueidis.Client
	hash    string
	channel string
}

var _ overrides.Backend = (*Overrides)(nil)

// NewOverrides returns the overrides backend of prefix ("" means "sluice", as for a Store) on
// client.
func NewOverrides(client rueidis.Client, prefix string) *Overrides {
	if prefix == "" {
		prefix = "sluice"
	}
	return &Overrides{client: client, hash: prefix + ":overrides", channel: prefix + ":overrides"}
}

// Overrides returns the overrides backend of the store's client and prefix.
func (s *Store) Overrides() *Overrides { return NewOverrides(s.client, s.prefix) }

// The scripts, lua/overrides.lua's: each writes the hash and publishes the change.
var (
	putOverride    = rueidis.NewLuaScript(assemble("", "overrides.put"))
	deleteOverride = rueidis.NewLuaScript(assemble("", "overrides.delete"))
	expireOverride = rueidis.NewLuaScript(assemble("", "overrides.expire"))
)

func field(policy, key string) string { return policy + " " + key }

// Apply writes c to the hash and publishes it, in one script.
func (o *Overrides) Apply(ctx context.Context, c overrides.Change) (bool, error) {
	msg, err := overrides.EncodeChange(c)
	if err != nil {
		return false, err
	}
	args := []string{field(c.Override.Policy, c.Override.Key), o.channel, string(msg)}
	var script *rueidis.Lua
	switch c.Op {
	case overrides.OpPut:
		body, err := overrides.EncodeOverride(c.Override)
		if err != nil {
			return false, err
		}
		script, args = putOverride, append(args, string(body))
	case overrides.OpDelete:
		script = deleteOverride
	case overrides.OpExpire:
		script, args = expireOverride, append(args, fmt.Sprint(c.Override.ExpiresAt))
	default:
		return false, fmt.Errorf("redis overrides: cannot apply a change of op %q", c.Op)
	}
	n, err := script.Exec(ctx, o.client, []string{o.hash}, args).AsInt64()
	if err != nil {
		return false, storeerr.Unavailable("redis overrides", err)
	}
	if c.Op == overrides.OpPut {
		return n == 0, nil
	}
	return n == 1, nil
}

// Load reads the whole hash. A value that is not an override's JSON (not written by sluice) is
// left out.
func (o *Overrides) Load(ctx context.Context) ([]overrides.Override, error) {
	all, err := o.client.Do(ctx, o.client.B().Hgetall().Key(o.hash).Build()).AsStrMap()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, storeerr.Unavailable("redis overrides", err)
	}
	out := make([]overrides.Override, 0, len(all))
	for _, v := range all {
		if ov, err := overrides.DecodeOverride([]byte(v)); err == nil {
			out = append(out, ov)
		}
	}
	return out, nil
}

// Watch subscribes to the channel and returns once Redis confirmed it; see Overrides for what
// follows.
func (o *Overrides) Watch(ctx context.Context, fn func(overrides.Change)) error {
	first := make(chan error, 1)
	go o.watch(ctx, fn, first)
	select {
	case err := <-first:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch receives until ctx ends, subscribing again whenever the subscription is lost. The first
// confirmation goes to first; each later one (a subscription made again, by rueidis's own retry
// or by this loop) is delivered as a reload.
func (o *Overrides) watch(ctx context.Context, fn func(overrides.Change), first chan<- error) {
	var (
		mu         sync.Mutex // orders fn's calls: the hook and messages may come from another pipeline after a reconnect
		subscribed atomic.Bool
		confirms   atomic.Int64 // subscriptions confirmed
		once       sync.Once
	)
	deliver := func(c overrides.Change) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() == nil {
			fn(c)
		}
	}
	hook := func(s rueidis.PubSubSubscription) {
		if s.Kind != "subscribe" || s.Channel != o.channel {
			return
		}
		confirms.Add(1)
		if subscribed.Swap(true) {
			deliver(overrides.Change{Op: overrides.OpReload})
			return
		}
		once.Do(func() { first <- nil })
	}
	onMessage := func(m rueidis.PubSubMessage) {
		if c, err := overrides.DecodeChange([]byte(m.Message)); err == nil {
			deliver(c)
		}
	}
	wait := 50 * time.Millisecond
	for {
		// A connection of its own (Dedicated) on one Redis, so that a slow fn never holds up the
		// store's commands; a Cluster client picks the node by itself.
		var err error
		before := confirms.Load()
		hctx := rueidis.WithOnSubscriptionHook(ctx, hook)
		sub := o.client.B().Subscribe().Channel(o.channel).Build()
		if o.client.Mode() == rueidis.ClientModeCluster {
			err = o.client.Receive(hctx, sub, onMessage)
		} else {
			err = o.client.Dedicated(func(c rueidis.DedicatedClient) error { return c.Receive(hctx, sub, onMessage) })
		}
		if ctx.Err() != nil {
			return
		}
		if !subscribed.Load() {
			// Never subscribed: Watch reports the error, and nothing is watched.
			once.Do(func() { first <- storeerr.Unavailable("redis overrides: subscribing", orClosed(err)) })
			return
		}
		if confirms.Load() > before {
			wait = 50 * time.Millisecond // it was subscribed: the next try is a reconnect
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func orClosed(err error) error {
	if err == nil {
		return errors.New("subscription ended")
	}
	return err
}
