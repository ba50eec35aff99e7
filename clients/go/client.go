// Package rmqs is a Go client of rmq-scheduler's HTTP API
// (api/openapi.yaml), standard library only.
//
// Schedule batches: a call made while fewer than 8 batches are out goes at
// once, with whatever is queued beside it; the calls made while 8 are out
// wait for one of them to end (or the linger, if set) and go together (up
// to the maximum batch items or bytes) as one POST /schedule/batch. Each caller
// gets its own job or its own error. Every call retries
// what is safe to retry (connection errors, 503, 429) with capped
// exponential backoff and full jitter; scheduling carries idempotency keys
// so that a retry never creates a second job.
package rmqs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// MaxServerBatch is the most items POST /schedule/batch takes.
const MaxServerBatch = 1000

// maxInflightBatches bounds the batches (and so the connections) in
// flight at once; while they are all busy the next batch keeps growing.
const maxInflightBatches = 32

// eagerBatches: with the default linger, a batch starts at once while
// fewer than this many are in flight; past it, calls gather until one ends.
const eagerBatches = 8

// RetryPolicy: Attempts tries in all (the first included); try n waits
// uniformly in [0, min(Cap, Base * 2^(n-1))] (full jitter) unless the
// answer had a Retry-After.
type RetryPolicy struct {
	Attempts int
	Base     time.Duration
	Cap      time.Duration
}

// DefaultRetry is 5 attempts, 50 ms base, 2 s cap.
var DefaultRetry = RetryPolicy{Attempts: 5, Base: 50 * time.Millisecond, Cap: 2 * time.Second}

type config struct {
	token          string
	timeout        time.Duration
	linger         time.Duration
	maxBatch       int
	maxBatchBytes  int
	maxOutstanding int
	retry          RetryPolicy
	httpClient     *http.Client
	headers        http.Header
}

// Option configures New.
type Option func(*config)

// WithToken sends `Authorization: Bearer <token>`.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithTimeout bounds each HTTP attempt (default 10 s); past it the call
// fails with CodeTimeout.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithLinger is how long a batch waits for more Schedule calls to join it.
// The default, 0, waits for nothing while fewer than 8 batches are out, and
// otherwise until one of them ends.
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// WithMaxBatch is the items per batch, at most 1000 (the default).
func WithMaxBatch(n int) Option { return func(c *config) { c.maxBatch = n } }

// WithMaxBatchBytes is the bytes per batch body (default 900 KiB; the
// service's default limit is 1 MiB).
func WithMaxBatchBytes(n int) Option { return func(c *config) { c.maxBatchBytes = n } }

// WithMaxOutstanding bounds the Schedule calls pending at once (default
// 10000); more block until there is room (or their context ends).
func WithMaxOutstanding(n int) Option { return func(c *config) { c.maxOutstanding = n } }

// WithRetry sets the retry policy (Attempts 1: no retries).
func WithRetry(p RetryPolicy) Option { return func(c *config) { c.retry = p } }

// WithHTTPClient uses an http.Client of your own (its Timeout is left as
// it is; the client's own timeout applies per attempt).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithTransport uses a RoundTripper of your own (e.g. an *http.Transport
// with a TLSClientConfig for a private CA).
func WithTransport(rt http.RoundTripper) Option {
	return func(c *config) { c.httpClient = &http.Client{Transport: rt} }
}

// WithHeader adds a header to every request (a "Host" sets the Host).
func WithHeader(name, value string) Option {
	return func(c *config) { c.headers.Add(name, value) }
}

// Client is safe for use by many goroutines.
type Client struct {
	base    *url.URL
	cfg     config
	hc      *http.Client
	ownHTTP bool

	queue chan *item
	sem   chan struct{} // a token per outstanding Schedule call
	slots chan struct{} // a token per batch in flight
	// inflight counts the batches out; ended is signalled when one ends
	// (buffered 1: a stale signal is checked against inflight).
	inflight atomic.Int64
	ended    chan struct{}
	mu       sync.RWMutex // closed vs. enqueueing
	closed   bool
	closing  chan struct{}
	closeMu  sync.Once
	senders  sync.WaitGroup // the sender goroutine
	batches  sync.WaitGroup // batches in flight

	retries atomic.Int64
}

// New makes a client of the service at url (http:// or https://).
func New(rawURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("rmqs: url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("rmqs: url: http or https only")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	cfg := config{
		timeout:        10 * time.Second,
		linger:         0,
		maxBatch:       MaxServerBatch,
		maxBatchBytes:  900 * 1024,
		maxOutstanding: 10000,
		retry:          DefaultRetry,
		headers:        http.Header{},
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxBatch < 1 {
		cfg.maxBatch = 1
	}
	if cfg.maxBatch > MaxServerBatch {
		cfg.maxBatch = MaxServerBatch
	}
	if cfg.maxOutstanding < 1 {
		cfg.maxOutstanding = 1
	}
	if cfg.retry.Attempts < 1 {
		cfg.retry.Attempts = 1
	}
	c := &Client{
		base:    u,
		cfg:     cfg,
		hc:      cfg.httpClient,
		queue:   make(chan *item, cfg.maxBatch),
		sem:     make(chan struct{}, cfg.maxOutstanding),
		slots:   make(chan struct{}, maxInflightBatches),
		ended:   make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
	if c.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 32
		c.hc = &http.Client{Transport: t}
		c.ownHTTP = true
	}
	c.senders.Add(1)
	go c.sender()
	return c, nil
}

// Retries is how many tries were repeated, in all (for monitoring).
func (c *Client) Retries() int64 { return c.retries.Load() }

// Outstanding is how many Schedule calls are pending now.
func (c *Client) Outstanding() int { return len(c.sem) }

// Close sends what is buffered, waits for the batches in flight, then
// releases idle connections (of the transport the client made). Schedule
// after Close fails with CodeClosed.
func (c *Client) Close() error {
	c.closeMu.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.closing)
		c.senders.Wait()
		c.batches.Wait()
		if c.ownHTTP {
			c.hc.CloseIdleConnections()
		}
	})
	return nil
}

// ------------------------------------------------------------ call options

type callOpts struct {
	key     string
	keys    []string
	headers http.Header
	full    bool
}

// CallOption configures one call.
type CallOption func(*callOpts)

// IdempotencyKey is the call's idempotency key (Schedule: the item's
// idempotency_key; ScheduleOne, RunSchedule: the Idempotency-Key header).
// Without it a random one is generated, so that retries are safe.
func IdempotencyKey(key string) CallOption { return func(o *callOpts) { o.key = key } }

// IdempotencyKeys are ScheduleMany's item keys, one per job.
func IdempotencyKeys(keys []string) CallOption { return func(o *callOpts) { o.keys = keys } }

// Header adds a header to this call's requests.
func Header(name, value string) CallOption {
	return func(o *callOpts) {
		if o.headers == nil {
			o.headers = http.Header{}
		}
		o.headers.Add(name, value)
	}
}

func collect(opts []CallOption) callOpts {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// NewKey is a random idempotency key (32 hex digits).
func NewKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// ------------------------------------------------------------ transport

type answer struct {
	status int
	header http.Header
	body   []byte
}

type req struct {
	method  string
	path    string
	query   url.Values
	body    []byte // nil: none
	headers http.Header
	safe    bool // repeatable after a reset connection
}

func canceled(ctx context.Context) *Error {
	return &Error{Code: CodeCanceled, Message: "the call's context ended: " + ctx.Err().Error(), Err: ctx.Err()}
}

// do sends one API call with retries; a 2xx answer, or a typed error.
func (c *Client) do(ctx context.Context, r req) (*answer, error) {
	target := c.base.Scheme + "://" + c.base.Host + c.base.EscapedPath() + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	p := c.cfg.retry
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			return nil, canceled(ctx)
		}
		a, err := c.once(ctx, r, target)
		var wait time.Duration
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				return nil, e // timeout, canceled
			}
			if !(isDialError(err) || (r.safe && isResetError(err))) || attempt >= p.Attempts {
				return nil, &Error{Code: CodeConnection, Message: fmt.Sprintf("%s %s: %v", r.method, r.path, err), Err: err}
			}
			wait = backoff(attempt, p)
		} else {
			if a.status >= 200 && a.status < 300 {
				return a, nil
			}
			e := errorFromAnswer(a.status, a.body, a.header)
			if (a.status != 503 && a.status != 429) || attempt >= p.Attempts {
				return nil, e
			}
			wait = e.RetryAfter
			if wait == 0 {
				wait = backoff(attempt, p)
			}
		}
		c.retries.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, canceled(ctx)
		}
	}
}

func (c *Client) once(ctx context.Context, r req, target string) (*answer, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(actx, r.method, target, body)
	if err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: err.Error(), Err: err}
	}
	hr.Header.Set("Accept", "application/json")
	for k, vs := range c.cfg.headers {
		hr.Header[k] = append([]string(nil), vs...)
	}
	for k, vs := range r.headers {
		hr.Header[k] = append([]string(nil), vs...)
	}
	if h := hr.Header.Get("Host"); h != "" {
		hr.Host = h
		hr.Header.Del("Host")
	}
	if c.cfg.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.cfg.token)
	}
	if r.body != nil && hr.Header.Get("Content-Type") == "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(hr)
	var data []byte
	if err == nil {
		data, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, canceled(ctx)
		}
		if actx.Err() != nil {
			return nil, &Error{Code: CodeTimeout, Message: fmt.Sprintf("%s %s: no answer within %v", r.method, r.path, c.cfg.timeout), Err: err}
		}
		return nil, err
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// isDialError: nothing was sent, so any request may be repeated.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func isResetError(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "server closed") ||
		strings.Contains(err.Error(), "connection reset")
}

var jitter = struct {
	sync.Mutex
	r *mrand.Rand
}{r: mrand.New(mrand.NewSource(time.Now().UnixNano()))}

// backoff: full jitter, uniform in [0, min(cap, base * 2^(attempt-1))].
func backoff(attempt int, p RetryPolicy) time.Duration {
	d := p.Base
	for i := 1; i < attempt && d < p.Cap; i++ {
		d *= 2
	}
	if d > p.Cap {
		d = p.Cap
	}
	if d <= 0 {
		return 0
	}
	jitter.Lock()
	defer jitter.Unlock()
	return time.Duration(jitter.r.Int63n(int64(d) + 1))
}

// call: a JSON request, the answer decoded into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in any, out any, safe bool, h http.Header) error {
	r := req{method: method, path: path, query: query, headers: h, safe: safe}
	if in != nil {
		switch b := in.(type) {
		case []byte:
			r.body = b
		case json.RawMessage:
			r.body = b
		default:
			data, err := json.Marshal(in)
			if err != nil {
				return &Error{Code: CodeInvalidArgument, Message: "encoding the request: " + err.Error(), Err: err}
			}
			r.body = data
		}
	}
	a, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	if out != nil && len(a.body) > 0 {
		if err := json.Unmarshal(a.body, out); err != nil {
			return &Error{Status: a.status, Code: CodeUnknown, Message: "decoding the answer: " + err.Error(), Body: a.body, Err: err}
		}
	}
	return nil
}

// Do sends any request (for what the client lacks): body is JSON-encoded
// unless it is a []byte; the answer is decoded into out unless out is nil.
// Only GET, PUT and DELETE are retried after a reset connection.
func (c *Client) Do(ctx context.Context, method, path string, body, out any, opts ...CallOption) error {
	o := collect(opts)
	safe := method == http.MethodGet || method == http.MethodPut || method == http.MethodDelete
	return c.call(ctx, method, path, nil, body, out, safe, o.headers)
}

func seg(s string) string { return url.PathEscape(s) }
