package rmqs_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	rmqs "github.com/rmq-scheduler/rmq-scheduler/clients/go"
)

func job(rk string) rmqs.Job {
	return rmqs.Job{Exchange: "orders", RoutingKey: rk, Body: map[string]any{"n": 1}, Delay: time.Hour}
}

func newClient(t testing.TB, url string, opts ...rmqs.Option) *rmqs.Client {
	t.Helper()
	c, err := rmqs.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func asErr(t testing.TB, err error, code string) *rmqs.Error {
	t.Helper()
	var e *rmqs.Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *rmqs.Error %s, got %v", code, err)
	}
	if e.Code != code {
		t.Fatalf("want code %s, got %v", code, e)
	}
	return e
}

func TestCalls(t *testing.T) {
	svc := startService(t, "", "--allow-exchanges", "orders,billing", "--max-body-bytes", "65536")
	c := newClient(t, svc.url())
	ctx := context.Background()

	t.Run("Schedule and Get", func(t *testing.T) {
		j := job("sched")
		j.Headers = map[string]any{"tenant": "acme"}
		m, err := c.Schedule(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != "pending" || m.ID == "" || m.DeliverAt.Before(time.Now().Add(59*time.Minute)) {
			t.Fatalf("%+v", m)
		}
		g, err := c.Get(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if g.ID != m.ID || g.Exchange != "orders" || g.Headers["tenant"] != "acme" || string(g.Body) != `{"n":1}` {
			t.Fatalf("%+v", g)
		}
		// A string body, a base64 body, a slice body.
		for _, b := range []rmqs.Job{
			{Exchange: "orders", RoutingKey: "b", Body: "text"},
			{Exchange: "orders", RoutingKey: "b", BodyBase64: "AAEC"},
			{Exchange: "orders", RoutingKey: "b", Body: []int{1, 2}, DeliverAt: time.Now().Add(time.Hour)},
		} {
			m, err := c.Schedule(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			g, _ := c.Get(ctx, m.ID)
			if b.BodyBase64 != "" && g.BodyBase64 != "AAEC" {
				t.Fatalf("%+v", g)
			}
			if s, ok := b.Body.(string); ok && string(g.Body) != `"`+s+`"` {
				t.Fatalf("%s", g.Body)
			}
		}
	})

	t.Run("ScheduleOne with Idempotency-Key", func(t *testing.T) {
		key := fmt.Sprintf("go-client-%d", time.Now().UnixNano())
		a, err := c.ScheduleOne(ctx, job("one"), rmqs.IdempotencyKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if a.Source != "http" {
			t.Fatalf("%+v", a)
		}
		b, err := c.ScheduleOne(ctx, job("one"), rmqs.IdempotencyKey(key))
		if err != nil || b.ID != a.ID {
			t.Fatalf("%v %v", b, err)
		}
		other := job("one")
		other.Body = "other"
		_, err = c.ScheduleOne(ctx, other, rmqs.IdempotencyKey(key))
		e := asErr(t, err, rmqs.CodeConflict)
		if e.Status != 409 || e.Field != "Idempotency-Key" || !errors.Is(err, rmqs.ErrConflict) {
			t.Fatalf("%#v", e)
		}
	})

	t.Run("item keys: a repeated key is the same job, another request a conflict for that caller only", func(t *testing.T) {
		key := fmt.Sprintf("go-item-%d", time.Now().UnixNano())
		a, err := c.Schedule(ctx, job("ik"), rmqs.IdempotencyKey(key))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Schedule(ctx, job("ik"), rmqs.IdempotencyKey(key))
		if err != nil || b.ID != a.ID {
			t.Fatalf("%v %v", b, err)
		}
		other := job("ik")
		other.Body = "other"
		errs := make(chan error, 2)
		go func() { _, err := c.Schedule(ctx, other, rmqs.IdempotencyKey(key)); errs <- err }()
		go func() { _, err := c.Schedule(ctx, job("ik")); errs <- err }()
		var conflicts, oks int
		for i := 0; i < 2; i++ {
			err := <-errs
			switch {
			case err == nil:
				oks++
			case errors.Is(err, rmqs.ErrConflict):
				if f := asErr(t, err, rmqs.CodeConflict).Field; f != "idempotency_key" {
					t.Fatalf("field %q", f)
				}
				conflicts++
			default:
				t.Fatal(err)
			}
		}
		if conflicts != 1 || oks != 1 {
			t.Fatalf("%d conflicts, %d ok", conflicts, oks)
		}
		n, err := c.Count(ctx, rmqs.Filter{RoutingKey: "ik"}, 0)
		if err != nil || n.Count != 2 {
			t.Fatalf("%v %v", n, err)
		}
		m1, err := c.ScheduleMany(ctx, []rmqs.Job{job("ik2")}, rmqs.IdempotencyKeys([]string{key + "-m"}))
		if err != nil {
			t.Fatal(err)
		}
		m2, err := c.ScheduleMany(ctx, []rmqs.Job{job("ik2")}, rmqs.IdempotencyKeys([]string{key + "-m"}))
		if err != nil || m2[0].ID != m1[0].ID {
			t.Fatalf("%v %v", m2, err)
		}
	})

	t.Run("ScheduleMany chunks and keeps the order; a refused chunk names indexes of the whole slice", func(t *testing.T) {
		small := newClient(t, svc.url(), rmqs.WithMaxBatch(7))
		jobs := make([]rmqs.Job, 30)
		for i := range jobs {
			jobs[i] = job("many")
			jobs[i].Body = map[string]any{"i": i}
		}
		out, err := small.ScheduleMany(ctx, jobs)
		if err != nil || len(out) != 30 {
			t.Fatalf("%d %v", len(out), err)
		}
		first, _ := small.Get(ctx, out[0].ID)
		last, _ := small.Get(ctx, out[29].ID)
		if string(first.Body) != `{"i":0}` || string(last.Body) != `{"i":29}` {
			t.Fatalf("%s %s", first.Body, last.Body)
		}
		jobs[17].Delay = -time.Millisecond
		out, err = small.ScheduleMany(ctx, jobs)
		e := asErr(t, err, rmqs.CodeInvalidArgument)
		if len(e.Errors) != 1 || e.Errors[0].Index != 17 || len(out) != 14 {
			t.Fatalf("%+v, %d scheduled", e.Errors, len(out))
		}
		jobs[17] = job("many")
		jobs[17].Exchange = "payments"
		_, err = small.ScheduleMany(ctx, jobs)
		if e := asErr(t, err, rmqs.CodeForbidden); e.Field != "jobs[17].exchange" {
			t.Fatalf("%v", e)
		}
	})

	t.Run("List follows next; Count", func(t *testing.T) {
		tag := fmt.Sprintf("lst%d", time.Now().UnixNano())
		jobs := make([]rmqs.Job, 25)
		for i := range jobs {
			jobs[i] = job(tag)
			jobs[i].Delay = time.Duration(1000000+i) * time.Millisecond
		}
		if _, err := c.ScheduleMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		it := c.List(ctx, rmqs.Filter{RoutingKey: tag, Status: "pending", Order: "-due", PageSize: 10})
		var seen []*rmqs.JobInfo
		for it.Next() {
			seen = append(seen, it.Job())
		}
		if err := it.Err(); err != nil || len(seen) != 25 {
			t.Fatalf("%d %v", len(seen), err)
		}
		if seen[0].DeliverAt.Before(seen[24].DeliverAt) {
			t.Fatal("order")
		}
		n, err := c.Count(ctx, rmqs.Filter{RoutingKey: tag}, 0)
		if err != nil || n.Count != 25 || n.Capped {
			t.Fatalf("%+v %v", n, err)
		}
		n, err = c.Count(ctx, rmqs.Filter{RoutingKey: tag}, 5)
		if err != nil || !n.Capped {
			t.Fatalf("%+v %v", n, err)
		}
		_, err = c.Count(ctx, rmqs.Filter{Q: "ab"}, 0)
		if e := asErr(t, err, rmqs.CodeInvalidArgument); e.Field != "q" {
			t.Fatal(e)
		}
		bad := c.List(ctx, rmqs.Filter{Order: "sideways"})
		if bad.Next() || !errors.Is(bad.Err(), rmqs.ErrInvalidArgument) {
			t.Fatal(bad.Err())
		}
	})

	t.Run("Reschedule, RunNow, Cancel, Retry", func(t *testing.T) {
		m, err := c.Schedule(ctx, job("life"))
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
		r, err := c.Reschedule(ctx, m.ID, rmqs.When{DeliverAt: at})
		if err != nil || !r.DeliverAt.Equal(at) {
			t.Fatalf("%v %v", r, err)
		}
		r, err = c.Reschedule(ctx, m.ID, rmqs.When{Delay: 5000 * time.Second})
		if err != nil || r.DeliverAt.Before(time.Now().Add(4000*time.Second)) {
			t.Fatalf("%v %v", r, err)
		}
		run, err := c.RunNow(ctx, m.ID)
		if err != nil || run.DeliverAt.After(time.Now().Add(time.Second)) {
			t.Fatalf("%v %v", run, err)
		}
		m2, _ := c.Schedule(ctx, job("life"))
		_, err = c.Retry(ctx, m2.ID, nil)
		if e := asErr(t, err, rmqs.CodeConflict); !strings.Contains(e.Message, "pending") {
			t.Fatal(e)
		}
		_, err = c.Retry(ctx, m2.ID, &rmqs.When{Delay: time.Second})
		asErr(t, err, rmqs.CodeConflict)
		x, err := c.Cancel(ctx, m2.ID)
		if err != nil || x.Status != "cancelled" {
			t.Fatalf("%v %v", x, err)
		}
		if x, err = c.Cancel(ctx, m2.ID); err != nil || x.Status != "cancelled" {
			t.Fatalf("%v %v", x, err)
		}
		_, err = c.Reschedule(ctx, m2.ID, rmqs.When{Delay: time.Millisecond})
		asErr(t, err, rmqs.CodeConflict)
		_, err = c.Get(ctx, "01936f3a-5b1c-7d2e-9f00-1a2b3c4d5e6f")
		if e := asErr(t, err, rmqs.CodeNotFound); e.Status != 404 || !errors.Is(err, rmqs.ErrNotFound) || errors.Is(err, rmqs.ErrConflict) {
			t.Fatal(e)
		}
	})

	t.Run("Bulk, BulkStatus, WaitBulk", func(t *testing.T) {
		tag := fmt.Sprintf("blk%d", time.Now().UnixNano())
		jobs := make([]rmqs.Job, 40)
		for i := range jobs {
			jobs[i] = job(tag)
		}
		if _, err := c.ScheduleMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		_, err := c.Bulk(ctx, rmqs.BulkRequest{Action: "cancel"})
		asErr(t, err, rmqs.CodeInvalidArgument)
		op, err := c.Bulk(ctx, rmqs.BulkRequest{Action: "cancel", Filter: rmqs.Filter{RoutingKey: tag, Status: "pending"}})
		if err != nil || op.ID == "" {
			t.Fatalf("%v %v", op, err)
		}
		if s, err := c.BulkStatus(ctx, op.ID); err != nil || s.ID != op.ID {
			t.Fatalf("%v %v", s, err)
		}
		var seen []string
		done, err := c.WaitBulk(ctx, op.ID, 20*time.Millisecond, func(o *rmqs.BulkOperation) { seen = append(seen, o.State) })
		if err != nil || done.State != "done" || done.Done != 40 || len(seen) < 1 {
			t.Fatalf("%+v %v %v", done, err, seen)
		}
		n, _ := c.Count(ctx, rmqs.Filter{RoutingKey: tag, Status: "cancelled"}, 0)
		if n.Count != 40 {
			t.Fatal(n)
		}
		_, err = c.BulkStatus(ctx, "01936f3c-1111-7a00-8b00-000000000009")
		asErr(t, err, rmqs.CodeNotFound)
	})

	t.Run("schedules", func(t *testing.T) {
		spec := rmqs.ScheduleSpec{Cron: "0 3 * * *", Timezone: "UTC",
			Job: rmqs.Job{Exchange: "orders", RoutingKey: "digest", Body: "d"}}
		s, err := c.PutSchedule(ctx, "go-digest", spec)
		if err != nil || s.Name != "go-digest" {
			t.Fatalf("%v %v", s, err)
		}
		again, err := c.PutSchedule(ctx, "go-digest", spec)
		if err != nil || again.Generation != s.Generation {
			t.Fatalf("%v %v", again, err)
		}
		if _, err := c.PutSchedule(ctx, "go-digest-2", rmqs.ScheduleSpec{Every: time.Hour, Job: spec.Job}); err != nil {
			t.Fatal(err)
		}
		g, err := c.GetSchedule(ctx, "go-digest", 3)
		if err != nil || len(g.NextRuns) != 3 {
			t.Fatalf("%v %v", g, err)
		}
		var names []string
		it := c.ListSchedules(ctx, 1)
		for it.Next() {
			names = append(names, it.Schedule().Name)
		}
		if it.Err() != nil || strings.Join(names, ",") != "go-digest,go-digest-2" {
			t.Fatalf("%v %v", names, it.Err())
		}
		p, err := c.PatchSchedule(ctx, "go-digest", map[string]any{"paused": true})
		if err != nil || !p.Paused {
			t.Fatalf("%v %v", p, err)
		}
		run, err := c.RunSchedule(ctx, "go-digest", rmqs.IdempotencyKey("go-run-1"))
		if err != nil || run.Source != "schedule" {
			t.Fatalf("%v %v", run, err)
		}
		if r2, err := c.RunSchedule(ctx, "go-digest", rmqs.IdempotencyKey("go-run-1")); err != nil || r2.ID != run.ID {
			t.Fatalf("%v %v", r2, err)
		}
		_, err = c.PutSchedule(ctx, "go-bad", rmqs.ScheduleSpec{Cron: "0 0 32 * *", Job: spec.Job})
		if e := asErr(t, err, rmqs.CodeInvalidArgument); e.Field != "cron" {
			t.Fatal(e)
		}
		_, err = c.PutSchedule(ctx, "bad name", spec)
		if e := asErr(t, err, rmqs.CodeInvalidArgument); e.Field != "name" {
			t.Fatal(e)
		}
		if err := c.DeleteSchedule(ctx, "go-digest"); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteSchedule(ctx, "go-digest-2"); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetSchedule(ctx, "go-digest", 0)
		asErr(t, err, rmqs.CodeNotFound)
	})

	t.Run("limits", func(t *testing.T) {
		l, err := c.PutLimit(ctx, "go-limit", rmqs.LimitSpec{Match: &rmqs.LimitMatch{Exchange: "orders"}, RatePerS: 500, Burst: 50})
		if err != nil || l.Generation != 1 {
			t.Fatalf("%v %v", l, err)
		}
		if g, err := c.GetLimit(ctx, "go-limit"); err != nil || g.RatePerS == nil || *g.RatePerS != 500 {
			t.Fatalf("%v %v", g, err)
		}
		ls, err := c.ListLimits(ctx)
		if err != nil || len(ls) != 1 || ls[0].Name != "go-limit" {
			t.Fatalf("%v %v", ls, err)
		}
		p, err := c.PatchLimit(ctx, "go-limit", map[string]any{"rate_per_s": 200})
		if err != nil || *p.RatePerS != 200 {
			t.Fatalf("%v %v", p, err)
		}
		_, err = c.PatchLimit(ctx, "go-limit", map[string]any{"rate_per_s": 0})
		if e := asErr(t, err, rmqs.CodeInvalidArgument); e.Field != "rate_per_s" {
			t.Fatal(e)
		}
		if err := c.DeleteLimit(ctx, "go-limit"); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetLimit(ctx, "go-limit")
		asErr(t, err, rmqs.CodeNotFound)
		asErr(t, c.DeleteLimit(ctx, "go-limit"), rmqs.CodeNotFound)
	})

	// With a real RabbitMQ (tests/run.sh): a due job goes to the broker,
	// and Get follows it there. The exchange does not exist on the node, so
	// the broker closes the channel and the one attempt ends the job as
	// failed, with the broker's reason.
	t.Run("a due job is published and Get shows what the broker said", func(t *testing.T) {
		if os.Getenv("RMQS_TEST_AMQP_URL") == "" {
			t.Skip("no RabbitMQ (RMQS_TEST_AMQP_URL)")
		}
		m, err := c.Schedule(ctx, rmqs.Job{Exchange: "orders", RoutingKey: "go.due", Body: map[string]any{}, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		var g *rmqs.JobInfo
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if g, err = c.Get(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
			if g.Status == "failed" || time.Now().After(end) {
				break
			}
		}
		if g.Status != "failed" || g.Attempts != 1 || g.LastError == nil || !strings.Contains(*g.LastError, "orders") {
			t.Fatalf("%+v", g)
		}
	})

	t.Run("Stats, Status, Failures", func(t *testing.T) {
		st, err := c.Stats(ctx, "15m")
		if _, ok := st["samples"].([]any); err != nil || !ok {
			t.Fatalf("%v %v", st, err)
		}
		_, err = c.Stats(ctx, "forever")
		asErr(t, err, rmqs.CodeInvalidArgument)
		s, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		broker := "down"
		if os.Getenv("RMQS_TEST_AMQP_URL") != "" {
			broker = "up"
		}
		if s["broker"].(map[string]any)["state"] != broker || s["database"].(map[string]any)["state"] != "up" {
			t.Fatal(s)
		}
		f, err := c.Failures(ctx)
		if _, ok := f["groups"].([]any); err != nil || !ok {
			t.Fatalf("%v %v", f, err)
		}
	})

	t.Run("typed errors the service answers", func(t *testing.T) {
		j := job("err")
		j.Exchange = "payments"
		_, err := c.ScheduleOne(ctx, j)
		if e := asErr(t, err, rmqs.CodeForbidden); e.Field != "exchange" || !errors.Is(err, rmqs.ErrForbidden) {
			t.Fatal(e)
		}
		err = c.Do(ctx, http.MethodPut, "/jobs", map[string]any{}, nil)
		if e := asErr(t, err, rmqs.CodeMethodNotAllowed); e.Status != 405 {
			t.Fatal(e)
		}
		big := job("err")
		big.Body = strings.Repeat("x", 70000)
		_, err = c.ScheduleOne(ctx, big)
		if e := asErr(t, err, rmqs.CodePayloadTooLarge); e.Status != 413 {
			t.Fatal(e)
		}
		err = c.Do(ctx, http.MethodPost, "/schedule", []byte("exchange=orders"), nil, rmqs.Header("Content-Type", "text/plain"))
		asErr(t, err, rmqs.CodeUnsupportedMediaType)

		browser := newClient(t, svc.url(), rmqs.WithHeader("Origin", "https://evil.example"))
		_, err = browser.Cancel(ctx, "01936f3a-5b1c-7d2e-9f00-1a2b3c4d5e6f")
		if e := asErr(t, err, rmqs.CodeCrossOrigin); e.Status != 403 || errors.Is(err, rmqs.ErrForbidden) {
			t.Fatal(e)
		}
		same := newClient(t, svc.url(), rmqs.WithHeader("Origin", svc.url()))
		_, err = same.Schedule(ctx, job("err"))
		asErr(t, err, rmqs.CodeUIReadOnly)
		rebind := newClient(t, svc.url(), rmqs.WithHeader("Host", "rebind.example"))
		_, err = rebind.Get(ctx, "x")
		asErr(t, err, rmqs.CodeHostNotAllowed)
	})
}

func TestErrorCodes(t *testing.T) {
	want := []string{"invalid_argument", "unauthorized", "forbidden", "ui_read_only", "cross_origin",
		"host_not_allowed", "not_found", "method_not_allowed", "conflict", "payload_too_large",
		"unsupported_media_type", "unavailable", "storage_full", "search_timeout", "internal"}
	got := append([]string(nil), rmqs.APICodes...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%v", got)
	}
	sentinels := []*rmqs.Error{rmqs.ErrInvalidArgument, rmqs.ErrUnauthorized, rmqs.ErrForbidden, rmqs.ErrUIReadOnly,
		rmqs.ErrCrossOrigin, rmqs.ErrHostNotAllowed, rmqs.ErrNotFound, rmqs.ErrMethodNotAllowed, rmqs.ErrConflict,
		rmqs.ErrPayloadTooLarge, rmqs.ErrUnsupportedMediaType, rmqs.ErrUnavailable, rmqs.ErrStorageFull,
		rmqs.ErrSearchTimeout, rmqs.ErrInternal}
	for i, code := range rmqs.APICodes {
		e := fmt.Errorf("wrapped: %w", &rmqs.Error{Status: 400, Code: code, Message: "m"})
		if !errors.Is(e, sentinels[i]) || sentinels[i].Code != code {
			t.Fatalf("%s: %v", code, sentinels[i])
		}
		if errors.Is(e, sentinels[(i+1)%len(sentinels)]) {
			t.Fatalf("%s matched another code", code)
		}
	}
}

func TestUnauthorized(t *testing.T) {
	const token = "go-client-token-0123456789"
	svc := startService(t, token)
	ctx := context.Background()
	none := newClient(t, svc.url())
	_, err := none.Status(ctx)
	if e := asErr(t, err, rmqs.CodeUnauthorized); e.Status != 401 || !errors.Is(err, rmqs.ErrUnauthorized) {
		t.Fatal(e)
	}
	_, err = none.Schedule(ctx, job("auth"))
	asErr(t, err, rmqs.CodeUnauthorized)
	ok := newClient(t, svc.url(), rmqs.WithToken(token))
	m, err := ok.Schedule(ctx, job("auth"))
	if err != nil {
		t.Fatal(err)
	}
	if g, err := ok.Get(ctx, m.ID); err != nil || g.ID != m.ID {
		t.Fatalf("%v %v", g, err)
	}
}

func TestStorageFull(t *testing.T) {
	if os.Getenv("RMQS_TEST_STORE") == "postgres" {
		t.Skip("SQLite only: --min-free-bytes watches the disk of a SQLite file, not the PostgreSQL server's")
	}
	svc := startService(t, "", "--min-free-bytes", "4611686018427387904")
	c := newClient(t, svc.url(), rmqs.WithRetry(rmqs.RetryPolicy{Attempts: 2, Base: time.Millisecond, Cap: 5 * time.Millisecond}))
	_, err := c.Schedule(context.Background(), job("full"))
	if e := asErr(t, err, rmqs.CodeStorageFull); e.Status != 503 || !errors.Is(err, rmqs.ErrStorageFull) {
		t.Fatal(e)
	}
	if n := svc.metric(`rmqs_http_requests_total{route="/schedule/batch",method="POST",status="503"}`); n != 2 {
		t.Fatalf("%v requests: want 2 (one retry)", n)
	}
}
