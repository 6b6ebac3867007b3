// Package redisconn turns ELLIPSIS_REDIS_URL into a go-redis client for one
// of the three Redis topologies Ellipsis runs on, and says which Pub/Sub
// commands fit it.
//
// # URLs
//
//	redis://[[user]:password@]host:port[/db][?option=value...]
//	rediss://...                      standalone Redis (TLS with rediss)
//	redis+sentinel://[[user]:password@]sentinel:port[/db]?master_name=NAME[&addr=sentinel2:port...]
//	rediss+sentinel://...             Redis with Sentinel failover; the
//	                                  userinfo authenticates to the
//	                                  sentinels, password=... to the master
//	redis+cluster://[[user]:password@]host:port[?addr=host2:port&addr=...]
//	rediss+cluster://...              Redis Cluster; any reachable masters
//	                                  seed the slot map
//
// Options are go-redis's own URL options (dial_timeout=3s, pool_size=20,
// ...), parsed by [redis.ParseURL], [redis.ParseFailoverURL] and
// [redis.ParseClusterURL]; this package only picks the parser by scheme.
package redisconn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Topology is how the Redis behind a URL is deployed.
type Topology string

// Topologies, by URL scheme (see the package documentation).
const (
	Standalone Topology = "standalone" // redis://, rediss://
	Sentinel   Topology = "sentinel"   // redis+sentinel://, rediss+sentinel://
	Cluster    Topology = "cluster"    // redis+cluster://, rediss+cluster://
)

// Pub/Sub modes (ELLIPSIS_REDIS_PUBSUB).
const (
	// PubSubClassic is PUBLISH/SUBSCRIBE. On Redis Cluster every message is
	// broadcast to every node over the cluster bus.
	PubSubClassic = "classic"
	// PubSubSharded is SPUBLISH/SSUBSCRIBE (Redis 7.0+): a message stays on
	// the shard that owns its channel's hash slot.
	PubSubSharded = "sharded"
)

// DefaultPubSub is the Pub/Sub mode of a topology when ELLIPSIS_REDIS_PUBSUB
// is empty: sharded on Cluster (classic would broadcast every typing event
// to every node), classic elsewhere, where both cost the same and classic is
// what other subscribers of chat:room:{room} use (docs/protocol.md, "Redis").
func DefaultPubSub(t Topology) string {
	if t == Cluster {
		return PubSubSharded
	}
	return PubSubClassic
}

// ErrScheme is returned by [Parse] for a URL whose scheme is none of the six.
var ErrScheme = errors.New("scheme must be redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster")

// Options is a parsed URL: its topology and the go-redis options of that
// topology (exactly one of the three pointers is set).
type Options struct {
	Topology   Topology
	Standalone *redis.Options
	Failover   *redis.FailoverOptions
	Cluster    *redis.ClusterOptions
}

// Parse reads a Redis URL (see the package documentation). It does no I/O.
// Errors wrap [ErrScheme] or go-redis's parse error (unknown option, bad
// port, ...); a Sentinel URL without master_name is an error.
func Parse(raw string) (*Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// Not err itself: url.Error quotes the whole URL, password too.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL: %v", err)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	base, suffix, _ := strings.Cut(u.Scheme, "+") // url.Parse lowercases the scheme
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("%w, got %q", ErrScheme, u.Scheme)
	}
	plain := base + raw[strings.Index(raw, "://"):] // the go-redis form
	switch suffix {
	case "":
		o, err := redis.ParseURL(plain)
		if err != nil {
			return nil, err
		}
		return &Options{Topology: Standalone, Standalone: o}, nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(plain)
		if err != nil {
			return nil, err
		}
		if o.MasterName == "" {
			return nil, errors.New("a Sentinel URL needs master_name=<the master's name> (e.g. redis+sentinel://sentinel:26379?master_name=mymaster)")
		}
		return &Options{Topology: Sentinel, Failover: o}, nil
	case "cluster":
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("a Cluster URL has no database path (Redis Cluster has only db 0), got %q", u.Path)
		}
		o, err := redis.ParseClusterURL(plain)
		if err != nil {
			return nil, err
		}
		return &Options{Topology: Cluster, Cluster: o}, nil
	}
	return nil, fmt.Errorf("%w, got %q", ErrScheme, u.Scheme)
}

// Tuning is what the services set on every topology's options alike.
type Tuning struct {
	// MaxRetries is go-redis's retry count (-1: none; the worker retries
	// itself). Cluster redirects (MOVED, ASK) are followed regardless.
	MaxRetries int
	// DialerRetries, when 0 in the URL, is set to this.
	DialerRetries int
	// ContextTimeoutEnabled lets call contexts bound each try.
	ContextTimeoutEnabled bool
	// ClientName, when empty in the URL, is set to this (CLIENT LIST).
	ClientName string
}

// Tune applies t to whichever options o holds.
func (o *Options) Tune(t Tuning) {
	set := func(maxRetries, dialerRetries *int, ctxTimeout *bool, name *string) {
		*maxRetries = t.MaxRetries
		if *dialerRetries == 0 {
			*dialerRetries = t.DialerRetries
		}
		if t.ContextTimeoutEnabled {
			*ctxTimeout = true
		}
		if *name == "" {
			*name = t.ClientName
		}
	}
	switch {
	case o.Standalone != nil:
		s := o.Standalone
		set(&s.MaxRetries, &s.DialerRetries, &s.ContextTimeoutEnabled, &s.ClientName)
	case o.Failover != nil:
		f := o.Failover
		set(&f.MaxRetries, &f.DialerRetries, &f.ContextTimeoutEnabled, &f.ClientName)
	case o.Cluster != nil:
		c := o.Cluster
		set(&c.MaxRetries, &c.DialerRetries, &c.ContextTimeoutEnabled, &c.ClientName)
	}
}

// NewClient returns a client for o's topology: *redis.Client,
// *redis.Client from [redis.NewFailoverClient] (it follows the master
// Sentinel names) or *redis.ClusterClient. It does no I/O.
func (o *Options) NewClient() redis.UniversalClient {
	switch {
	case o.Failover != nil:
		return redis.NewFailoverClient(o.Failover)
	case o.Cluster != nil:
		return redis.NewClusterClient(o.Cluster)
	}
	return redis.NewClient(o.Standalone)
}

// Redact returns raw with its password replaced by "xxxxx", for logs.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// WatchMaster follows the master that o's Sentinels name (Topology
// Sentinel; for the other topologies it returns at once). Every interval it
// asks the Sentinels, in order until one answers, for the address of
// o.Failover.MasterName, and calls changed with it when a new address is
// answered twice in a row (so a Sentinel with a stale view cannot make it
// flap; never for the first answer). It returns when ctx ends.
//
// Why: go-redis's failover client moves its command connections to a new
// master at once, but leaves Pub/Sub connections on the old one until that
// server drops them, which after a manual or partition failover (the old
// master stays up, demoted) takes until a Sentinel reconfigures it, about
// 10 s. A subscriber calls WatchMaster and reconnects on change.
func (o *Options) WatchMaster(ctx context.Context, interval time.Duration, changed func(addr string)) {
	f := o.Failover
	if f == nil {
		return
	}
	timeout := cmp.Or(f.DialTimeout, 2*time.Second)
	sentinels := make([]*redis.SentinelClient, len(f.SentinelAddrs))
	for i, addr := range f.SentinelAddrs {
		sentinels[i] = redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: f.SentinelUsername, Password: f.SentinelPassword,
			TLSConfig: f.TLSConfig, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
			MaxRetries: -1, DialerRetries: 1, PoolSize: 1,
		})
	}
	defer func() {
		for _, s := range sentinels {
			_ = s.Close()
		}
	}()
	ask := func() string {
		for _, s := range sentinels {
			actx, cancel := context.WithTimeout(ctx, timeout)
			hp, err := s.GetMasterAddrByName(actx, f.MasterName).Result()
			cancel()
			if err == nil && len(hp) == 2 {
				return net.JoinHostPort(hp[0], hp[1])
			}
		}
		return "" // no Sentinel answered: keep the last known master
	}
	last := ask()
	seen := "" // a new answer, seen once: it must come twice in a row
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		addr := ask()
		switch {
		case addr == "" || addr == last:
			seen = ""
		case last == "":
			last = addr // the first answer: nothing changed
		case addr != seen:
			seen = addr // one Sentinel with a stale view must not flap us
		default:
			last, seen = addr, ""
			changed(addr)
		}
	}
}
