package rmqs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rmqs "github.com/rmq-scheduler/rmq-scheduler/clients/go"
)

const batchRoute = `rmqs_http_requests_total{route="/schedule/batch"`

func TestBatching(t *testing.T) {
	svc := startService(t, "", "--allow-exchanges", "orders", "--max-body-bytes", "262144")
	ctx := context.Background()

	t.Run("10,000 goroutines: each its own job, at most 100 HTTP requests", func(t *testing.T) {
		ct := newCounting()
		// 60 s per request: the service under ASan, beside another test,
		// took up to 2.7 s per 1,000-item batch, and the batches queue at
		// its one writer.
		c := newClient(t, svc.url(), rmqs.WithTransport(ct), rmqs.WithTimeout(time.Minute))
		before := svc.metric(batchRoute)
		const n = 10000
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				j := job("tenk")
				j.Body = map[string]any{"i": i}
				m, err := c.Schedule(ctx, j)
				errs[i] = err
				if err == nil {
					ids[i] = m.ID
				}
			}(i)
		}
		wg.Wait()
		took := time.Since(t0)
		seen := map[string]bool{}
		for i := range ids {
			if errs[i] != nil {
				t.Fatalf("call %d: %v (%v requests, %d retries)\n%s", i, errs[i], svc.metric(batchRoute)-before, c.Retries(), svc.log())
			}
			seen[ids[i]] = true
		}
		if len(seen) != n {
			t.Fatalf("%d distinct ids", len(seen))
		}
		requests := svc.metric(batchRoute) - before
		if requests > 100 || requests < 10 {
			t.Fatalf("%v requests", requests)
		}
		if got := ct.n.Load(); float64(got) != requests {
			t.Fatalf("the transport carried %d requests, the service counted %v", got, requests)
		}
		cnt, err := c.Count(ctx, rmqs.Filter{RoutingKey: "tenk"}, 0)
		if err != nil || cnt.Count != n {
			t.Fatalf("%v %v", cnt, err)
		}
		for _, i := range []int{0, 4321, 9999} {
			g, err := c.Get(ctx, ids[i])
			if err != nil || string(g.Body) != fmt.Sprintf(`{"i":%d}`, i) {
				t.Fatalf("job of call %d: %v %v", i, g, err)
			}
		}
		t.Logf("10000 Schedule calls: %v requests, %v", requests, took)
	})

	t.Run("callers that each await their job share requests; a lone caller waits for nobody", func(t *testing.T) {
		c := newClient(t, svc.url())
		before := svc.metric(batchRoute)
		// 64 goroutines, 5 jobs each, one at a time: past 8 batches out,
		// the calls made meanwhile go together when one ends.
		var wg sync.WaitGroup
		var failed atomic.Int64
		for k := 0; k < 64; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				for i := 0; i < 5; i++ {
					j := job("rounds")
					j.Body = map[string]any{"k": k, "i": i}
					if _, err := c.Schedule(ctx, j); err != nil {
						t.Error(err)
						failed.Add(1)
					}
				}
			}(k)
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.FailNow()
		}
		if r := svc.metric(batchRoute) - before; r < 5 || r > 160 {
			t.Fatalf("%v requests for 320 calls of 64 callers", r)
		}
		// One caller, one job at a time: each call a request of its own,
		// sent at once (not held for calls that cannot come).
		before = svc.metric(batchRoute)
		for i := 0; i < 20; i++ {
			if _, err := c.Schedule(ctx, job("lone")); err != nil {
				t.Fatal(err)
			}
		}
		if r := svc.metric(batchRoute) - before; r != 20 {
			t.Fatalf("%v requests for 20 lone calls", r)
		}
	})

	t.Run("invalid items: each of those callers gets its own error, the others their jobs", func(t *testing.T) {
		// 200 ms: the 1,000 goroutines start within it even under the race
		// detector on a loaded machine (20 ms made two batches in CI's lane).
		c := newClient(t, svc.url(), rmqs.WithLinger(200*time.Millisecond))
		before := svc.metric(batchRoute)
		const n = 1000
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				j := job("mixed")
				j.Body = map[string]any{"i": i}
				switch {
				case i%7 == 3:
					j.Delay = -time.Millisecond
				case i == 600 || i == 602:
					j.Exchange = []string{"payments", "nope"}[(i-600)/2]
				case i == 601:
					j.Extra = map[string]any{"colour": "red"}
				}
				_, errs[i] = c.Schedule(ctx, j)
			}(i)
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case i%7 == 3:
				if e := asErr(t, err, rmqs.CodeInvalidArgument); e.Field != "delay_ms" || !strings.Contains(e.Message, "negative") {
					t.Fatalf("item %d: %v", i, e)
				}
			case i == 600 || i == 602:
				if e := asErr(t, err, rmqs.CodeForbidden); e.Field != "exchange" {
					t.Fatalf("item %d: %v", i, e)
				}
			case i == 601:
				if e := asErr(t, err, rmqs.CodeInvalidArgument); e.Field != "colour" {
					t.Fatalf("item %d: %v", i, e)
				}
			default:
				if err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
				ok++
			}
		}
		if ok != n-143-3 {
			t.Fatal(ok)
		}
		cnt, _ := c.Count(ctx, rmqs.Filter{RoutingKey: "mixed"}, 0)
		if cnt.Count != int64(ok) {
			t.Fatal(cnt)
		}
		// 50 item errors per 400: 3 answers of 400, 2 of 403, then the 201
		// (more if the goroutines were slow enough to make two batches).
		r := svc.metric(batchRoute) - before
		t.Logf("%v requests", r)
		if r > 12 {
			t.Fatalf("%v requests", r)
		}
	})

	t.Run("back-pressure: never more than max outstanding calls pending", func(t *testing.T) {
		c := newClient(t, svc.url(), rmqs.WithMaxOutstanding(50), rmqs.WithMaxBatch(20), rmqs.WithLinger(time.Millisecond))
		var peak atomic.Int64
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if o := int64(c.Outstanding()); o > peak.Load() {
					peak.Store(o)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := 0; i < 2000; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Schedule(ctx, job("bp")); err != nil {
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		close(stop)
		if failed.Load() != 0 || peak.Load() > 50 || peak.Load() < 20 {
			t.Fatalf("%d failed, peak %d", failed.Load(), peak.Load())
		}
		// A call waiting for room gives up with its context.
		full := newClient(t, svc.url(), rmqs.WithMaxOutstanding(1), rmqs.WithLinger(300*time.Millisecond))
		go func() { _, _ = full.Schedule(ctx, job("bp")) }()
		time.Sleep(50 * time.Millisecond)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := full.Schedule(short, job("bp"))
		if e := asErr(t, err, rmqs.CodeCanceled); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(e)
		}
	})

	t.Run("byte budget: big bodies go out in several batches under the limit", func(t *testing.T) {
		c := newClient(t, svc.url(), rmqs.WithMaxBatchBytes(200000), rmqs.WithLinger(20*time.Millisecond))
		before := svc.metric(batchRoute)
		var wg sync.WaitGroup
		errs := make(chan error, 30)
		for i := 0; i < 30; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j := job("bytes")
				j.Body = strings.Repeat("y", 20000)
				_, err := c.Schedule(ctx, j)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if r := svc.metric(batchRoute) - before; r < 3 {
			t.Fatalf("%v requests", r)
		}
	})

	t.Run("413: a batch over the service's limit is split", func(t *testing.T) {
		c := newClient(t, svc.url(), rmqs.WithMaxBatchBytes(4<<20), rmqs.WithLinger(30*time.Millisecond))
		before := svc.metric(batchRoute + `,method="POST",status="413"`)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j := job("split")
				j.Body = strings.Repeat("z", 20000)
				if _, err := c.Schedule(ctx, j); err != nil {
					t.Error(err)
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		if svc.metric(batchRoute+`,method="POST",status="413"`)-before < 1 {
			t.Fatal("no 413 seen")
		}
		cnt, _ := c.Count(ctx, rmqs.Filter{RoutingKey: "split"}, 0)
		if cnt.Count != 40 {
			t.Fatal(cnt)
		}
	})

	t.Run("context cancellation: a cancelled caller returns at once, the others are not affected", func(t *testing.T) {
		c := newClient(t, svc.url(), rmqs.WithLinger(200*time.Millisecond))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.Schedule(cctx, job("cancel"))
		if !errors.Is(err, context.Canceled) || !errors.Is(err, rmqs.ErrCanceled) {
			t.Fatal(err)
		}
		cctx, cancel = context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { _, err := c.Schedule(cctx, job("cancel")); done <- err }()
		other := make(chan error, 1)
		go func() { _, err := c.Schedule(ctx, job("cancel-other")); other <- err }()
		time.Sleep(20 * time.Millisecond)
		t0 := time.Now()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) || time.Since(t0) > 50*time.Millisecond {
			t.Fatal(err, time.Since(t0))
		}
		if err := <-other; err != nil {
			t.Fatal(err)
		}
		// Cancelled while queued: never sent.
		if cnt, _ := c.Count(ctx, rmqs.Filter{RoutingKey: "cancel"}, 0); cnt.Count != 0 {
			t.Fatal(cnt)
		}
		gctx, gcancel := context.WithTimeout(ctx, time.Nanosecond)
		defer gcancel()
		time.Sleep(time.Millisecond)
		_, err = c.Get(gctx, "x")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	})

	t.Run("per-request timeout: a service that never answers", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var conns []net.Conn
		var mu sync.Mutex
		go func() {
			for {
				cn, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, cn)
				mu.Unlock()
			}
		}()
		defer func() {
			mu.Lock()
			for _, cn := range conns {
				cn.Close()
			}
			mu.Unlock()
		}()
		c := newClient(t, "http://"+l.Addr().String(), rmqs.WithTimeout(100*time.Millisecond))
		t0 := time.Now()
		_, err = c.Schedule(ctx, job("timeout"))
		if e := asErr(t, err, rmqs.CodeTimeout); !errors.Is(err, rmqs.ErrTimeout) || time.Since(t0) > 2*time.Second {
			t.Fatal(e, time.Since(t0))
		}
		_, err = c.Status(ctx)
		asErr(t, err, rmqs.CodeTimeout)
	})

	t.Run("Close sends what is buffered; Schedule after Close fails", func(t *testing.T) {
		c, err := rmqs.New(svc.url(), rmqs.WithLinger(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() { _, err := c.Schedule(ctx, job("close")); res <- err }()
		time.Sleep(20 * time.Millisecond)
		c.Close()
		if err := <-res; err != nil {
			t.Fatal(err)
		}
		_, err = c.Schedule(ctx, job("close"))
		if !errors.Is(err, rmqs.ErrClosed) {
			t.Fatal(err)
		}
	})
}
