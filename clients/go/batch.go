package rmqs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"
)

type result struct {
	ref *JobRef
	err error
}

// item is one Schedule call on its way.
type item struct {
	ctx  context.Context
	json []byte
	res  chan result // buffered 1
	once sync.Once
	c    *Client
}

// settle gives the caller its result (once) and frees its room.
func (it *item) settle(r result) {
	it.once.Do(func() {
		it.res <- r
		<-it.c.sem
	})
}

var minimalHeader = http.Header{"Prefer": {"return=minimal"}}

// Schedule schedules one job through the batcher: calls made within the
// linger of each other go out as one POST /schedule/batch (with
// `Prefer: return=minimal`), each item with its idempotency key (the
// IdempotencyKey option's, or a random one), so that the batch is retried
// safely. It returns the job's JobRef, or this item's own error.
//
// At the client's max outstanding calls it blocks until there is room or
// ctx ends. If ctx ends once the item was sent, the job may still be
// stored (retry with the same IdempotencyKey to learn it).
func (c *Client) Schedule(ctx context.Context, job Job, opts ...CallOption) (*JobRef, error) {
	o := collect(opts)
	select {
	case <-c.closing:
		return nil, &Error{Code: CodeClosed, Message: "the client is closed"}
	default:
	}
	if ctx.Err() != nil {
		return nil, canceled(ctx)
	}
	key := o.key
	if key == "" {
		key = NewKey()
	}
	f := job.fields(true)
	f["idempotency_key"] = key
	data, err := json.Marshal(f)
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: "encoding the job: " + err.Error(), Err: err}
	}
	// Room (back-pressure).
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, canceled(ctx)
	case <-c.closing:
		return nil, &Error{Code: CodeClosed, Message: "the client is closed"}
	}
	it := &item{ctx: ctx, json: data, res: make(chan result, 1), c: c}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		<-c.sem
		return nil, &Error{Code: CodeClosed, Message: "the client is closed"}
	}
	select {
	case c.queue <- it:
		c.mu.RUnlock()
	case <-ctx.Done():
		c.mu.RUnlock()
		<-c.sem
		return nil, canceled(ctx)
	}
	select {
	case r := <-it.res:
		return r.ref, r.err
	case <-ctx.Done():
		// Sent or about to be: the sender settles it (and frees its room).
		return nil, canceled(ctx)
	}
}

// sender gathers queued items into batches and starts each batch. With
// the default linger (0): while fewer than eagerBatches are in flight, it
// starts one at once with what is queued (a lone caller waits for nobody,
// and a few concurrent callers are as quick as a request each: the
// service commits concurrent requests together); with eagerBatches in
// flight, it gathers until one of them ends or the batch is full. With a
// linger set, a batch waits that long for more calls. At most maxInflight
// batches are in flight: while none can start, the sender keeps
// gathering, so batches grow with the load.
func (c *Client) sender() {
	defer c.senders.Done()
	var held *item // an item that did not fit the last batch
	for {
		var first *item
		if held != nil {
			first, held = held, nil
		} else {
			select {
			case first = <-c.queue:
			case <-c.closing:
				c.drain()
				return
			}
		}
		buf := []*item{first}
		size := 2 + len(first.json)
		lingered, closing := false, false
		var timer *time.Timer
		var lingerC <-chan time.Time // nil: no timer (default linger 0)
		if c.cfg.linger > 0 {
			timer = time.NewTimer(c.cfg.linger)
			lingerC = timer.C
		} else if c.inflight.Load() < eagerBatches {
			buf, size, held = c.gatherQueued(buf, size)
			lingered = true
		}
	gather:
		for {
			full := held != nil || len(buf) >= c.cfg.maxBatch || size >= c.cfg.maxBatchBytes
			if full || lingered || closing {
				// Ready: start it as soon as a slot is free, gathering
				// more meanwhile (if it is not full).
				queue := c.queue
				if full {
					queue = nil
				}
				select {
				case c.slots <- struct{}{}:
					break gather
				case it := <-queue:
					if size+len(it.json)+1 > c.cfg.maxBatchBytes {
						held = it
						continue
					}
					buf = append(buf, it)
					size += len(it.json) + 1
				}
				continue
			}
			select {
			case it := <-c.queue:
				if size+len(it.json)+1 > c.cfg.maxBatchBytes {
					held = it
					continue
				}
				buf = append(buf, it)
				size += len(it.json) + 1
			case <-lingerC:
				lingered = true
			case <-c.ended:
				if c.cfg.linger == 0 && c.inflight.Load() < eagerBatches {
					lingered = true
				}
			case <-c.closing:
				closing = true
			}
		}
		if timer != nil {
			timer.Stop()
		}
		c.start(buf)
	}
}

// gatherQueued adds what is queued now, without waiting, up to a full
// batch; an item that would pass the byte budget is returned as held.
func (c *Client) gatherQueued(buf []*item, size int) ([]*item, int, *item) {
	for len(buf) < c.cfg.maxBatch {
		select {
		case it := <-c.queue:
			if size+len(it.json)+1 > c.cfg.maxBatchBytes {
				return buf, size, it
			}
			buf = append(buf, it)
			size += len(it.json) + 1
		default:
			return buf, size, nil
		}
	}
	return buf, size, nil
}

// drain sends what is still queued when the client closes (nothing can
// be queued any more: Close set closed first).
func (c *Client) drain() {
	var buf []*item
	size := 2
	for {
		select {
		case it := <-c.queue:
			if len(buf) > 0 && (len(buf) >= c.cfg.maxBatch || size+len(it.json)+1 > c.cfg.maxBatchBytes) {
				c.slots <- struct{}{}
				c.start(buf)
				buf, size = nil, 2
			}
			buf = append(buf, it)
			size += len(it.json) + 1
		default:
			if len(buf) > 0 {
				c.slots <- struct{}{}
				c.start(buf)
			}
			return
		}
	}
}

func (c *Client) start(items []*item) {
	c.batches.Add(1)
	c.inflight.Add(1)
	go func() {
		defer c.batches.Done()
		defer func() {
			<-c.slots
			c.inflight.Add(-1)
			select {
			case c.ended <- struct{}{}:
			default:
			}
		}()
		c.sendBatch(items)
	}()
}

var jobsField = regexp.MustCompile(`^jobs\[(\d+)\](?:\.(.+))?$`)

// sendBatch sends items (all-or-nothing on the server) until each caller
// has its job or its own error: the items a 400 lists, or a 403/409 names,
// get their error and the rest is sent again; a 413 is split in halves.
func (c *Client) sendBatch(items []*item) {
	live := make([]*item, 0, len(items))
	for _, it := range items {
		if it.ctx.Err() != nil {
			it.settle(result{err: canceled(it.ctx)}) // never sent
			continue
		}
		live = append(live, it)
	}
	for len(live) > 0 {
		var body bytes.Buffer
		body.WriteByte('[')
		for i, it := range live {
			if i > 0 {
				body.WriteByte(',')
			}
			body.Write(it.json)
		}
		body.WriteByte(']')
		a, err := c.do(context.Background(), req{
			method: http.MethodPost, path: "/schedule/batch", body: body.Bytes(),
			headers: minimalHeader, safe: true,
		})
		if err != nil {
			var e *Error
			errors.As(err, &e)
			if bad := badItems(e, live); bad != nil {
				next := live[:0:0]
				for i, it := range live {
					if ie, ok := bad[i]; ok {
						it.settle(result{err: ie})
					} else {
						next = append(next, it)
					}
				}
				live = next
				continue
			}
			if e != nil && e.Code == CodePayloadTooLarge && len(live) > 1 {
				half := (len(live) + 1) / 2
				var wg sync.WaitGroup
				for _, part := range [][]*item{live[:half], live[half:]} {
					wg.Add(1)
					go func(p []*item) {
						defer wg.Done()
						c.sendBatch(p)
					}(part)
				}
				wg.Wait()
				return
			}
			for _, it := range live {
				it.settle(result{err: err})
			}
			return
		}
		var out struct {
			Jobs []JobRef `json:"jobs"`
		}
		_ = json.Unmarshal(a.body, &out)
		for i, it := range live {
			if i < len(out.Jobs) {
				ref := out.Jobs[i]
				it.settle(result{ref: &ref})
			} else {
				it.settle(result{err: &Error{Status: a.status, Code: CodeUnknown, Message: "the batch answer lacks this job", Body: a.body}})
			}
		}
		return
	}
}

// badItems: the items (by index in live) an error is about, each with an
// error of its own; nil if the error is about the whole batch.
func badItems(e *Error, live []*item) map[int]*Error {
	if e == nil {
		return nil
	}
	if e.Code == CodeInvalidArgument && len(e.Errors) > 0 {
		bad := map[int]*Error{}
		for _, ie := range e.Errors {
			if ie.Index < 0 || ie.Index >= len(live) {
				continue
			}
			if _, seen := bad[ie.Index]; seen {
				continue
			}
			msg := ie.Message
			if msg == "" {
				msg = e.Message
			}
			bad[ie.Index] = &Error{Status: e.Status, Code: e.Code, Message: msg, Field: ie.Field, Body: e.Body}
		}
		if len(bad) == 0 {
			return nil
		}
		return bad
	}
	if e.Code == CodeForbidden || e.Code == CodeConflict || e.Code == CodeInvalidArgument {
		m := jobsField.FindStringSubmatch(e.Field)
		if m == nil {
			return nil
		}
		i, _ := strconv.Atoi(m[1])
		if i >= len(live) {
			return nil
		}
		return map[int]*Error{i: {Status: e.Status, Code: e.Code, Message: e.Message, Field: m[2], Body: e.Body, RetryAfter: e.RetryAfter}}
	}
	return nil
}

// ScheduleMany sends jobs as explicit batches (chunks of the client's max
// batch items and bytes), each chunk all-or-nothing, in order, each item
// with an idempotency key (IdempotencyKeys, or random ones). It returns
// each job's JobRef in the order given. A chunk refused stops there: the
// JobRefs of the chunks before are returned with the error, whose Errors
// indexes (and a `jobs[<i>]` Field) are indexes in jobs.
func (c *Client) ScheduleMany(ctx context.Context, jobs []Job, opts ...CallOption) ([]JobRef, error) {
	o := collect(opts)
	if o.keys != nil && len(o.keys) != len(jobs) {
		return nil, &Error{Code: CodeInvalidArgument, Message: "IdempotencyKeys: one per job"}
	}
	out := make([]JobRef, 0, len(jobs))
	var chunk [][]byte
	size, start := 2, 0
	send := func() error {
		if len(chunk) == 0 {
			return nil
		}
		body := append([]byte{'['}, bytes.Join(chunk, []byte{','})...)
		body = append(body, ']')
		var r struct {
			Jobs []JobRef `json:"jobs"`
		}
		if err := c.call(ctx, http.MethodPost, "/schedule/batch", nil, body, &r, true, minimalHeader); err != nil {
			var e *Error
			if errors.As(err, &e) {
				for i := range e.Errors {
					e.Errors[i].Index += start
				}
				if m := jobsField.FindStringSubmatch(e.Field); m != nil {
					n, _ := strconv.Atoi(m[1])
					e.Field = "jobs[" + strconv.Itoa(n+start) + "]"
					if m[2] != "" {
						e.Field += "." + m[2]
					}
				}
			}
			return err
		}
		out = append(out, r.Jobs...)
		start += len(chunk)
		chunk, size = nil, 2
		return nil
	}
	for i := range jobs {
		key := NewKey()
		if o.keys != nil {
			key = o.keys[i]
		}
		f := jobs[i].fields(true)
		f["idempotency_key"] = key
		data, err := json.Marshal(f)
		if err != nil {
			return out, &Error{Code: CodeInvalidArgument, Message: "encoding job " + strconv.Itoa(i) + ": " + err.Error(), Err: err}
		}
		if len(chunk) > 0 && (len(chunk) >= c.cfg.maxBatch || size+len(data)+1 > c.cfg.maxBatchBytes) {
			if err := send(); err != nil {
				return out, err
			}
		}
		chunk = append(chunk, data)
		size += len(data) + 1
	}
	if err := send(); err != nil {
		return out, err
	}
	return out, nil
}
