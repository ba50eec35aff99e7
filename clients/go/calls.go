package rmqs

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ScheduleOne schedules one job with POST /schedule and an
// Idempotency-Key header (IdempotencyKey's, or a random one: a retry never
// creates a second job). It returns the whole job.
func (c *Client) ScheduleOne(ctx context.Context, job Job, opts ...CallOption) (*JobInfo, error) {
	o := collect(opts)
	h := http.Header{}
	for k, v := range o.headers {
		h[k] = v
	}
	key := o.key
	if key == "" {
		key = NewKey()
	}
	h.Set("Idempotency-Key", key)
	var j JobInfo
	if err := c.call(ctx, http.MethodPost, "/schedule", nil, job, &j, true, h); err != nil {
		return nil, err
	}
	return &j, nil
}

// Get reads one job (GET /jobs/{id}).
func (c *Client) Get(ctx context.Context, id string) (*JobInfo, error) {
	var j JobInfo
	if err := c.call(ctx, http.MethodGet, "/jobs/"+seg(id), nil, nil, &j, true, nil); err != nil {
		return nil, err
	}
	return &j, nil
}

// JobIterator walks GET /jobs page by page, following `next`:
//
//	it := c.List(ctx, rmqs.Filter{Status: "pending"})
//	for it.Next() {
//		j := it.Job()
//	}
//	if err := it.Err(); err != nil { ... }
type JobIterator struct{ cursor[JobInfo] }

// List iterates over every job the filter matches.
func (c *Client) List(ctx context.Context, f Filter) *JobIterator {
	return &JobIterator{cursor[JobInfo]{c: c, ctx: ctx, path: "/jobs", member: "jobs", query: f.values(true), i: -1}}
}

// Next advances to the next job; false at the end or on an error.
func (it *JobIterator) Next() bool { return it.next() }

// Job is the current job.
func (it *JobIterator) Job() *JobInfo { return &it.page[it.i] }

// Err is the error that ended the iteration, if any.
func (it *JobIterator) Err() error { return it.err }

// cursor follows a listing's `next` page by page (GET /jobs, GET
// /schedules): the items of the page's array member, in order.
type cursor[T any] struct {
	c      *Client
	ctx    context.Context
	path   string
	member string
	query  url.Values
	page   []T
	i      int
	after  string
	last   bool
	err    error
}

func (it *cursor[T]) next() bool {
	if it.err != nil {
		return false
	}
	for it.i+1 >= len(it.page) {
		if it.last {
			return false
		}
		q := url.Values{}
		for k, v := range it.query {
			q[k] = v
		}
		if it.after != "" {
			q.Set("after", it.after)
		}
		var p map[string]json.RawMessage
		if err := it.c.call(it.ctx, http.MethodGet, it.path, q, nil, &p, true, nil); err != nil {
			it.err = err
			return false
		}
		var page []T
		var next *string
		if err := json.Unmarshal(p[it.member], &page); err != nil {
			it.err = &Error{Code: CodeUnknown, Message: "decoding the answer: " + it.member + ": " + err.Error(), Err: err}
			return false
		}
		if raw, ok := p["next"]; ok {
			_ = json.Unmarshal(raw, &next)
		}
		it.page, it.i = page, -1
		if next == nil || *next == "" {
			it.last = true
		} else {
			it.after = *next
		}
	}
	it.i++
	return true
}

// Count counts the jobs the filter matches (GET /jobs/count); max > 0
// stops counting there (the answer is then Capped).
func (c *Client) Count(ctx context.Context, f Filter, max int) (*JobCount, error) {
	q := f.values(false)
	if max > 0 {
		q.Set("max", strconv.Itoa(max))
	}
	var n JobCount
	if err := c.call(ctx, http.MethodGet, "/jobs/count", q, nil, &n, true, nil); err != nil {
		return nil, err
	}
	return &n, nil
}

func (c *Client) jobCall(ctx context.Context, method, path string, body any, safe bool) (*JobInfo, error) {
	var j JobInfo
	if err := c.call(ctx, method, path, nil, body, &j, safe, nil); err != nil {
		return nil, err
	}
	return &j, nil
}

// Reschedule moves a pending job (PATCH /jobs/{id}).
func (c *Client) Reschedule(ctx context.Context, id string, when When) (*JobInfo, error) {
	return c.jobCall(ctx, http.MethodPatch, "/jobs/"+seg(id), when.body(), true)
}

// Cancel cancels a pending job (DELETE /jobs/{id}); cancelling a cancelled
// job again answers it as it is.
func (c *Client) Cancel(ctx context.Context, id string) (*JobInfo, error) {
	return c.jobCall(ctx, http.MethodDelete, "/jobs/"+seg(id), nil, true)
}

// RunNow makes a pending job due now (POST /jobs/{id}/run).
func (c *Client) RunNow(ctx context.Context, id string) (*JobInfo, error) {
	return c.jobCall(ctx, http.MethodPost, "/jobs/"+seg(id)+"/run", nil, false)
}

// Retry makes a failed job pending again (POST /jobs/{id}/retry), due now
// or when says (nil: now).
func (c *Client) Retry(ctx context.Context, id string, when *When) (*JobInfo, error) {
	return c.jobCall(ctx, http.MethodPost, "/jobs/"+seg(id)+"/retry", when.body(), false)
}

// Bulk starts a bulk cancel or retry (POST /jobs/bulk).
func (c *Client) Bulk(ctx context.Context, b BulkRequest) (*BulkOperation, error) {
	f := map[string]string{}
	for k, v := range b.Filter.values(false) {
		f[k] = v[0]
	}
	body := map[string]any{"action": b.Action, "filter": f}
	if b.All {
		body["all"] = true
	}
	var op BulkOperation
	if err := c.call(ctx, http.MethodPost, "/jobs/bulk", nil, body, &op, false, nil); err != nil {
		return nil, err
	}
	return &op, nil
}

// BulkStatus reads a bulk operation's progress (GET /jobs/bulk/{id}).
func (c *Client) BulkStatus(ctx context.Context, id string) (*BulkOperation, error) {
	var op BulkOperation
	if err := c.call(ctx, http.MethodGet, "/jobs/bulk/"+seg(id), nil, nil, &op, true, nil); err != nil {
		return nil, err
	}
	return &op, nil
}

// WaitBulk polls a bulk operation every interval (0: 200 ms) until it is
// no longer running, calling progress (if not nil) with each reading.
func (c *Client) WaitBulk(ctx context.Context, id string, interval time.Duration, progress func(*BulkOperation)) (*BulkOperation, error) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	for {
		op, err := c.BulkStatus(ctx, id)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(op)
		}
		if op.State != "running" {
			return op, nil
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, canceled(ctx)
		}
	}
}

// ------------------------------------------------------------ schedules

func (c *Client) scheduleCall(ctx context.Context, method, path string, q url.Values, body any, safe bool) (*Schedule, error) {
	var s Schedule
	if err := c.call(ctx, method, path, q, body, &s, safe, nil); err != nil {
		return nil, err
	}
	return &s, nil
}

// PutSchedule creates or replaces a schedule (PUT /schedules/{name}); the
// same spec again changes nothing (same generation).
func (c *Client) PutSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPut, "/schedules/"+seg(name), nil, spec, true)
}

// GetSchedule reads a schedule with its next count runs (0: the default).
func (c *Client) GetSchedule(ctx context.Context, name string, count int) (*Schedule, error) {
	var q url.Values
	if count > 0 {
		q = url.Values{"count": {strconv.Itoa(count)}}
	}
	return c.scheduleCall(ctx, http.MethodGet, "/schedules/"+seg(name), q, nil, true)
}

// PatchSchedule changes the members given (PATCH /schedules/{name}), e.g.
// map[string]any{"paused": true}.
func (c *Client) PatchSchedule(ctx context.Context, name string, patch map[string]any) (*Schedule, error) {
	return c.scheduleCall(ctx, http.MethodPatch, "/schedules/"+seg(name), nil, patch, true)
}

// DeleteSchedule deletes a schedule (its jobs stay).
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/schedules/"+seg(name), nil, nil, nil, true, nil)
}

// RunSchedule schedules one run of a schedule now (POST
// /schedules/{name}/run) with an Idempotency-Key (IdempotencyKey's or a
// random one).
func (c *Client) RunSchedule(ctx context.Context, name string, opts ...CallOption) (*JobInfo, error) {
	o := collect(opts)
	key := o.key
	if key == "" {
		key = NewKey()
	}
	var j JobInfo
	h := http.Header{"Idempotency-Key": {key}}
	if err := c.call(ctx, http.MethodPost, "/schedules/"+seg(name)+"/run", nil, nil, &j, true, h); err != nil {
		return nil, err
	}
	return &j, nil
}

// ScheduleIterator walks GET /schedules page by page.
type ScheduleIterator struct{ cursor[Schedule] }

// ListSchedules iterates over every schedule, by name (pageSize 0: the
// service's default).
func (c *Client) ListSchedules(ctx context.Context, pageSize int) *ScheduleIterator {
	q := url.Values{}
	if pageSize > 0 {
		q.Set("limit", strconv.Itoa(pageSize))
	}
	return &ScheduleIterator{cursor[Schedule]{c: c, ctx: ctx, path: "/schedules", member: "schedules", query: q, i: -1}}
}

// Next advances to the next schedule; false at the end or on an error.
func (it *ScheduleIterator) Next() bool { return it.next() }

// Schedule is the current schedule.
func (it *ScheduleIterator) Schedule() *Schedule { return &it.page[it.i] }

// Err is the error that ended the iteration, if any.
func (it *ScheduleIterator) Err() error { return it.err }

// ------------------------------------------------------------ limits

func (c *Client) limitCall(ctx context.Context, method, name string, body any, safe bool) (*Limit, error) {
	var l Limit
	if err := c.call(ctx, method, "/limits/"+seg(name), nil, body, &l, safe, nil); err != nil {
		return nil, err
	}
	return &l, nil
}

// PutLimit creates or replaces a limit (PUT /limits/{name}).
func (c *Client) PutLimit(ctx context.Context, name string, spec LimitSpec) (*Limit, error) {
	return c.limitCall(ctx, http.MethodPut, name, spec, true)
}

// GetLimit reads a limit.
func (c *Client) GetLimit(ctx context.Context, name string) (*Limit, error) {
	return c.limitCall(ctx, http.MethodGet, name, nil, true)
}

// ListLimits reads every limit.
func (c *Client) ListLimits(ctx context.Context) ([]Limit, error) {
	var r struct {
		Limits []Limit `json:"limits"`
	}
	if err := c.call(ctx, http.MethodGet, "/limits", nil, nil, &r, true, nil); err != nil {
		return nil, err
	}
	return r.Limits, nil
}

// PatchLimit changes the members given (PATCH /limits/{name}), e.g.
// map[string]any{"rate_per_s": 200}.
func (c *Client) PatchLimit(ctx context.Context, name string, patch map[string]any) (*Limit, error) {
	return c.limitCall(ctx, http.MethodPatch, name, patch, true)
}

// DeleteLimit deletes a limit.
func (c *Client) DeleteLimit(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/limits/"+seg(name), nil, nil, nil, true, nil)
}

// ------------------------------------------------------------ monitoring

func (c *Client) doc(ctx context.Context, path string, q url.Values) (Document, error) {
	var d Document
	if err := c.call(ctx, http.MethodGet, path, q, nil, &d, true, nil); err != nil {
		return nil, err
	}
	return d, nil
}

// Stats reads GET /stats over a window (e.g. "15m"; "": the default).
func (c *Client) Stats(ctx context.Context, window string) (Document, error) {
	var q url.Values
	if window != "" {
		q = url.Values{"window": {window}}
	}
	return c.doc(ctx, "/stats", q)
}

// Status reads GET /status (broker, database, ...).
func (c *Client) Status(ctx context.Context) (Document, error) { return c.doc(ctx, "/status", nil) }

// Failures reads GET /stats/failures.
func (c *Client) Failures(ctx context.Context) (Document, error) {
	return c.doc(ctx, "/stats/failures", nil)
}
