package rmqs_test

// The real rmq-scheduler binary for the tests: a temporary SQLite
// database, a free loopback port, and RabbitMQ at RMQS_TEST_AMQP_URL, or
// else a closed AMQP port (the broker is down: jobs are accepted and
// stored, nothing waits for a delivery). RMQS_BIN names the binary; without
// it the tests are skipped. RMQS_TEST_STORE=postgres (tests/run.sh, for
// clients.go.postgres) gives each service a database of its own on the
// server RMQS_TEST_PG_ADMIN and RMQS_TEST_PG_URL name, dropped at the end.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type service struct {
	t     testing.TB
	args  []string
	token string
	dir   string
	db    string
	port  int
	amqp  string
	cmd   *exec.Cmd
	done  chan struct{}
	// https: the service serves TLS; client is what the tests' own
	// requests go through.
	scheme string
	client *http.Client
}

func newService(t testing.TB, token string, args ...string) *service {
	t.Helper()
	bin := os.Getenv("RMQS_BIN")
	if bin == "" {
		t.Skip("RMQS_BIN is not set: the path of the rmq-scheduler binary to test against (e.g. build-test/rmq-scheduler)")
	}
	s := &service{t: t, args: args, token: token, dir: t.TempDir(), scheme: "http", client: http.DefaultClient}
	s.port = freePort(t)
	s.db = filepath.Join(s.dir, "scheduler.db")
	if os.Getenv("RMQS_TEST_STORE") == "postgres" {
		name := fmt.Sprintf("rmqs_gc_%d_%d", os.Getpid(), rand.Int63())
		psql(t, fmt.Sprintf(`CREATE DATABASE %s OWNER "%s"`, name, pgEnv(t, "RMQS_TEST_PG_USER")))
		t.Cleanup(func() { psql(t, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
		s.db = pgEnv(t, "RMQS_TEST_PG_URL") + "/" + name
	}
	s.amqp = os.Getenv("RMQS_TEST_AMQP_URL")
	if s.amqp == "" {
		s.amqp = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", freePort(t))
	}
	t.Cleanup(s.stop)
	return s
}

func pgEnv(t testing.TB, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: RMQS_TEST_STORE=postgres needs the server tests/run.sh starts", name)
	}
	return v
}

func psql(t testing.TB, sql string) {
	t.Helper()
	out, err := exec.Command("/usr/lib/postgresql/15/bin/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-d", pgEnv(t, "RMQS_TEST_PG_ADMIN"), "-c", sql).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v: %s", sql, err, out)
	}
}

func startService(t testing.TB, token string, args ...string) *service {
	s := newService(t, token, args...)
	s.start(true)
	return s
}

func (s *service) url() string { return fmt.Sprintf("%s://127.0.0.1:%d", s.scheme, s.port) }

// start (again, on the same port and database after stop).
func (s *service) start(wait bool) {
	s.t.Helper()
	args := append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", s.port),
		"--db", s.db, "--amqp-url", s.amqp}, s.args...)
	cmd := exec.Command(os.Getenv("RMQS_BIN"), args...)
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RMQS_") {
			env = append(env, e)
		}
	}
	if os.Getenv("ASAN_OPTIONS") == "" {
		env = append(env, "ASAN_OPTIONS=detect_leaks=0")
	}
	if s.token != "" {
		env = append(env, "RMQS_API_TOKEN="+s.token)
	}
	cmd.Env = env
	log, err := os.OpenFile(filepath.Join(s.dir, "service.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	log.Close()
	s.cmd = cmd
	s.done = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	if wait {
		s.ready()
	}
}

func (s *service) ready() {
	s.t.Helper()
	end := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		select {
		case <-s.done:
			s.t.Fatalf("the service exited: %s", s.log())
		default:
		}
		if st, _, _ := s.api("GET", "/healthz", nil); st == 200 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("timed out waiting for the service: %s", s.log())
}

func (s *service) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "service.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop with SIGTERM (SIGKILL after 15 s); the process we started, by PID.
func (s *service) stop() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// api: a request of its own, to check what the client did.
func (s *service) api(method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url()+path, r)
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metric sums the /metrics samples whose name and labels start with prefix.
func (s *service) metric(prefix string) float64 {
	s.t.Helper()
	_, b, err := s.api("GET", "/metrics", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	sum := 0.0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}

// countingTransport counts the requests it carries, by path.
type countingTransport struct {
	rt    http.RoundTripper
	n     atomic.Int64
	mu    sync.Mutex
	paths map[string]int
}

func newCounting() *countingTransport {
	return &countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone(), paths: map[string]int{}}
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.mu.Lock()
	c.paths[r.URL.Path]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}
