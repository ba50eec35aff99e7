package rmqs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rmqs "github.com/rmq-scheduler/rmq-scheduler/clients/go"
)

var patient = rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 40, Base: 20 * time.Millisecond, Cap: 300 * time.Millisecond})

type planned struct {
	status     int
	retryAfter string
	body       string
	reset      bool // pass through, then cut the connection instead of answering
}

// front stands between the client and the service: plan(r, n) for request
// n answers itself, cuts the connection, or (nil) passes the request on.
type front struct {
	srv *httptest.Server
	n   atomic.Int64
}

func newFront(t *testing.T, target string, plan func(r *http.Request, n int) *planned) *front {
	f := &front{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(f.n.Add(1) - 1)
		body, _ := io.ReadAll(r.Body)
		p := plan(r, n)
		if p != nil && !p.reset {
			w.Header().Set("Content-Type", "application/json")
			if p.retryAfter != "" {
				w.Header().Set("Retry-After", p.retryAfter)
			}
			w.WriteHeader(p.status)
			_, _ = w.Write([]byte(p.body))
			return
		}
		up, _ := http.NewRequest(r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		up.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(up)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if p != nil && p.reset {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(data)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func TestRetries(t *testing.T) {
	svc := startService(t, "")
	ctx := context.Background()

	t.Run("a client started before the service: connection refused is retried, every job stored once", func(t *testing.T) {
		late := newService(t, "")
		c := newClient(t, late.url(), patient, rmqs.WithMaxBatch(100))
		const n = 1000
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				j := job("late")
				j.Body = map[string]any{"i": i}
				m, err := c.Schedule(ctx, j)
				if errs[i] = err; err == nil {
					ids[i] = m.ID
				}
			}(i)
		}
		time.Sleep(400 * time.Millisecond)
		late.start(false)
		wg.Wait()
		seen := map[string]bool{}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			seen[ids[i]] = true
		}
		cnt, err := c.Count(ctx, rmqs.Filter{RoutingKey: "late"}, 0)
		if len(seen) != n || err != nil || cnt.Count != n {
			t.Fatalf("%d ids, %v %v", len(seen), cnt, err)
		}
	})

	t.Run("the service killed and restarted mid-way: 0 lost, 0 duplicates (item keys)", func(t *testing.T) {
		s := startService(t, "")
		c := newClient(t, s.url(), patient, rmqs.WithMaxBatch(50))
		type res struct {
			id  string
			err error
		}
		results := make(chan res, 2000)
		var wg sync.WaitGroup
		for wave := 0; wave < 20; wave++ {
			for i := 0; i < 100; i++ {
				wg.Add(1)
				go func(wave, i int) {
					defer wg.Done()
					j := job("restart")
					j.Body = map[string]any{"wave": wave, "i": i}
					m, err := c.Schedule(ctx, j, rmqs.IdempotencyKey(fmt.Sprintf("restart-%d-%d", wave, i)))
					if err != nil {
						results <- res{err: err}
						return
					}
					results <- res{id: m.ID}
				}(wave, i)
			}
			time.Sleep(20 * time.Millisecond)
			if wave == 6 {
				// SIGKILL: batches committed whose answers never left.
				_ = s.cmd.Process.Signal(syscall.SIGKILL)
				<-s.done
			}
			if wave == 12 {
				s.start(false)
			}
		}
		wg.Wait()
		close(results)
		ids := map[string]bool{}
		for r := range results {
			if r.err != nil {
				t.Fatal(r.err)
			}
			ids[r.id] = true
		}
		if len(ids) != 2000 {
			t.Fatalf("%d distinct ids", len(ids))
		}
		if c.Retries() == 0 {
			t.Fatal("the restart was not seen")
		}
		t.Logf("restart: %d tries repeated", c.Retries())
		stored := map[string]bool{}
		it := c.List(ctx, rmqs.Filter{RoutingKey: "restart", PageSize: 1000})
		for it.Next() {
			stored[it.Job().ID] = true
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		for id := range ids {
			if !stored[id] {
				t.Fatalf("job %s lost", id)
			}
		}
		if len(stored) != 2000 {
			t.Fatalf("%d stored: duplicates", len(stored))
		}
	})

	t.Run("429 with Retry-After and 503 are retried, the Retry-After honoured; stored once", func(t *testing.T) {
		f := newFront(t, svc.url(), func(r *http.Request, n int) *planned {
			switch n {
			case 0:
				return &planned{status: 429, retryAfter: "1", body: `{"error":{"code":"unavailable","message":"slow down"}}`}
			case 1, 2:
				return &planned{status: 503, body: `{"error":{"code":"unavailable","message":"the database is unavailable"}}`}
			}
			return nil
		})
		c := newClient(t, f.srv.URL, rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 5, Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond}))
		t0 := time.Now()
		m, err := c.Schedule(ctx, job("r429"))
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(t0) < time.Second || f.n.Load() != 4 {
			t.Fatalf("%v, %d requests", time.Since(t0), f.n.Load())
		}
		if g, err := c.Get(ctx, m.ID); err != nil || g.RoutingKey != "r429" {
			t.Fatal(g, err)
		}
		if cnt, _ := c.Count(ctx, rmqs.Filter{RoutingKey: "r429"}, 0); cnt.Count != 1 {
			t.Fatal(cnt)
		}
	})

	t.Run("retries end after Attempts with the last error; other 4xx are never retried", func(t *testing.T) {
		f := newFront(t, svc.url(), func(r *http.Request, n int) *planned {
			switch r.URL.Path {
			case "/status":
				return &planned{status: 503, retryAfter: "0", body: `{"error":{"code":"unavailable","message":"down"}}`}
			case "/stats":
				return &planned{status: 400, body: `{"error":{"code":"invalid_argument","message":"no"}}`}
			}
			return &planned{status: 409, body: `{"error":{"code":"conflict","message":"no"}}`}
		})
		c := newClient(t, f.srv.URL, rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond}))
		_, err := c.Status(ctx)
		if e := asErr(t, err, rmqs.CodeUnavailable); e.Status != 503 || f.n.Load() != 3 {
			t.Fatal(e, f.n.Load())
		}
		_, err = c.Stats(ctx, "")
		asErr(t, err, rmqs.CodeInvalidArgument)
		if f.n.Load() != 4 {
			t.Fatal(f.n.Load())
		}
		_, err = c.ScheduleOne(ctx, job("x"))
		asErr(t, err, rmqs.CodeConflict)
		if f.n.Load() != 5 {
			t.Fatal(f.n.Load())
		}
		nobody := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
			rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 2, Base: time.Millisecond, Cap: 2 * time.Millisecond}))
		_, err = nobody.Get(ctx, "x")
		if e := asErr(t, err, rmqs.CodeConnection); !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, rmqs.ErrConnection) {
			t.Fatal(e)
		}
		if nobody.Retries() != 1 {
			t.Fatal(nobody.Retries())
		}
	})

	t.Run("a batch whose answer was cut is retried and stored once", func(t *testing.T) {
		f := newFront(t, svc.url(), func(r *http.Request, n int) *planned {
			if n == 0 {
				return &planned{reset: true}
			}
			return nil
		})
		// 200 ms: the 300 goroutines start within it even under the race
		// detector on a loaded machine, so they make one batch.
		c := newClient(t, f.srv.URL, rmqs.WithLinger(200*time.Millisecond),
			rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond}))
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[string]bool{}
		for i := 0; i < 300; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := c.Schedule(ctx, job("ikcut"))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids[m.ID] = true
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(ids) != 300 || f.n.Load() != 2 {
			t.Fatalf("%d ids, %d requests", len(ids), f.n.Load())
		}
		if cnt, _ := c.Count(ctx, rmqs.Filter{RoutingKey: "ikcut"}, 0); cnt.Count != 300 {
			t.Fatal(cnt)
		}
	})

	t.Run("ScheduleOne after a cut answer: retried with the same Idempotency-Key, one job", func(t *testing.T) {
		f := newFront(t, svc.url(), func(r *http.Request, n int) *planned {
			if n == 0 {
				return &planned{reset: true}
			}
			return nil
		})
		c := newClient(t, f.srv.URL, rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond}))
		j, err := c.ScheduleOne(ctx, job("cut1"))
		if err != nil || f.n.Load() != 2 || j.RoutingKey != "cut1" {
			t.Fatal(j, err, f.n.Load())
		}
		if cnt, _ := c.Count(ctx, rmqs.Filter{RoutingKey: "cut1"}, 0); cnt.Count != 1 {
			t.Fatal(cnt)
		}
	})
}
