package stack

// Temporal's production topology, for Options.TemporalCluster: PostgreSQL
// from Debian, both of Temporal's databases set up by Temporal's own SQL
// tool from the schemas embedded in it (SQL advanced visibility), and the
// frontend, history (several shards), matching and worker services as four
// processes of Temporal's own server — what a platform team runs, where the
// dev server is one process on SQLite with one shard.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The production-shaped Temporal's components, for Kill and Restart.
const (
	TemporalFrontend = "temporal-frontend"
	TemporalHistory  = "temporal-history"
	TemporalMatching = "temporal-matching"
	// TemporalWorkerService is Temporal's own worker service (its system
	// workflows), not sluice's worker.
	TemporalWorkerService = "temporal-worker"
	Postgres              = "postgres"
	TemporalUI            = "temporal-ui"
)

// temporalServices are the server's services, in the order they start.
var temporalServices = []string{"history", "matching", "frontend", "worker"}

// historyShards is the cluster's shard count: more than one, so rollouts
// land on different shards as they do in production (the dev server has one).
const historyShards = 4

// temporalCluster is the running topology.
type temporalCluster struct {
	pgData string // PostgreSQL's data directory, outside Dir (it must belong to its user)
	pgPort int
	root   string // the server's --root: config/development.yaml beneath it
	// ports are each service's gRPC port; the frontend's is the stack's
	// TemporalAddr.
	ports    map[string]int
	services map[string]*proc
	pg       *proc
	ui       *proc // Temporal's UI server, if one runs
}

// lowPort finds a free loopback port below 32768: Temporal's membership
// table keeps ports in a PostgreSQL smallint, and a service on an
// ephemeral port (32768 and above here) dies at start ("value … is out of
// range for type smallint").
func lowPort(taken map[int]bool) (int, error) {
	for range 200 {
		p := 20000 + rand.IntN(12000)
		if taken[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		taken[p] = true
		return p, nil
	}
	return 0, errors.New("no free loopback port between 20000 and 32000")
}

// postgresUser is who PostgreSQL runs as: itself refuses root, so under
// root the Debian package's postgres user; otherwise whoever runs the stack.
func postgresUser() (*syscall.Credential, error) {
	if os.Getuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user (install Debian's postgresql: test/tools/install.sh postgres): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Stack) startTemporalCluster(ctx context.Context) error {
	if s.opts.Tools.TemporalServerDir == "" || s.opts.Tools.PostgresDir == "" {
		return errors.New("the production-shaped Temporal needs SLUICE_TEMPORAL_SERVER_DIR and SLUICE_POSTGRES_DIR (test/tools/install.sh temporal-server, postgres)")
	}
	c := &temporalCluster{ports: map[string]int{}, services: map[string]*proc{}}
	s.cluster = c
	taken := map[int]bool{}
	var err error
	if c.pgPort, err = lowPort(taken); err != nil {
		return err
	}
	// A service needs a gRPC and a membership port; the frontend an HTTP
	// one too. Each below 32768 (lowPort).
	ports := map[string][]int{}
	for _, svc := range temporalServices {
		n := 2
		if svc == "frontend" {
			n = 3
		}
		for range n {
			p, err := lowPort(taken)
			if err != nil {
				return err
			}
			ports[svc] = append(ports[svc], p)
		}
		c.ports[svc] = ports[svc][0]
	}
	if err := s.startPostgres(ctx, c); err != nil {
		return err
	}
	if err := s.setupTemporalSchemas(ctx, c); err != nil {
		return err
	}
	c.root = filepath.Join(s.opts.Dir, "temporal-server")
	if err := os.MkdirAll(filepath.Join(c.root, "config"), 0o755); err != nil {
		return err
	}
	dynamic := filepath.Join(c.root, "config", "dynamic.yaml")
	if err := os.WriteFile(dynamic, []byte(temporalDynamicConfig(!s.opts.NoEagerActivities)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.root, "config", "development.yaml"), []byte(temporalConfig(c.pgPort, ports, dynamic)), 0o644); err != nil {
		return err
	}
	s.TemporalAddr = fmt.Sprintf("127.0.0.1:%d", c.ports["frontend"])
	s.sluiceTemporal = s.TemporalAddr
	if s.opts.Via != nil {
		if s.sluiceTemporal, err = s.opts.Via("temporal", s.TemporalAddr); err != nil {
			return err
		}
	}

	// The namespace and sluice's search attributes are registered through
	// the frontend alone, before the other services start: each service
	// caches the search attributes for a minute, so ones started after
	// the registration know them at once, as they would on a cluster
	// where `sluice setup` ran before sluice was deployed.
	if err := s.startTemporalService(ctx, c, "frontend"); err != nil {
		return err
	}
	if err := s.registerNamespace(ctx); err != nil {
		return err
	}
	if err := s.temporalReady(ctx); err != nil {
		return err
	}
	c.services["frontend"].stop(10 * time.Second)
	for _, svc := range temporalServices {
		if err := s.startTemporalService(ctx, c, svc); err != nil {
			return err
		}
	}
	if err := s.temporalReady(ctx); err != nil {
		return err
	}
	return s.startTemporalUI(ctx, c)
}

// startTemporalUI runs Temporal's web UI server against the frontend, when
// the stack wants a UI and the tools have one.
func (s *Stack) startTemporalUI(ctx context.Context, c *temporalCluster) error {
	if (!s.opts.UI && s.opts.UIPort == 0) || s.opts.Tools.TemporalUIServer == "" {
		return nil
	}
	if s.opts.UIPort == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		s.opts.UIPort = p
	}
	root := filepath.Join(s.opts.Dir, "temporal-ui")
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		return err
	}
	cfg := fmt.Sprintf("temporalGrpcAddress: %q\nhost: 127.0.0.1\nport: %d\nenableUi: true\ndefaultNamespace: default\ncors:\n  cookieInsecure: true\n", s.TemporalAddr, s.opts.UIPort)
	if err := os.WriteFile(filepath.Join(root, "config", "development.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	var err error
	if c.ui, err = startProc(s.opts.Dir, TemporalUI, nil, s.opts.Tools.TemporalUIServer, "--root", root, "--config", "config", "--env", "development", "start"); err != nil {
		return err
	}
	s.UIURL = fmt.Sprintf("http://127.0.0.1:%d", s.opts.UIPort)
	return s.temporalUIReady(ctx, c.ui)
}

func (s *Stack) temporalUIReady(ctx context.Context, p *proc) error {
	return waitFor(ctx, p, "Temporal's UI server", 30*time.Second, httpOK(s.UIURL+"/api/v1/settings"))
}

// startPostgres makes a database cluster in a directory of its own and
// starts PostgreSQL on it, on loopback only. fsync is off: the stack
// measures sluice and Temporal, not this machine's disk; commits still wait
// for the server's write (synchronous_commit stays on), so a restart of
// PostgreSQL loses nothing that Temporal was told was written.
func (s *Stack) startPostgres(ctx context.Context, c *temporalCluster) error {
	as, err := postgresUser()
	if err != nil {
		return err
	}
	if c.pgData, err = os.MkdirTemp("", "sluice-postgres-"); err != nil {
		return err
	}
	if as != nil {
		if err := os.Chown(c.pgData, int(as.Uid), int(as.Gid)); err != nil {
			return err
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(s.opts.Tools.PostgresDir, "initdb"),
		"-D", c.pgData, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: as}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v: %s", err, out)
	}
	p := &proc{dir: s.opts.Dir, name: Postgres, as: as, bin: filepath.Join(s.opts.Tools.PostgresDir, "postgres"),
		// A fast shutdown when stopped; when killed, an immediate one — a
		// crash to PostgreSQL, recovered from its WAL at the next start
		// (SIGKILL would leave its backends, each in a session of its
		// own, holding the shared memory the restart needs).
		term: syscall.SIGINT, crash: syscall.SIGQUIT,
		args: []string{"-D", c.pgData, "-p", strconv.Itoa(c.pgPort), "-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + c.pgData, "-c", "fsync=off", "-c", "full_page_writes=off",
			"-c", "max_connections=300", "-c", "shared_buffers=128MB"}}
	if c.pg, err = p.start(); err != nil {
		return err
	}
	return s.postgresReady(ctx, c)
}

func (s *Stack) postgresReady(ctx context.Context, c *temporalCluster) error {
	return waitFor(ctx, c.pg, "PostgreSQL", 60*time.Second, func() error {
		out, err := exec.CommandContext(ctx, filepath.Join(s.opts.Tools.PostgresDir, "pg_isready"),
			"-h", "127.0.0.1", "-p", strconv.Itoa(c.pgPort), "-U", "postgres").CombinedOutput()
		if err != nil {
			return fmt.Errorf("pg_isready: %v: %s", err, out)
		}
		return nil
	})
}

// setupTemporalSchemas creates Temporal's two databases and brings each to
// the newest schema the server ships, as an operator does with the SQL tool.
func (s *Stack) setupTemporalSchemas(ctx context.Context, c *temporalCluster) error {
	tool := filepath.Join(s.opts.Tools.TemporalServerDir, "sql")
	for _, db := range []struct{ name, schema string }{
		{"temporal", "postgresql/v12/temporal"},
		{"temporal_visibility", "postgresql/v12/visibility"},
	} {
		base := []string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(c.pgPort), "-u", "postgres", "--db", db.name}
		for _, step := range [][]string{
			{"create-database"},
			{"setup-schema", "-v", "0.0"},
			{"update-schema", "--schema-name", db.schema},
		} {
			out, err := exec.CommandContext(ctx, tool, append(base, step...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("temporal sql tool %s on %s: %v: %s", step[0], db.name, err, out)
			}
		}
	}
	return nil
}

// temporalDynamicConfig is the services' dynamic configuration file.
func temporalDynamicConfig(eager bool) string {
	return fmt.Sprintf("%s:\n  - value: %t\n", eagerActivities, eager)
}

// temporalConfig is the server's configuration: both stores on PostgreSQL
// (SQL advanced visibility), the shards, each service's ports on loopback,
// and where its dynamic configuration file is.
func temporalConfig(pgPort int, ports map[string][]int, dynamic string) string {
	var b strings.Builder
	store := func(name, db string, conns int) {
		fmt.Fprintf(&b, `    %s:
      sql:
        pluginName: postgres12
        databaseName: %s
        connectAddr: "127.0.0.1:%d"
        connectProtocol: tcp
        user: postgres
        maxConns: %d
        maxIdleConns: %d
        maxConnLifetime: 1h
`, name, db, pgPort, conns, conns)
	}
	fmt.Fprintf(&b, "log:\n  stdout: true\n  level: warn\npersistence:\n  defaultStore: default\n  visibilityStore: visibility\n  numHistoryShards: %d\n  datastores:\n", historyShards)
	store("default", "temporal", 20)
	store("visibility", "temporal_visibility", 10)
	b.WriteString("global:\n  membership:\n    maxJoinDuration: 30s\n    broadcastAddress: 127.0.0.1\nservices:\n")
	for _, svc := range temporalServices {
		p := ports[svc]
		fmt.Fprintf(&b, "  %s:\n    rpc:\n      grpcPort: %d\n      membershipPort: %d\n      bindOnLocalHost: true\n", svc, p[0], p[1])
		if svc == "frontend" {
			fmt.Fprintf(&b, "      httpPort: %d\n", p[2])
		}
	}
	fmt.Fprintf(&b, `clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "127.0.0.1:%d"
dcRedirectionPolicy:
  policy: noop
publicClient:
  hostPort: "127.0.0.1:%d"
dynamicConfigClient:
  filepath: %q
  pollInterval: 10s
`, ports["frontend"][0], ports["frontend"][0], dynamic)
	return b.String()
}

// startTemporalService starts one of the server's services and waits until
// its gRPC health check answers (Temporal's worker service has none: it
// must only stay up).
func (s *Stack) startTemporalService(ctx context.Context, c *temporalCluster, svc string) error {
	p, err := startProc(s.opts.Dir, "temporal-"+svc, nil, filepath.Join(s.opts.Tools.TemporalServerDir, "server"),
		"--root", c.root, "--config", "config", "--env", "development", "--allow-no-auth", "start", "--service", svc)
	if err != nil {
		return err
	}
	c.services[svc] = p
	return s.temporalServiceReady(ctx, c, svc)
}

func (s *Stack) temporalServiceReady(ctx context.Context, c *temporalCluster, svc string) error {
	p := c.services[svc]
	if svc == "worker" {
		return p.staysUp(ctx)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", c.ports[svc])
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	return waitFor(ctx, p, p.name, 90*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := health.Check(cctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if r.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("%s: %s", p.name, r.Status)
		}
		return nil
	})
}

// registerNamespace creates the default namespace with the Temporal CLI,
// as an operator would (the dev server makes it by itself).
func (s *Stack) registerNamespace(ctx context.Context) error {
	return waitFor(ctx, s.cluster.services["frontend"], "the default namespace", 60*time.Second, func() error {
		out, err := exec.CommandContext(ctx, s.opts.Tools.Temporal, "operator", "namespace", "create",
			"--namespace", "default", "--retention", "72h", "--address", s.TemporalAddr).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "already") {
			return fmt.Errorf("temporal operator namespace create: %v: %s", err, out)
		}
		return nil
	})
}

// clusterProcs are the topology's processes, PostgreSQL last.
func (c *temporalCluster) procs() []*proc {
	if c == nil {
		return nil
	}
	ps := []*proc{c.ui}
	for _, svc := range temporalServices {
		ps = append(ps, c.services[svc])
	}
	return append(ps, c.pg)
}

// restartClusterPart brings a killed part of the topology back and waits
// until it answers as it did at start.
func (s *Stack) restartClusterPart(ctx context.Context, name string, p *proc) error {
	c := s.cluster
	np, err := p.respawn()
	if err != nil {
		return err
	}
	switch name {
	case Postgres:
		c.pg = np
		return s.postgresReady(ctx, c)
	case TemporalUI:
		c.ui = np
		return s.temporalUIReady(ctx, np)
	}
	svc := strings.TrimPrefix(name, "temporal-")
	c.services[svc] = np
	if err := s.temporalServiceReady(ctx, c, svc); err != nil {
		return err
	}
	if svc == "frontend" {
		return s.temporalReady(ctx)
	}
	return nil
}

// stop stops the services together (a history service may take seconds to
// hand its shards over), then PostgreSQL, and removes its data.
func (c *temporalCluster) stop() {
	if c == nil {
		return
	}
	c.ui.stop(5 * time.Second)
	var wg sync.WaitGroup
	for _, p := range c.services {
		wg.Go(func() { p.stop(10 * time.Second) })
	}
	wg.Wait()
	c.pg.stop(10 * time.Second)
	if c.pgData != "" {
		_ = os.RemoveAll(c.pgData)
	}
}
