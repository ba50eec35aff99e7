package rmqs

import (
	"encoding/json"
	"net/url"
	"strconv"
	"time"
)

// Properties are a job's AMQP basic properties.
type Properties struct {
	ContentType     string `json:"content_type,omitempty"`
	ContentEncoding string `json:"content_encoding,omitempty"`
	CorrelationID   string `json:"correlation_id,omitempty"`
	ReplyTo         string `json:"reply_to,omitempty"`
	MessageID       string `json:"message_id,omitempty"`
	Type            string `json:"type,omitempty"`
	AppID           string `json:"app_id,omitempty"`
	UserID          string `json:"user_id,omitempty"`
	Priority        *int   `json:"priority,omitempty"`
	Expiration      string `json:"expiration,omitempty"`
	Persistent      *bool  `json:"persistent,omitempty"`
}

// Job is a job request (POST /schedule, an item of POST /schedule/batch).
//
// Body is a string, or anything encoding/json makes an object or array of
// (a map, a slice, a struct); BodyBase64 is the alternative for binary
// bodies. DeliverAt, if set, is the delivery time; otherwise Delay (0:
// due now) is sent as delay_ms.
type Job struct {
	Exchange    string
	RoutingKey  string
	Body        any
	BodyBase64  string
	Delay       time.Duration
	DeliverAt   time.Time
	Headers     map[string]any
	Properties  *Properties
	MaxAttempts int
	Priority    int
	// Extra members sent as they are (for members this version lacks).
	Extra map[string]any
}

func (j *Job) fields(timing bool) map[string]any {
	m := make(map[string]any, 8+len(j.Extra))
	m["exchange"] = j.Exchange
	m["routing_key"] = j.RoutingKey
	if j.BodyBase64 != "" {
		m["body_base64"] = j.BodyBase64
	} else if j.Body != nil {
		m["body"] = j.Body
	} else {
		m["body"] = ""
	}
	if timing {
		if !j.DeliverAt.IsZero() {
			m["deliver_at"] = j.DeliverAt.UTC().Format(time.RFC3339Nano)
		} else {
			m["delay_ms"] = j.Delay.Milliseconds()
		}
	}
	if len(j.Headers) > 0 {
		m["headers"] = j.Headers
	}
	if j.Properties != nil {
		m["properties"] = j.Properties
	}
	if j.MaxAttempts != 0 {
		m["max_attempts"] = j.MaxAttempts
	}
	if j.Priority != 0 {
		m["priority"] = j.Priority
	}
	for k, v := range j.Extra {
		m[k] = v
	}
	return m
}

// MarshalJSON encodes the job as the API's ScheduleRequest.
func (j Job) MarshalJSON() ([]byte, error) { return json.Marshal(j.fields(true)) }

// JobRef is what Schedule and ScheduleMany return (a JobMinimal).
type JobRef struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	DeliverAt time.Time `json:"deliver_at"`
}

// AttemptError is one failed publish of a job.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// JobInfo is a stored job as the API answers it.
type JobInfo struct {
	ID            string          `json:"id"`
	Status        string          `json:"status"`
	DeliverAt     time.Time       `json:"deliver_at"`
	Source        string          `json:"source"`
	Exchange      string          `json:"exchange"`
	RoutingKey    string          `json:"routing_key"`
	NextAttemptAt time.Time       `json:"next_attempt_at"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	SentAt        *time.Time      `json:"sent_at"`
	FailedAt      *time.Time      `json:"failed_at"`
	Attempts      int             `json:"attempts"`
	MaxAttempts   int             `json:"max_attempts"`
	Priority      int             `json:"priority"`
	HeldBy        *string         `json:"held_by"`
	HeldMs        int64           `json:"held_ms"`
	LastError     *string         `json:"last_error"`
	Headers       map[string]any  `json:"headers"`
	Properties    Properties      `json:"properties"`
	Body          json.RawMessage `json:"body,omitempty"`
	BodyBase64    string          `json:"body_base64,omitempty"`
	Schedule      string          `json:"schedule,omitempty"`
	FireAt        *time.Time      `json:"fire_at,omitempty"`
	AttemptErrors []AttemptError  `json:"attempt_errors,omitempty"`
}

// Filter selects jobs (GET /jobs, GET /jobs/count, POST /jobs/bulk).
// Zero members are not sent.
type Filter struct {
	Status      string
	Source      string
	MessageID   string
	Schedule    string
	HeldBy      string
	Exchange    string
	RoutingKey  string
	DeliverFrom time.Time
	DeliverTo   time.Time
	IDPrefix    string
	Header      string // name:value
	Q           string
	// GET /jobs only: due, -due, created, -created.
	Order string
	// GET /jobs only: the page size asked of the service (1-1000).
	PageSize int
}

func (f *Filter) values(listing bool) url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("status", f.Status)
	set("source", f.Source)
	set("message_id", f.MessageID)
	set("schedule", f.Schedule)
	set("held_by", f.HeldBy)
	set("exchange", f.Exchange)
	set("routing_key", f.RoutingKey)
	if !f.DeliverFrom.IsZero() {
		v.Set("deliver_from", f.DeliverFrom.UTC().Format(time.RFC3339Nano))
	}
	if !f.DeliverTo.IsZero() {
		v.Set("deliver_to", f.DeliverTo.UTC().Format(time.RFC3339Nano))
	}
	set("id_prefix", f.IDPrefix)
	set("header", f.Header)
	set("q", f.Q)
	if listing {
		set("order", f.Order)
		if f.PageSize > 0 {
			v.Set("limit", strconv.Itoa(f.PageSize))
		}
	}
	return v
}

// JobCount is GET /jobs/count's answer.
type JobCount struct {
	Count  int64 `json:"count"`
	Capped bool  `json:"capped"`
}

// When is a new delivery time: DeliverAt if set, otherwise Delay from now.
type When struct {
	DeliverAt time.Time
	Delay     time.Duration
}

func (w *When) body() map[string]any {
	m := map[string]any{}
	if w == nil {
		return m
	}
	if !w.DeliverAt.IsZero() {
		m["deliver_at"] = w.DeliverAt.UTC().Format(time.RFC3339Nano)
	} else {
		m["delay_ms"] = w.Delay.Milliseconds()
	}
	return m
}

// BulkRequest starts a bulk action (POST /jobs/bulk).
type BulkRequest struct {
	Action string // cancel or retry
	Filter Filter
	// Required for a cancel with an empty filter.
	All bool
}

// BulkOperation is a bulk action's progress.
type BulkOperation struct {
	ID           string            `json:"id"`
	Action       string            `json:"action"`
	Filter       map[string]string `json:"filter"`
	State        string            `json:"state"` // running, done, failed
	MatchedSoFar int64             `json:"matched_so_far"`
	Done         int64             `json:"done"`
	Skipped      int64             `json:"skipped"`
	Errors       int64             `json:"errors"`
	StartedAt    time.Time         `json:"started_at"`
	FinishedAt   *time.Time        `json:"finished_at"`
}

// ScheduleSpec is a recurring schedule (PUT /schedules/{name}): Cron or
// Every, and the job template (its Delay and DeliverAt are not sent).
type ScheduleSpec struct {
	Cron           string
	Every          time.Duration
	Timezone       string
	StartAt        time.Time
	EndAt          time.Time
	Paused         bool
	MisfireGraceMs *int64
	DST            *ScheduleDST
	Job            Job
	Extra          map[string]any
}

// MarshalJSON encodes the spec as the API's ScheduleSpec.
func (s ScheduleSpec) MarshalJSON() ([]byte, error) {
	m := map[string]any{"job": s.Job.fields(false)}
	if s.Cron != "" {
		m["cron"] = s.Cron
	}
	if s.Every != 0 {
		m["every_ms"] = s.Every.Milliseconds()
	}
	if s.Timezone != "" {
		m["timezone"] = s.Timezone
	}
	if !s.StartAt.IsZero() {
		m["start_at"] = s.StartAt.UTC().Format(time.RFC3339Nano)
	}
	if !s.EndAt.IsZero() {
		m["end_at"] = s.EndAt.UTC().Format(time.RFC3339Nano)
	}
	if s.Paused {
		m["paused"] = true
	}
	if s.MisfireGraceMs != nil {
		m["misfire_grace_ms"] = *s.MisfireGraceMs
	}
	if s.DST != nil {
		m["dst"] = s.DST
	}
	for k, v := range s.Extra {
		m[k] = v
	}
	return json.Marshal(m)
}

// Schedule is a stored schedule. Job is the template as the API answers it.
type Schedule struct {
	Name                string          `json:"name"`
	Cron                *string         `json:"cron"`
	EveryMs             *int64          `json:"every_ms"`
	Timezone            string          `json:"timezone"`
	StartAt             *time.Time      `json:"start_at"`
	EndAt               *time.Time      `json:"end_at"`
	Paused              bool            `json:"paused"`
	MisfireGraceMs      *int64          `json:"misfire_grace_ms"`
	DST                 *ScheduleDST    `json:"dst"`
	Job                 map[string]any  `json:"job"`
	State               string          `json:"state"`
	Generation          int64           `json:"generation"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
	LastRunAt           *time.Time      `json:"last_run_at"`
	LastJobID           *string         `json:"last_job_id"`
	LastRun             json.RawMessage `json:"last_run,omitempty"`
	FailureStreak       int64           `json:"failure_streak"`
	FailureStreakCapped bool            `json:"failure_streak_capped"`
	NextRuns            []NextRun       `json:"next_runs"`
}

// ScheduleDST: what a cron schedule does with a local time that a DST
// change skips (next, skip) or repeats (first, both).
type ScheduleDST struct {
	Skipped  string `json:"skipped,omitempty"`
	Repeated string `json:"repeated,omitempty"`
}

// NextRun is a coming run of a schedule.
type NextRun struct {
	UTC   time.Time `json:"utc"`
	Local string    `json:"local"`
}

// LimitMatch selects the jobs a limit applies to.
type LimitMatch struct {
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
}

// QueueHold holds jobs while a queue has more than Messages ready.
type QueueHold struct {
	Queue    string `json:"queue"`
	Messages int64  `json:"messages"`
}

// LimitSpec is a rate limit (PUT /limits/{name}).
type LimitSpec struct {
	Match                  *LimitMatch `json:"match,omitempty"`
	RatePerS               float64     `json:"rate_per_s,omitempty"`
	Burst                  float64     `json:"burst,omitempty"`
	Key                    string      `json:"key,omitempty"`
	MaxBuckets             int64       `json:"max_buckets,omitempty"`
	HoldWhenQueueReadyOver *QueueHold  `json:"hold_when_queue_ready_over,omitempty"`
}

// Limit is a stored limit.
type Limit struct {
	Name                   string          `json:"name"`
	Match                  *LimitMatch     `json:"match"`
	RatePerS               *float64        `json:"rate_per_s"`
	Burst                  *float64        `json:"burst"`
	Key                    *string         `json:"key"`
	MaxBuckets             *int64          `json:"max_buckets"`
	HoldWhenQueueReadyOver *QueueHold      `json:"hold_when_queue_ready_over"`
	Generation             int64           `json:"generation"`
	CreatedAt              time.Time       `json:"created_at"`
	UpdatedAt              time.Time       `json:"updated_at"`
	Stats                  json.RawMessage `json:"stats"`
}

// Document is an answer the client leaves as decoded JSON (GET /stats,
// GET /status, GET /stats/failures).
type Document map[string]any
