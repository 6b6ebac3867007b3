// Package backends decides which NATS and Redis the dev stack uses, and
// starts embedded ones where the configuration leaves it free:
//
//   - NATS: ELLIPSIS_NATS_URL when it is set explicitly (checked with a
//     bounded connect; unreachable is an error, never a silent fallback),
//     else an embedded nats-server on 127.0.0.1 with a random port (the
//     machine's own NATS may hold 4222).
//   - Redis: ELLIPSIS_REDIS_URL when it is set explicitly (checked with a
//     PING; unreachable is an error), else the default
//     redis://127.0.0.1:6379 if it answers a PING within a short timeout,
//     else an embedded Redis-compatible server (miniredis in real time).
package backends

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ellipsis-chat/ellipsis/shared/config"
	"github.com/ellipsis-chat/ellipsis/shared/natsconn"
	"github.com/ellipsis-chat/ellipsis/shared/redisconn"
	"github.com/ellipsis-chat/ellipsis/tools/embedded"
)

// Defaults for [Options].
const (
	// DefaultConnectTimeout bounds the check of an explicitly configured
	// NATS or Redis: 3 s.
	DefaultConnectTimeout = 3 * time.Second
	// DefaultProbeTimeout bounds the PING of the default Redis before the
	// embedded one is started instead: 300 ms.
	DefaultProbeTimeout = 300 * time.Millisecond
)

// Source says where a backend comes from.
type Source string

const (
	// FromEnv: the URL was set explicitly (ELLIPSIS_*_URL or its flag).
	FromEnv Source = "configured"
	// FromDefault: the default URL answered.
	FromDefault Source = "default"
	// Embedded: a server started in this process.
	Embedded Source = "embedded"
)

// Options configures [Resolve].
type Options struct {
	// Config is the loaded configuration; its NATSURL and RedisURL are used
	// when IsSet says they were given explicitly.
	Config config.Config
	// Logger reports which backends are in use. Nil means no logs.
	Logger *zap.Logger
	// ConnectTimeout bounds the check of an explicitly set NATS or Redis.
	// Zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ProbeTimeout bounds the PING of DefaultRedisURL. Zero means
	// DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// DefaultRedisURL is probed when ELLIPSIS_REDIS_URL is not set. Empty
	// means config.Default().RedisURL (redis://127.0.0.1:6379).
	DefaultRedisURL string
}

// Backends are the NATS and Redis the stack uses. Close stops the embedded
// ones.
type Backends struct {
	// NATSURL is the NATS URL (list) to use.
	NATSURL string
	// NATSSource says where it comes from (FromEnv or Embedded).
	NATSSource Source
	// RedisURL is the Redis URL to use.
	RedisURL string
	// RedisSource says where it comes from (FromEnv, FromDefault or
	// Embedded).
	RedisSource Source

	nats  *embedded.NATS
	redis *embedded.Redis
}

// Resolve picks (and checks, or starts) NATS and Redis. On error nothing is
// left running.
func Resolve(ctx context.Context, opts Options) (*Backends, error) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	connect := opts.ConnectTimeout
	if connect <= 0 {
		connect = DefaultConnectTimeout
	}
	probe := opts.ProbeTimeout
	if probe <= 0 {
		probe = DefaultProbeTimeout
	}
	defRedis := opts.DefaultRedisURL
	if defRedis == "" {
		defRedis = config.Default().RedisURL
	}
	cfg := opts.Config
	b := &Backends{}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()

	// NATS.
	if cfg.IsSet("ELLIPSIS_NATS_URL") {
		if err := checkNATS(cfg.NATSServers(), cfg.NATSAuth(), connect); err != nil {
			return nil, fmt.Errorf("ELLIPSIS_NATS_URL is set to %s but %w (unset it to use an embedded nats-server)", natsconn.RedactURLs(cfg.NATSURL), err)
		}
		b.NATSURL, b.NATSSource = cfg.NATSURL, FromEnv
		log.Info("NATS: using the configured server (ELLIPSIS_NATS_URL)", zap.String("nats_url", natsconn.RedactURLs(b.NATSURL)))
	} else {
		n, err := embedded.StartNATS(embedded.NATSOptions{Logger: log.Named("nats-server")})
		if err != nil {
			return nil, fmt.Errorf("start the embedded nats-server: %w", err)
		}
		b.nats = n
		b.NATSURL, b.NATSSource = n.URL(), Embedded
		log.Info("NATS: using an embedded nats-server (set ELLIPSIS_NATS_URL to use another)", zap.String("nats_url", b.NATSURL))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("resolve backends: %w", err)
	}

	// Redis.
	switch {
	case cfg.IsSet("ELLIPSIS_REDIS_URL"):
		if err := pingRedis(ctx, cfg.RedisURL, connect); err != nil {
			return nil, fmt.Errorf("ELLIPSIS_REDIS_URL is set to %s but %w (unset it to use redis://127.0.0.1:6379 or an embedded server)", Redact(cfg.RedisURL), err)
		}
		b.RedisURL, b.RedisSource = cfg.RedisURL, FromEnv
		log.Info("Redis: using the configured server (ELLIPSIS_REDIS_URL)", zap.String("redis_url", Redact(b.RedisURL)))
	default:
		err := probeRedis(ctx, defRedis, probe)
		if err == nil {
			b.RedisURL, b.RedisSource = defRedis, FromDefault
			log.Info("Redis: using the local server, it answered PING (set ELLIPSIS_REDIS_URL to use another)", zap.String("redis_url", Redact(b.RedisURL)))
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("resolve backends: %w", ctx.Err())
		}
		r, rerr := embedded.StartRedis(embedded.RedisOptions{})
		if rerr != nil {
			return nil, fmt.Errorf("no Redis at %s (%v), and the embedded one did not start: %w", Redact(defRedis), err, rerr)
		}
		b.redis = r
		b.RedisURL, b.RedisSource = r.URL(), Embedded
		log.Info("Redis: using an embedded Redis-compatible server (miniredis, real-time clock); nothing usable at the default address",
			zap.String("redis_url", b.RedisURL), zap.String("default_url", Redact(defRedis)), zap.String("default_error", err.Error()))
	}
	ok = true
	return b, nil
}

// Close stops the embedded servers, if any. Safe to call more than once.
func (b *Backends) Close() {
	if b.redis != nil {
		b.redis.Close()
	}
	if b.nats != nil {
		b.nats.Shutdown()
	}
}

func checkNATS(urls []string, auth natsconn.Auth, timeout time.Duration) error {
	if err := natsconn.Probe(urls, auth, "ellipsis-dev check", timeout); err != nil {
		return fmt.Errorf("NATS is not reachable (timeout %s): %w", timeout, err)
	}
	return nil
}

// pingRedis sends one PING through a client for rawURL's topology
// (standalone, Sentinel or Cluster: see package redisconn).
func pingRedis(ctx context.Context, rawURL string, timeout time.Duration) error {
	o, err := redisconn.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("the URL cannot be parsed: %w", err)
	}
	o.Tune(redisconn.Tuning{MaxRetries: -1, DialerRetries: 1}) // one attempt: this is a probe
	switch {
	case o.Standalone != nil:
		o.Standalone.DialTimeout, o.Standalone.ReadTimeout, o.Standalone.WriteTimeout = timeout, timeout, timeout
		o.Standalone.PoolSize = 1
	case o.Failover != nil:
		o.Failover.DialTimeout, o.Failover.ReadTimeout, o.Failover.WriteTimeout = timeout, timeout, timeout
	case o.Cluster != nil:
		o.Cluster.DialTimeout, o.Cluster.ReadTimeout, o.Cluster.WriteTimeout = timeout, timeout, timeout
	}
	c := o.NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("Redis did not answer PING within %s", timeout)
		}
		return fmt.Errorf("Redis is not reachable (timeout %s): %w", timeout, err)
	}
	return nil
}

// probeRedis asks the Redis at a plain redis:// URL for PONG over one raw
// connection, within timeout. It is the quiet check of the default address
// (go-redis would log its failed dials); a server that wants AUTH or TLS
// fails it, and the embedded server is used instead.
func probeRedis(ctx context.Context, rawURL string, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "redis" || u.Host == "" {
		return fmt.Errorf("%s is not a plain redis:// URL with a host", Redact(rawURL))
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("Redis is not reachable (timeout %s): %w", timeout, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return fmt.Errorf("Redis PING: %w", err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 512)).ReadString('\n')
	if err != nil {
		return fmt.Errorf("Redis did not answer PING within %s: %w", timeout, err)
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("Redis answered PING with %q", line)
	}
	return nil
}

// Redact hides the password of a URL for logs and messages:
// redis://:secret@host:6379 gives redis://:xxxxx@host:6379 (a Sentinel
// URL's password= option too).
func Redact(raw string) string { return redisconn.Redact(raw) }
