// Package store is the coordinator's Redis layer: the placement of contexts on Redis
// servers, connection pools, the CRUD of every object, the atomic transitions (Lua),
// the reliable queues and the event stream. Every service reaches Redis through it.
//
// Connections: one Redis server has two pools, whatever the number of contexts. The
// "fixed" pool stays on DB 0 (actors, registry, wake-up lists, blocking pops). The
// "mux" pool serves every context: each use is a pipeline that starts with SELECT <db>
// in the same round trip, so 10,000 contexts share one pool (docs/architecture.md
// has the measurements).
//
// Transitions: each is a script under lua/ whose header declares its interface (its
// KEYS, its ARGV with names and types, its reply, the library files it needs).
// make lua-gen (lib/internal/luagen) writes from it the script's Lua prologue and its
// typed call in lua_gen.go: a struct <name>Args of its keys and arguments whose run
// method builds KEYS and ARGV, runs the script (a Redis function, script.go) through
// a luaRunner (*DB, *Server, a client) and decodes its reply; call() gives the Call
// for a batch (EvalBatch). Nothing else builds a script's arguments
// (scripts/lua-check.sh). CONTRIBUTING.md describes the declaration.
package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// SchemaVersion is the layout version this code reads and writes (coord:schema_version).
const SchemaVersion = "1"

// Options configure Open.
type Options struct {
	URL            string // the primary server: DB 0 and every context not placed elsewhere
	Placement      string // "1-1000=redis://a:6379,1001-2000=redis://b:6379"
	PoolSize       int
	ConnectTimeout time.Duration
	Log            zerolog.Logger
	// TLS is used for rediss:// servers (a private CA, a client certificate); nil:
	// the system roots. Its ServerName is each server's host.
	TLS *tls.Config
	// Password, when set, is the password of every server (AUTH with the URL's user).
	Password string
	// SentinelPassword, when set, is the password of every Sentinel of a Sentinel URL
	// (AUTH with the URL's sentinel_user, if any): the Sentinels' requirepass or ACL
	// user, apart from the master's.
	SentinelPassword string
	// WaitScripts: another process loads the store's Redis functions (supervisor-daemon,
	// whose Redis user alone may; script.go): Open loads none, and WaitScripts waits
	// for them. Otherwise this process is the loader: Open loads them into every
	// server, and the store keeps them there and retires other versions'.
	WaitScripts bool
	// KeepOldScripts is how long the loader keeps the libraries of another version
	// after the last process that calls them said so (0: OldScriptsKept).
	KeepOldScripts time.Duration
}

// Store is the handle every service holds.
type Store struct {
	primary *Server
	servers []*Server
	rules   []rule
	log     zerolog.Logger
	loader  bool          // this process loads the Redis functions (Options.WaitScripts)
	keepOld time.Duration // Options.KeepOldScripts
	stop    context.CancelFunc
	tending sync.WaitGroup // tend
}

type rule struct {
	from, to uint32
	srv      *Server
}

// Server is one Redis server with its two pools.
type Server struct {
	Name      string // the URL with the password hidden
	fixed     *redis.Client
	mux       *redis.Client
	loader    bool                        // the store is the loader of the Redis functions (script.go)
	databases int                         // how many databases it has (countDatabases); 0 when not known
	newProbe  func() *redis.Client        // a one-connection client for the start-up probe
	diagnose  func(context.Context) error // a Sentinel server's: why the probe got no master (askSentinels)
	lastFault atomic.Int64                // unix ms of the last passing fault a call met (faultHook)
}

// faultHook records when a call to the server met a passing fault (refused, broken,
// timed out, LOADING, …): the lease sweeps hold back for a while after one (SweepLeases).
type faultHook struct{ srv *Server }

func (h faultHook) note(err error) {
	if err != nil && !errors.Is(err, redis.Nil) && fault.Transient(err) {
		h.srv.lastFault.Store(time.Now().UnixMilli())
	}
}

func (h faultHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		h.note(err)
		return c, err
	}
}

func (h faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.note(err)
		return err
	}
}

func (h faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.note(err)
		return err
	}
}

// LastFault is when a call to any of the store's servers last met a passing fault
// (zero: never).
func (s *Store) LastFault() time.Time {
	var last int64
	for _, srv := range s.servers {
		last = max(last, srv.lastFault.Load())
	}
	if last == 0 {
		return time.Time{}
	}
	return time.UnixMilli(last)
}

// ErrNotFound is returned when an object does not exist.
var ErrNotFound = errors.New("not found")

// NotFoundError names the missing object.
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string   { return e.What + " not found" }
func (e *NotFoundError) Is(t error) bool { return t == ErrNotFound }

func notFound(format string, a ...any) error { return &NotFoundError{What: fmt.Sprintf(format, a...)} }

// ErrExists is returned when an object exists with other content.
var ErrExists = errors.New("already exists")

// ExistsError names the object and the first field that differs.
type ExistsError struct {
	What  string
	Field string
}

func (e *ExistsError) Error() string {
	if e.Field == "" {
		return e.What + " already exists"
	}
	return fmt.Sprintf("%s already exists with a different %s", e.What, e.Field)
}
func (e *ExistsError) Is(t error) bool { return t == ErrExists }

// Open connects to every server of the placement, checks each answers, and checks the
// data layout version in DB 0.
func Open(ctx context.Context, opt Options) (*Store, error) {
	quietOnce.Do(func() { redis.SetLogger(redisLogger{opt.Log}) })
	if opt.PoolSize <= 0 {
		opt.PoolSize = 32
	}
	if opt.ConnectTimeout <= 0 {
		opt.ConnectTimeout = 10 * time.Second
	}
	if err := checkScripts(); err != nil {
		return nil, err
	}
	s := &Store{log: opt.Log, loader: !opt.WaitScripts, keepOld: opt.KeepOldScripts}
	if s.keepOld <= 0 {
		s.keepOld = OldScriptsKept
	}
	byURL := map[string]*Server{}
	get := func(u string) (*Server, error) {
		if srv, ok := byURL[u]; ok {
			return srv, nil
		}
		srv, err := newServer(u, opt)
		if err != nil {
			return nil, err
		}
		srv.loader = s.loader
		byURL[u] = srv
		s.servers = append(s.servers, srv)
		return srv, nil
	}
	var err error
	if s.primary, err = get(opt.URL); err != nil {
		return nil, err
	}
	if s.rules, err = parsePlacement(opt.Placement, get); err != nil {
		s.Close()
		return nil, err
	}
	for _, srv := range s.servers {
		if err := srv.connect(ctx, opt.ConnectTimeout); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.checkSchema(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.loader {
		// Every script's function is known to the server before the first burst of
		// calls (else each concurrent first call would load it). A Redis restarted
		// later without its data is handled by the loader's checks (tend) and per
		// call of a context's database (EvalBatch).
		for _, srv := range s.servers {
			if err := s.tendScripts(ctx, srv, true); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	tctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.tending.Add(1)
	go func() {
		defer s.tending.Done()
		s.tend(tctx)
	}()
	return s, nil
}

func newServer(rawURL string, o Options) (*Server, error) {
	name := config.RedactURL(rawURL)
	if u, perr := url.Parse(rawURL); perr == nil && u.Scheme != "unix" && strings.Trim(u.Path, "/") != "" && strings.Trim(u.Path, "/") != "0" {
		return nil, fmt.Errorf("redis url %s: database must be 0 or absent (context N always lives in DB N)", name)
	}
	if IsSentinelURL(rawURL) {
		return newSentinelServer(rawURL, name, o)
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url %s: %v", name, err)
	}
	if opt.TLSConfig != nil && o.TLS != nil {
		t := o.TLS.Clone()
		t.ServerName = opt.TLSConfig.ServerName
		opt.TLSConfig = t
	}
	if o.Password != "" {
		opt.Password = o.Password
	}
	if opt.DB != 0 {
		return nil, fmt.Errorf("redis url %s: database must be 0 or absent (context N always lives in DB N)", name)
	}
	opt.PoolSize = o.PoolSize
	opt.MinIdleConns = 0
	opt.ConnMaxIdleTime = 5 * time.Minute
	opt.DialerRetries = 2
	fixed := redis.NewClient(opt)
	mopt := *opt
	mux := redis.NewClient(&mopt)
	popt := *opt
	popt.MaxRetries = -1 // the start-up probe reports the first error, not a retry's timeout
	popt.DialerRetries = 1
	popt.PoolSize = 1
	srv := &Server{Name: name, fixed: fixed, mux: mux, newProbe: func() *redis.Client { return redis.NewClient(&popt) }}
	fixed.AddHook(faultHook{srv})
	mux.AddHook(faultHook{srv})
	return srv, nil
}

// IsSentinelURL says whether a Redis URL names a Sentinel-managed master rather than
// a server: redis[s]://[user@]<sentinel host:port>[/0]?master_name=<name>[&addr=<more
// sentinels>…], go-redis's failover URL.
func IsSentinelURL(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && (u.Scheme == "redis" || u.Scheme == "rediss") && u.Query().Has("master_name")
}

// newSentinelServer connects to the master that a group of Sentinels names (go-redis's
// failover client): every new connection asks a Sentinel for the current master, and a
// failover (+switch-master) closes the connections to the old one, so that the pools
// follow the promoted replica. The URL's user and password (or Options.Password) log in
// to the master, as for a plain server; the Sentinels log in with sentinel_user (a
// query parameter, when they have ACL users) and Options.SentinelPassword, or are
// reached without AUTH when neither is given. The only query parameters taken are
// master_name, addr (more Sentinels) and sentinel_user.
func newSentinelServer(rawURL, name string, o Options) (*Server, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url %s: %v", name, err)
	}
	q := u.Query()
	fo := &redis.FailoverOptions{MasterName: q.Get("master_name"), SentinelAddrs: []string{u.Host}}
	for k := range q {
		if k != "master_name" && k != "addr" && k != "sentinel_user" {
			return nil, fmt.Errorf("redis url %s: unknown parameter %q (a Sentinel URL takes master_name, addr and sentinel_user)", name, k)
		}
	}
	for _, a := range q["addr"] {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return nil, fmt.Errorf("redis url %s: addr %q is not host:port", name, a)
		}
		fo.SentinelAddrs = append(fo.SentinelAddrs, a)
	}
	if fo.MasterName == "" {
		return nil, fmt.Errorf("redis url %s: master_name is empty", name)
	}
	if h, p, err := net.SplitHostPort(u.Host); err != nil || h == "" || p == "" {
		return nil, fmt.Errorf("redis url %s: the Sentinel %q is not host:port", name, u.Host)
	}
	if u.User != nil {
		fo.Username = u.User.Username()
		fo.Password, _ = u.User.Password()
	}
	if o.Password != "" {
		fo.Password = o.Password
	}
	fo.SentinelUsername, fo.SentinelPassword = q.Get("sentinel_user"), o.SentinelPassword
	if u.Scheme == "rediss" {
		// Each node (a Sentinel, the master of the moment) is verified under the host
		// it is reached at: the master's comes from the Sentinels.
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.TLS != nil {
			t = o.TLS.Clone()
		}
		t.ServerName = ""
		fo.TLSConfig = t
	}
	fo.PoolSize = o.PoolSize
	fo.MinIdleConns = 0
	fo.ConnMaxIdleTime = 5 * time.Minute
	fo.DialerRetries = 2
	fixed := redis.NewFailoverClient(fo)
	mopt := *fo
	mux := redis.NewFailoverClient(&mopt)
	popt := *fo
	popt.MaxRetries = -1
	popt.DialerRetries = 1
	popt.PoolSize = 1
	srv := &Server{Name: name, fixed: fixed, mux: mux, newProbe: func() *redis.Client { return redis.NewFailoverClient(&popt) },
		diagnose: func(ctx context.Context) error { return askSentinels(ctx, fo) }}
	fixed.AddHook(faultHook{srv})
	mux.AddHook(faultHook{srv})
	return srv, nil
}

func (srv *Server) connect(ctx context.Context, timeout time.Duration) error {
	probe := srv.newProbe()
	defer func() { _ = probe.Close() }()
	deadline := time.Now().Add(timeout)
	var last error // the last error that says more than "deadline exceeded"
	for {
		remaining := time.Until(deadline)
		if remaining < 500*time.Millisecond {
			remaining = 500 * time.Millisecond
		}
		pctx, cancel := context.WithTimeout(ctx, remaining)
		err := probe.Ping(pctx).Err()
		cancel()
		if err == nil {
			break
		}
		if srv.diagnose != nil && ctx.Err() == nil {
			// go-redis says only that no Sentinel answered: ask them for the reason
			// (a refused login is no passing fault).
			if derr := srv.diagnose(ctx); derr != nil {
				err = derr
			}
		}
		if !errors.Is(err, context.DeadlineExceeded) || last == nil {
			last = err
		}
		if ctx.Err() != nil || isPermanent(err) || time.Now().Add(250*time.Millisecond).After(deadline) {
			if errors.Is(last, context.DeadlineExceeded) {
				return fmt.Errorf("redis at %s: no answer within %v", srv.Name, timeout)
			}
			return fmt.Errorf("redis at %s: %v", srv.Name, last)
		}
		t := time.NewTimer(250 * time.Millisecond) // back off between connection attempts
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("redis at %s: %v", srv.Name, ctx.Err())
		case <-t.C:
		}
	}
	srv.databases = countDatabases(ctx, probe)
	return nil
}

// countDatabases finds how many databases the server has without CONFIG GET (which no
// service's Redis user may run: it would show other secrets of the configuration): the
// highest one SELECT takes, by a binary search (about 20 round trips for 1024). 0 when
// an answer other than "out of range" leaves it unknown.
func countDatabases(ctx context.Context, c *redis.Client) int {
	takes := func(n int) (bool, bool) {
		err := c.Do(ctx, "SELECT", n).Err()
		if err != nil && !strings.Contains(err.Error(), "out of range") {
			return false, false
		}
		return err == nil, true
	}
	lo, hi := 0, 1 // database lo exists; hi is not known to
	for {
		ok, known := takes(hi)
		if !known {
			return 0
		}
		if !ok {
			break
		}
		if lo, hi = hi, 2*hi; hi > 1<<24 {
			return 0
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, known := takes(mid)
		if !known {
			return 0
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// askSentinels asks each Sentinel of fo for its master's address, as the failover
// client does, and returns the first refusal of a login (NOAUTH, WRONGPASS) with what
// to do about it, or an answer that names no master; nil when a Sentinel names it or
// none could be reached (a passing fault, which the caller reports itself).
func askSentinels(ctx context.Context, fo *redis.FailoverOptions) error {
	for _, addr := range fo.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: fo.SentinelUsername, Password: fo.SentinelPassword,
			TLSConfig: fo.TLSConfig, DialTimeout: 2 * time.Second, MaxRetries: -1, PoolSize: 1})
		_, err := sc.GetMasterAddrByName(ctx, fo.MasterName).Result()
		_ = sc.Close()
		switch {
		case err == nil:
			return nil
		case isPermanent(err) && fo.SentinelPassword == "":
			return fmt.Errorf("the Sentinel at %s refused us: %v (a Sentinel that requires a password takes --redis-sentinel-password-file)", addr, err)
		case isPermanent(err):
			return fmt.Errorf("the Sentinel at %s refused us: %v (check --redis-sentinel-password-file and the URL's sentinel_user)", addr, err)
		case errors.Is(err, redis.Nil):
			return fmt.Errorf("the Sentinel at %s watches no master named %q", addr, fo.MasterName)
		}
	}
	return nil
}

func isPermanent(err error) bool {
	s := err.Error()
	return strings.Contains(s, "WRONGPASS") || strings.Contains(s, "NOAUTH") || strings.Contains(s, "NOPERM")
}

func parsePlacement(spec string, get func(string) (*Server, error)) ([]rule, error) {
	var rules []rule
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	for _, part := range strings.Split(spec, ",") {
		rng, u, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("redis placement %q: want <from>-<to>=<redis url>", part)
		}
		a, b, ok := strings.Cut(rng, "-")
		if !ok {
			b = a
		}
		from, err1 := strconv.ParseUint(a, 10, 32)
		to, err2 := strconv.ParseUint(b, 10, 32)
		if err1 != nil || err2 != nil || from == 0 || to < from {
			return nil, fmt.Errorf("redis placement %q: %q is not a context range like 1-1000", part, rng)
		}
		srv, err := get(u)
		if err != nil {
			return nil, fmt.Errorf("redis placement %q: %v", part, err)
		}
		for _, r := range rules {
			if uint32(from) <= r.to && uint32(to) >= r.from {
				return nil, fmt.Errorf("redis placement %q overlaps another range", part)
			}
		}
		rules = append(rules, rule{uint32(from), uint32(to), srv})
	}
	return rules, nil
}

func (s *Store) checkSchema(ctx context.Context) error {
	ok, err := s.primary.fixed.SetNX(ctx, keys.SchemaVersion, SchemaVersion, 0).Result()
	if err != nil {
		return fmt.Errorf("redis at %s: %v", s.primary.Name, err)
	}
	if ok {
		return nil
	}
	v, err := s.primary.fixed.Get(ctx, keys.SchemaVersion).Result()
	if err != nil {
		return fmt.Errorf("redis at %s: %v", s.primary.Name, err)
	}
	if v != SchemaVersion {
		return fmt.Errorf("redis at %s holds data layout version %s; this build reads version %s", s.primary.Name, v, SchemaVersion)
	}
	return nil
}

var quietOnce sync.Once

// redisLogger sends go-redis's own messages (pool dial failures) to the service's log
// at debug level; the store reports errors itself.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Str("component", "go-redis").Msgf(format, v...)
}

// Close stops the store's upkeep of its functions and closes every pool.
func (s *Store) Close() {
	if s.stop != nil {
		s.stop()
		s.tending.Wait()
	}
	for _, srv := range s.servers {
		_ = srv.fixed.Close()
		_ = srv.mux.Close()
	}
}

// Ping checks every server (readiness).
func (s *Store) Ping(ctx context.Context) error {
	for _, srv := range s.servers {
		if err := srv.fixed.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis at %s: %v", srv.Name, err)
		}
	}
	return nil
}

// G is DB 0 of the primary server (actors, registry, wake-up lists). Blocking
// commands are fine on it.
func (s *Store) G() *redis.Client { return s.primary.fixed }

// RedisOptions are the connection options of the primary server (address, TLS,
// user and password), a copy for a client of its own (the Hero Dispatcher's DB).
func (s *Store) RedisOptions() *redis.Options {
	o := *s.primary.fixed.Options()
	o.DB = 0
	return &o
}

// Servers returns every server of the placement, the primary first. Each one's DB 0
// holds the coordination entries of the contexts placed on it (Coord): a service that
// acts on them watches every server.
func (s *Store) Servers() []*Server { return s.servers }

// Coord is DB 0 of the server that holds a context: its coordination entries (wake
// lists, coord:due, coord:expire, coord:flows:active, coord:remote_due, stop lists)
// live there, next to the context's data, because a script of the context writes them
// in the same atomic step as the data (SELECT 0 inside a script reaches DB 0 of the
// server the script runs on). Blocking commands are fine on it.
func (s *Store) Coord(ctxID uint32) *redis.Client { return s.ServerFor(ctxID).fixed }

// Coord is this server's DB 0 (the coordination entries of the contexts placed on it).
func (srv *Server) Coord() *redis.Client { return srv.fixed }

// IsPrimary says whether the server is the primary (the one of --redis-url).
func (s *Store) IsPrimary(srv *Server) bool { return srv == s.primary }

// ServerFor returns the server that holds a context.
func (s *Store) ServerFor(ctxID uint32) *Server {
	for _, r := range s.rules {
		if ctxID >= r.from && ctxID <= r.to {
			return r.srv
		}
	}
	return s.primary
}

// Ctx returns the database of a context (it need not exist yet).
func (s *Store) Ctx(ctxID uint32) (*DB, error) {
	if ctxID == 0 {
		return nil, &model.ValidationError{Object: "context", Field: "context_id", Msg: "context_id must be at least 1 (context 0 would share DB 0 with the actors)"}
	}
	srv := s.ServerFor(ctxID)
	if srv.databases > 0 && int64(ctxID) >= int64(srv.databases) {
		return nil, &model.ValidationError{Object: "context", Field: "context_id",
			Msg: fmt.Sprintf("context_id %d is beyond the databases of redis at %s (databases %d: contexts 1-%d); raise its `databases` setting or place the context on another server", ctxID, srv.Name, srv.databases, srv.databases-1)}
	}
	return &DB{srv: srv, n: int(ctxID), ContextID: ctxID}, nil
}

// DB is one database: a context's, selected in front of every command.
type DB struct {
	srv       *Server
	n         int
	ContextID uint32
}

// Pipelined runs fn's commands in one round trip after SELECT. It returns the commands
// (without the SELECT) and the first error that is not redis.Nil.
func (d *DB) Pipelined(ctx context.Context, fn func(p redis.Pipeliner) error) ([]redis.Cmder, error) {
	return d.exec(ctx, d.srv.mux.Pipeline(), fn)
}

// TxPipelined is Pipelined inside MULTI/EXEC: all or nothing, nothing in between.
func (d *DB) TxPipelined(ctx context.Context, fn func(p redis.Pipeliner) error) ([]redis.Cmder, error) {
	return d.exec(ctx, d.srv.mux.TxPipeline(), fn)
}

func (d *DB) exec(ctx context.Context, p redis.Pipeliner, fn func(p redis.Pipeliner) error) ([]redis.Cmder, error) {
	p.Select(ctx, d.n)
	if err := fn(p); err != nil {
		p.Discard()
		return nil, err
	}
	cmds, err := p.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) && len(cmds) == 0 {
		return nil, err
	}
	var first error
	for _, c := range cmds {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) && first == nil {
			first = e
		}
	}
	// Drop the SELECT (and, in a transaction, MULTI/EXEC that go-redis keeps out).
	out := cmds
	for len(out) > 0 {
		if n := out[0].Name(); n == "select" || n == "multi" {
			out = out[1:]
			continue
		}
		break
	}
	if len(out) > 0 && out[len(out)-1].Name() == "exec" {
		out = out[:len(out)-1]
	}
	return out, first
}

// Eval runs a script in this database (EvalBatch of one call).
func (d *DB) Eval(ctx context.Context, sc *Script, keys []string, args ...any) (any, error) {
	return d.EvalBatch(ctx, []Call{{Script: sc, Keys: keys, Args: args}})[0].Result()
}

// runLua runs c in this database (Eval).
func (d *DB) runLua(ctx context.Context, c Call) (any, error) {
	return d.Eval(ctx, c.Script, c.Keys, c.Args...)
}

// Call is one script run of a batch (EvalBatch).
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
}

// EvalBatch runs several scripts in this database in one round trip (a pipeline, not a
// transaction: each script is atomic on its own) and returns each call's command, whose
// Err and Result are that call's alone (a lost connection fails every call). In the
// loader, a function the server does not know (yet) is loaded, and the calls that did
// not run are run again; elsewhere such a call fails ("Function not found", a passing
// fault for fault.Transient) until the loader's next check.
func (d *DB) EvalBatch(ctx context.Context, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = fcall(ctx, p, c)
		}
		return nil
	})
	if !d.srv.loader {
		return cmds
	}
	var missing []int
	var load map[*Script]bool // made only when a function is missing
	for i, c := range cmds {
		if isNoFunction(c.Err()) {
			if load == nil {
				load = map[*Script]bool{}
			}
			missing = append(missing, i)
			load[calls[i].Script] = true
		}
	}
	if len(missing) > 0 {
		// Load each missing library once, then run the calls that did not run.
		_, _ = d.srv.mux.Pipelined(ctx, func(p redis.Pipeliner) error {
			for sc := range load {
				p.FunctionLoad(ctx, sc.lib)
			}
			return nil
		})
		_, _ = d.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range missing {
				cmds[i] = fcall(ctx, p, calls[i])
			}
			return nil
		})
	}
	return cmds
}

// fcall queues call c on p as go-redis's FCall would (the same command, its first key
// at position 3), with its arguments in one slice made at its size: FCall copies them
// into a slice of its own, boxing the function's name and each key (an allocation
// each: 18 of a submission of 16 jobs' ~137), where these hand it pointers to them,
// which it writes as their values.
func fcall(ctx context.Context, p redis.Pipeliner, c Call) *redis.Cmd {
	args := make([]any, 3+len(c.Keys)+len(c.Args))
	args[0], args[1], args[2] = "fcall", &c.Script.fn, len(c.Keys)
	for i := range c.Keys {
		args[3+i] = &c.Keys[i]
	}
	copy(args[3+len(c.Keys):], c.Args)
	cmd := redis.NewCmd(ctx, args...)
	if len(c.Keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = p.Process(ctx, cmd) // its error is the command's
	return cmd
}

// HGetAll reads a hash.
func (d *DB) HGetAll(ctx context.Context, key string) (map[string]string, error) {
	var cmd *redis.MapStringStringCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.HGetAll(ctx, key)
		return nil
	}); err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}
